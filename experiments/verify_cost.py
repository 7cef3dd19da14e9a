"""Verify cost in AR steps, with the CPU kernel and without, in one run.

The target forward over a block of T tokens (`specjax.bench.verify_cost.measure_verify_cost`,
64 committed tokens in the cache) as a multiple of the one-token forward of the same layout,
and of the XLA layout's one-token forward (what decoding cost before the kernel). Both
layouts are timed in the same process, alternating per repeat.

`--model ar`: the 110M bench model of bench_autoregressive.py (random Llama, D=768, 12 layers,
12 heads, F=2048, V=32000, tied, float32); `--model quickstart`: the quickstart target's
shape (6 x 384, 6 heads / 2 kv heads, F=1024, V=2048). `--target DIR` loads a model instead.

    python experiments/verify_cost.py --model ar --batch 1 8
    python experiments/verify_cost.py --model quickstart

Writes experiments/results/verify_cost_<model>.json (with the CPU's description).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax

import specjax as sj
from specjax.bench.verify_cost import measure_verify_cost
from specjax.kernels import build

SHAPES = {
    "ar": dict(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=12,
               head_dim=64, intermediate_size=2048, tie_word_embeddings=True),
    "quickstart": dict(vocab_size=2048, hidden_size=384, num_layers=6, num_heads=6,
                       num_kv_heads=2, head_dim=64, intermediate_size=1024),
}  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SHAPES), default="ar")
    ap.add_argument("--target", default="")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 2, 3, 5, 8, 12, 16, 24, 32])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.target:
        model = sj.load_model(args.target)
    else:
        model = sj.Decoder(sj.ModelConfig(max_position_embeddings=512, **SHAPES[args.model]))
    rows = []
    for batch in args.batch:
        curves = {}
        for pack in (True, False):
            curves[pack] = measure_verify_cost(
                model, args.blocks, batch=batch, context=64, repeats=args.repeats, pack=pack
            )
        base = curves[False]["seconds"][0]
        print(f"batch {batch}: 1-token forward kernel {curves[True]['seconds'][0] * 1e3:.2f} ms, "
              f"XLA {base * 1e3:.2f} ms")  # fmt: skip
        print(f"{'T':>3} {'kernel (own AR)':>15} {'XLA (own AR)':>13} {'kernel / XLA AR':>15}")
        for i, T in enumerate(curves[True]["blocks"]):
            k, x = curves[True], curves[False]
            print(
                f"{T:>3} {k['cost'][i]:15.2f} {x['cost'][i]:13.2f} {k['seconds'][i] / base:15.2f}"
            )
            rows.append({"batch": batch, "T": T, "kernel_ms": k["seconds"][i] * 1e3,
                         "xla_ms": x["seconds"][i] * 1e3, "kernel_cost": k["cost"][i],
                         "xla_cost": x["cost"][i]})  # fmt: skip
    result = {"model": args.target or args.model,
              "cpu": build.cpu_description(), "jax": jax.__version__, "rows": rows}  # fmt: skip
    out = Path(args.out or f"experiments/results/verify_cost_{args.model}.json")
    out.write_text(json.dumps(result, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
