"""Does any decode program copy or convert a whole weight once a call? A scan of the compiled
programs, for weights read in bfloat16 (the target's, `weight_dtype`, and the drafts',
`draft_weight_dtype`).

XLA:CPU runs most bfloat16 ops (a gather, a slice) in float32, and a decode loop hoists an op
on a weight, which is the same on every turn, out of the loop: a float32 copy of the weight,
made once a call (the bfloat16 tied table's lookup did this: LOG 2026-12-07 (4)). This dumps
the optimized generate program of every method on a small random Llama (tied and untied;
EAGLE-3 with and without a reduced draft vocabulary), and lists every convert, bit-cast,
copy or fusion in the program's entry (outside the loop) that makes a float32, bfloat16 or
uint16 array of at least 16,384 values (the smallest weight's size; the activations and
caches of this model are smaller). "clean" is the expected answer; `--old-lookup` puts
back XLA's gather for the table, to see the scan find it.

    cd experiments && python weight_copies.py
"""

from __future__ import annotations

import glob
import re
import shutil
import sys

from hlo_dump import generate_dump_dir

_DUMP = generate_dump_dir("weight-copies")  # before jax: re-runs with XLA's dump on

import numpy as np  # noqa: E402

import specjax as sj  # noqa: E402
from specjax import kernels  # noqa: E402

V = 1024
BASE = sj.ModelConfig(model_type="llama", vocab_size=V, hidden_size=128, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=256,
                      max_position_embeddings=256)  # fmt: skip
_MADE = re.compile(r"= (f32|bf16|u16)\[([\d,]+)\]\S* (convert|bitcast-convert|copy|fusion)\(")


def whole_weight_ops() -> list[str]:
    """The entry's ops that make an array of >= 16,384 values, in the dumped programs."""
    hits = set()
    for path in glob.glob(f"{_DUMP}/*generate*after_optimizations.txt"):
        text = open(path).read()
        for m in _MADE.finditer(text[text.index("\nENTRY") :]):
            if np.prod([int(x) for x in m.group(2).split(",")]) >= 16384:
                hits.add(f"{m.group(1)}[{m.group(2)}] {m.group(3)}")
    shutil.rmtree(_DUMP, ignore_errors=True)
    return sorted(hits)


def main():
    if "--old-lookup" in sys.argv:
        kernels.table_rows = kernels.gather_rows
    prompts = [np.random.default_rng(0).integers(0, V, 20).tolist()]
    for tie in (True, False):
        target = sj.Decoder(BASE.replace(tie_word_embeddings=tie), seed=0)
        draft = sj.Decoder(BASE.replace(num_layers=1, tie_word_embeddings=tie), seed=1)
        heads = sj.MedusaHeads.for_target(target, num_heads=3, shared_lm_head=True)
        configs = {
            "autoregressive": None,
            "draft_model": {"method": "draft_model", "model": draft},
            "medusa": {"method": "medusa", "model": heads},
            "eagle3": {"method": "eagle3", "model": sj.EagleHead.for_target(target, seed=1)},
            "eagle3, 256-id draft vocabulary": {
                "method": "eagle3",
                "model": sj.EagleHead.for_target(target, seed=1, draft_vocab_size=256),
            },
        }
        for name, cfg in configs.items():
            for wdt, dwdt in (("bfloat16", None), (None, "bfloat16")):
                if cfg is None and dwdt:
                    continue
                spec = None if cfg is None else {**cfg, "num_speculative_tokens": 3}
                if spec is not None and dwdt:
                    spec["draft_weight_dtype"] = dwdt
                sj.generate(target, prompts, 8, stop_token_ids=[], speculative_config=spec,
                            weight_dtype=wdt)  # fmt: skip
                found = whole_weight_ops()
                label = f"tied={tie!s:5} {name}: target {wdt or 'float32'}, drafts {dwdt or 'as stored'}"
                print(f"{label} -> {found or 'clean'}", flush=True)


if __name__ == "__main__":
    main()
