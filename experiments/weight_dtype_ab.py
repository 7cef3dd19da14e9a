"""Weights read in bfloat16 on the CPU kernel: the drafts' (lossless) and the target's, timed.

`speculative_config["draft_weight_dtype"] = "bfloat16"` has the draft's matmul weights read
rounded to bfloat16 (half the bytes a drafting forward streams; activations and accumulation
stay float32; the target still verifies, so the tokens are the target's).
`sj.generate(weight_dtype="bfloat16")` does the same to the target: a slightly different
model, whose AR is the baseline of its methods.

This times, in one process and alternating every setting on every prompt, a 1-token call and
a `--new`-token call of: AR with the target's weights as stored and in bfloat16, and each
method (the trained heads given, the draft LM if given) with (target as stored, drafts as
stored), (target as stored, drafts in bfloat16) and (target in bfloat16, drafts in bfloat16),
T=0, batch 1, held-out prompts of the embedded corpus. It prints, per setting: tau, the
steady-state step ((long - short) / steps) in steps of the AR of the same target weights, the
speedup per step (tau / step) and the whole-call speedup against that AR, and whether the
tokens equal that AR's (they must with drafts in bfloat16; the target in bfloat16 is compared
with its own AR).

    cd experiments && python weight_dtype_ab.py --target ../workdirs/qs9/target/hf \
        --heads ../workdirs/qs9/medusa ../workdirs/qs9/eagle3 --draft ../workdirs/qs9/draft/hf

`--target` may be a GGUF file (SmolLM2: `--heads` optional; with no heads and no draft only
AR and ngram run). `--out` writes the table as JSON with the CPU's description.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from medusa_cost import held_out

import specjax as sj
from specjax.kernels import build


def settings(target, heads_paths, draft_path, depth, dynamic):
    """{name: (target weight_dtype, speculative_config or None, AR key)}."""
    depth_dyn, top_k, total = dynamic
    methods = {"ngram": {"method": "ngram", "num_speculative_tokens": depth}}
    for path in heads_paths:
        heads = sj.load_draft(path, target=target)
        m = heads.config.method
        methods[f"{m} chain {depth}"] = {"method": m, "model": heads,
                                         "num_speculative_tokens": depth}  # fmt: skip
        if m.startswith("eagle"):
            methods[f"{m} dynamic {depth_dyn},{top_k},{total}"] = {
                "method": m, "model": heads, "num_speculative_tokens": depth_dyn,
                "draft_tree": {"dynamic": {"top_k": top_k, "total_tokens": total}},
            }  # fmt: skip
    if draft_path:
        draft = sj.load_model(draft_path)
        methods[f"draft_model chain {depth}"] = {"method": "draft_model", "model": draft,
                                                 "num_speculative_tokens": depth}  # fmt: skip
    out = {"AR": (None, None, "AR"), "AR, target bf16": ("bfloat16", None, "AR, target bf16")}
    for name, spec in methods.items():
        has_draft = "model" in spec
        out[name] = (None, spec, "AR")
        if has_draft:
            out[f"{name}, drafts bf16"] = (None, {**spec, "draft_weight_dtype": "bfloat16"}, "AR")
        bf = {**spec, "draft_weight_dtype": "bfloat16"} if has_draft else spec
        out[f"{name}, target + drafts bf16"] = ("bfloat16", bf, "AR, target bf16")
    return out


def recorded(args) -> dict:
    """The arguments as written to --out: a path outside the working directory (an installed
    package's GGUF) by its file name only."""
    out = vars(args).copy()
    if Path(out["target"]).is_absolute():
        out["target"] = Path(out["target"]).name
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="an HF directory, LM workdir or GGUF file")
    ap.add_argument("--heads", nargs="*", default=[], help="Medusa / EAGLE heads dirs")
    ap.add_argument("--draft", default="", help="a draft LM (draft_model chain)")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--dynamic", default="4,2,6", help="EAGLE: depth,top_k,total_tokens")
    ap.add_argument("--new", type=int, default=65)
    ap.add_argument("--prompts", type=int, default=2, help="held-out prompts per category")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    target = sj.load_model(args.target)
    prompts = held_out(target, args.prompts)
    dynamic = tuple(int(v) for v in args.dynamic.split(","))
    runs = settings(target, args.heads, args.draft, args.depth, dynamic)

    def call(name, prompt, n):
        dtype, spec, _ = runs[name]
        t = time.perf_counter()
        out = sj.generate(target, [prompt], n, stop_token_ids=[], speculative_config=spec,
                          weight_dtype=dtype)  # fmt: skip
        return time.perf_counter() - t, out

    for name in runs:  # compile both lengths
        call(name, prompts[0], 1), call(name, prompts[0], args.new)
    rows = {name: [] for name in runs}  # per round and prompt: (short, long, steps, tau, tokens)
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for prompt in prompts:
            for name in order:
                short = call(name, prompt, 1)[0]
                long, out = call(name, prompt, args.new)
                tau = out.stats["mean_accepted_length"] or 1.0
                rows[name].append((short, long, out.stats["steps"], tau, out.tokens[0]))
    cpu = build.cpu_description()
    print("cpu:", cpu)
    print(f"{len(prompts)} held-out prompts, {args.new} new tokens, T=0, batch 1, "
          f"{args.rounds} rounds alternated")  # fmt: skip
    print(
        "| setting | tau | step (AR steps) | speedup per step | whole-call speedup | tokens = AR's |"
    )
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    table = []
    for name, rs in rows.items():
        ar = rows[runs[name][2]]
        tau = statistics.mean(x[3] for x in rs)
        step = statistics.median(
            ((lo - sh) / st) / ((alo - ash) / ast)
            for (sh, lo, st, _, _), (ash, alo, ast, _, _) in zip(rs, ar, strict=True)
        )
        whole = statistics.median(a[1] / x[1] for x, a in zip(rs, ar, strict=True))
        same = all(x[4] == a[4] for x, a in zip(rs, ar, strict=True))
        ms = statistics.median((lo - sh) / st for sh, lo, st, _, _ in rs) * 1e3
        table.append(dict(setting=name, tau=tau, step_ar=step, per_step=tau / step,
                          whole=whole, same_tokens=same, step_ms=ms))  # fmt: skip
        print(f"| {name} | {tau:.2f} | {step:.2f} | {tau / step:.2f}x | {whole:.2f}x | {same} |")
    ar32, ar16 = (next(t for t in table if t["setting"] == k) for k in ("AR", "AR, target bf16"))
    print(f"AR a step: {ar32['step_ms']:.3f} ms as stored, {ar16['step_ms']:.3f} ms in bfloat16 "
          f"({ar32['step_ms'] / ar16['step_ms']:.2f}x)")  # fmt: skip
    # The target in bfloat16 is another model: how long its greedy tokens stay the same.
    n = len(prompts)
    pairs = zip(rows["AR"][:n], rows["AR, target bf16"][:n], strict=True)
    agree = [next((i for i, (a, b) in enumerate(zip(x[4], y[4], strict=True)) if a != b), len(x[4]))
             for x, y in pairs]  # fmt: skip
    print(f"AR in bfloat16 against as stored: the same first {agree} of {args.new} tokens "
          f"on the {n} prompts")  # fmt: skip
    table.append({"setting": "agreement", "same_prefix": agree, "new": args.new})
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"cpu": cpu, "args": recorded(args), "rows": table}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
