"""Peak memory of the verifier at real scale, measured from XLA's compiled memory analysis.

The step after the target's forward: the logits [B, P+1, V] become the processed laws the mode
needs and the verifier walks the block. Nothing is allocated: the function is lowered on
abstract shapes and compiled, and XLA reports its temporaries.

    python experiments/verifier_memory.py --batch 32 --nodes 64 --vocab 151936
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from specjax import sampling as sp
from specjax.decoding.trees import chain as chain_tree
from specjax.decoding.verify import verify

MiB = 2**20
HIDDEN = 64  # a small stand-in for the last hidden state: the LM head's output is what counts


def post_forward(mode: str, sampling: sp.SamplingParams, chain, laws_first: bool):
    """The step's code after the forward. laws_first: the engine before 2026-12-03, which made
    the processed laws [B, P+1, V] (one-hot at T=0) and handed them to the verifier."""

    def f(hidden, lm_head, tokens, draft_probs, key):
        logits = hidden @ lm_head  # [B, P+1, V] the LM head's output, as in the step
        key = None if mode == "greedy" else key
        q = draft_probs if mode == "probabilistic" else None
        if laws_first:
            return verify(sp.processed_probs(logits, sampling), tokens, chain, mode, key,
                          draft_probs=q)  # fmt: skip
        return verify(logits, tokens, chain, mode, key, draft_probs=q, sampling=sampling)

    return f


def measure(batch: int, nodes: int, vocab: int, laws_first: bool) -> dict:
    chain = chain_tree(nodes - 1)
    spec = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt)
    hidden = spec((batch, nodes, HIDDEN), jnp.float32)
    lm_head = spec((HIDDEN, vocab), jnp.float32)
    tokens = spec((batch, nodes), jnp.int32)
    key = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), batch))
    rows = {}
    for mode, t in (("greedy", 0.0), ("one_hot", 1.0), ("strict", 1.0), ("probabilistic", 1.0)):
        sampling = sp.SamplingParams(temperature=t)
        q = spec((batch, nodes, vocab), jnp.float32) if mode == "probabilistic" else None
        fn = jax.jit(post_forward(mode, sampling, chain, laws_first))
        compiled = fn.lower(hidden, lm_head, tokens, q, key).compile()
        m = compiled.memory_analysis()
        rows[mode] = {
            "arguments_mib": m.argument_size_in_bytes / MiB,
            "temporaries_mib": m.temp_size_in_bytes / MiB,
            "peak_mib": (m.argument_size_in_bytes + m.temp_size_in_bytes + m.output_size_in_bytes)
            / MiB,
        }
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--nodes", type=int, default=64, help="P+1 (the root and P drafts)")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--laws-first", action="store_true", help="the engine before 2026-12-03")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = measure(a.batch, a.nodes, a.vocab, a.laws_first)
    one = a.batch * a.nodes * a.vocab * 4 / MiB
    print(f"B={a.batch} P+1={a.nodes} V={a.vocab}: one [B, P+1, V] float32 array = {one:.0f} MiB")
    print(f"{'mode':14} {'arguments':>10} {'temporaries':>12} {'peak':>10}  (MiB)")
    for mode, r in rows.items():
        print(
            f"{mode:14} {r['arguments_mib']:10.0f} {r['temporaries_mib']:12.0f} {r['peak_mib']:10.0f}"
        )
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(
                {"batch": a.batch, "nodes": a.nodes, "vocab": a.vocab, "modes": rows}, fh, indent=1
            )


if __name__ == "__main__":
    main()
