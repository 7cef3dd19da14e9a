"""What the mesh code path costs on one device: generate with mesh=None against a (1, 1) mesh.

Same model, same prompts, same process; the two paths alternate (None, mesh, None, mesh, ...)
and each side's time is the median of the repeats. A random 6x384 Llama (the quickstart
target's shape, V=2048) decodes 64 tokens per row after 32-token prompts at batch 1 and 8,
autoregressive and with `ngram` (prompts that repeat themselves, so drafts get accepted) and
`draft_model` (a 2x128 draft). Writes experiments/results/mesh_overhead.json.

    python experiments/mesh_overhead.py --repeats 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import numpy as np

import specjax as sj
from specjax import parallel
from specjax.bench.timing import machine_info

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = sj.ModelConfig(
    vocab_size=2048, hidden_size=384, num_layers=6, num_heads=6, num_kv_heads=6,
    head_dim=64, intermediate_size=1536, max_position_embeddings=512,
)  # fmt: skip
DRAFT = TARGET.replace(hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=2,
                       intermediate_size=512)  # fmt: skip


def prompts(batch: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(batch):
        unit = rng.integers(0, TARGET.vocab_size, 8).tolist()
        rows.append((unit * 4)[:32])  # repeats itself: ngram finds matches
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args()
    target = sj.Decoder(TARGET, seed=0)
    draft = sj.Decoder(DRAFT, seed=1)
    mesh = parallel.make_mesh(1, 1)
    methods = {
        "autoregressive": None,
        "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
        "draft_model": {"method": "draft_model", "model": draft, "num_speculative_tokens": 4},
    }
    rows = []
    for batch in (1, 8):
        batch_prompts = prompts(batch)
        for name, spec in methods.items():
            sides = {"no mesh": None, "mesh (1, 1)": mesh}
            times = {side: [] for side in sides}
            tokens = {}
            for side, m in sides.items():  # warm-up: compile both programs
                out = sj.generate(target, batch_prompts, args.new, stop_token_ids=[],
                                  speculative_config=spec, mesh=m)  # fmt: skip
                tokens[side] = out.tokens
            assert tokens["no mesh"] == tokens["mesh (1, 1)"], (name, batch)
            for _ in range(args.repeats):
                for side, m in sides.items():
                    start = time.perf_counter()
                    sj.generate(target, batch_prompts, args.new, stop_token_ids=[],
                                speculative_config=spec, mesh=m)  # fmt: skip
                    times[side].append(time.perf_counter() - start)
            med = {side: statistics.median(v) for side, v in times.items()}
            row = {
                "method": name,
                "batch": batch,
                "no_mesh_s": med["no mesh"],
                "mesh_s": med["mesh (1, 1)"],
                "ratio": med["mesh (1, 1)"] / med["no mesh"],
                "times_s": times,
            }
            rows.append(row)
            print(f"{name:15s} b={batch}: no mesh {row['no_mesh_s'] * 1e3:7.1f} ms, "
                  f"mesh (1, 1) {row['mesh_s'] * 1e3:7.1f} ms, ratio {row['ratio']:.3f}")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": machine_info(), "jax": jax.__version__, "repeats": args.repeats,
           "new_tokens": args.new, "rows": rows}  # fmt: skip
    (RESULTS / "mesh_overhead.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
