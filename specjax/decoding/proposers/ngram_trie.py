"""Lookahead's candidate trie: n-gram continuations of the root as one block, topology as data.

`NgramTrie` fixes what is static (G candidates of n tokens: P+1 nodes, paths of at most n);
`ngram_trie` builds one step's trie per row on device (shared prefixes share nodes,
duplicates are not offered) for the lookahead proposer (`lookahead.py`).

Axis letters follow `specjax/models/axes.py`: B batch, G candidates, n tokens a candidate.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from specjax.decoding.topology import Topology, check_size
from specjax.validate import check_int


@dataclasses.dataclass(frozen=True)
class NgramTrie:
    """Lookahead's verification branch: up to `num_candidates` n-grams of `length` tokens
    after the root, as a trie built every step (`ngram_trie`). P = num_candidates * length
    nodes (shared prefixes and duplicates leave nodes unoffered), paths of at most `length`.
    """

    num_candidates: int
    length: int

    def __post_init__(self):
        check_int("max_candidates", self.num_candidates, 1)
        check_int("ngram_size - 1", self.length, 1)
        check_size(self.num_drafts + 1, "lookahead's candidate trie")

    @property
    def num_nodes(self) -> int:
        return self.num_drafts + 1

    @property
    def num_drafts(self) -> int:
        return self.num_candidates * self.length

    @property
    def max_depth(self) -> int:
        return self.length


def ngram_trie(candidates, valid):
    """Candidate continuations of the root as one trie per row, topology as data.

    Node 1 + g * n + j holds candidate g's token j (depth j + 1). Where candidates g' < g share
    g's first j + 1 tokens, g's node is not offered and g's next node hangs under the first
    such g' (prefixes shared, duplicates skipped), so every offered path is a distinct prefix.

    Args:
      candidates: [B, G, n] int32 tokens; valid: [B, G] bool (candidate present).
    Returns:
      (tokens [B, G*n], valid [B, G*n], Topology with [B, G*n + 1] parents and depth).
    """
    B, G, n = candidates.shape
    same = candidates[:, :, None, :] == candidates[:, None, :, :]  # [B, G, G', n]
    prefix = jnp.cumprod(same, axis=-1).astype(bool) & valid[:, None, :, None]  # [B, G, G', n]
    first = jnp.argmax(prefix, axis=2).astype(jnp.int32)  # [B, G, n] first g' sharing prefix
    first = jnp.where(valid[:, :, None], first, jnp.arange(G, dtype=jnp.int32)[None, :, None])
    offered = valid[:, :, None] & (first == jnp.arange(G)[None, :, None])  # [B, G, n]
    node = 1 + first * n + jnp.arange(n, dtype=jnp.int32)[None, None, :]  # [B, G, n] owner
    parent = jnp.concatenate([jnp.zeros((B, G, 1), jnp.int32), node[:, :, :-1]], axis=2)
    depth = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.int32), (B, G, n))
    root = jnp.full((B, 1), -1, jnp.int32)
    topology = Topology(
        parents=jnp.concatenate([root, parent.reshape(B, G * n)], axis=1),
        depth=jnp.concatenate([jnp.zeros((B, 1), jnp.int32), depth.reshape(B, G * n)], axis=1),
    )
    return candidates.reshape(B, G * n), offered.reshape(B, G * n), topology
