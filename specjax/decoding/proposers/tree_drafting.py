"""Static-tree drafting, level by level: the steps draft_model and EAGLE share.

A static tree (`trees.Tree`, breadth first) is drafted one depth at a time: each level's
children come from their parents' scores (`child_scores`), as the parent's top-k (ranks
0..k-1, deterministic, for greedy / one_hot / strict) or as i.i.d. samples from its processed
law (probabilistic: the SpecInfer rule). `level_plan` gives the levels as static python ints,
`empty_draft` the block before any level, and `draft_level` fills one level of it; what a
proposer runs between levels to score the next one (a draft model's forward, EAGLE's
drafter) stays in the proposer.

Axis letters follow `specjax/models/axes.py`: B batch, P draft nodes (P+1 with the root),
V vocab; n nodes in a parent level, c in a child level.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax import sampling as sp
from specjax.decoding.proposers.base import Draft
from specjax.decoding.trees import Tree


class Level(NamedTuple):
    """One depth of a static tree: nodes start..end-1 and where their parents sit."""

    depth: int
    start: int  # block index of the level's first node
    end: int
    parent_start: int  # block index of the parent level's first node
    parent_idx: tuple[int, ...]  # each node's parent, as an index within the parent level
    ranks: tuple[int, ...]  # each node's sibling rank (top-k children: the rank-th best)


def child_scores(logits, sampling, sampled: bool):
    """What children are drawn from (sampled: processed log-probs) or ranked by (top-k).

    At T=0 the processed law is one-hot: ranks >= 1 would all tie at -inf and fall to the
    lowest token ids. Top-k children are ranked by the raw logits there (same rank 0).
    """
    if sampling.greedy and not sampled:
        return logits.astype(jnp.float32)  # [..., V]
    return sp.processed_logprobs(logits, sampling)  # [..., V]


def children(q_logp, parent_idx, ranks, key, first_node: int, sampled: bool):
    """Draft tokens of one tree level from their parents' scores.

    Args:
      q_logp: [B, n, V] the parent level's scores (`child_scores`): processed draft
        log-probs, raw logits for top-k children at T=0.
      parent_idx: static list, for each child node, its parent's index within that level.
      ranks: static list of each child's sibling rank (top-k children: the rank-th best).
      key: [B] keys; first_node: the block index of the first child (keys fold in node ids).
      sampled: children are i.i.d. samples from their parent's law (probabilistic rule).
    Returns:
      tokens [B, c] int32, and ok [B, c]: the child's score is finite. When top-k / top-p leave
      a parent fewer tokens than the tree's width, the extra ranks would be the lowest token ids
      at -inf; they are not drafts and must not be offered (`valid` in the Draft).
    """
    parent = jnp.asarray(parent_idx, jnp.int32)
    if sampled:
        nodes = first_node + jnp.arange(len(parent_idx))  # [c]

        def row(k, logp):  # logp [n, V]
            keys = jax.vmap(lambda n: jax.random.fold_in(k, n))(nodes)  # [c]
            return jax.vmap(jax.random.categorical)(keys, logp[parent])  # [c]

        tokens = jax.vmap(row)(key, q_logp).astype(jnp.int32)  # [B, c]
        return tokens, jnp.ones(tokens.shape, bool)  # a sample has positive probability
    k = max(ranks) + 1
    if k == 1:  # a chain's level: a reduction, not XLA:CPU's top_k (a sort)
        score = jnp.max(q_logp, axis=-1, keepdims=True)  # [B, n, 1]; NaN where a row has one
        top = sp.greedy_argmax(q_logp)[..., None]  # [B, n, 1]; ties: the lower id
    else:
        score, top = jax.lax.top_k(q_logp, k)  # [B, n, k]; ties keep the lower id first
    sel = (slice(None), parent, jnp.asarray(ranks))
    return top[sel].astype(jnp.int32), jnp.isfinite(score[sel])  # [B, c] each


def child_valid(valid, ok, parent_idx, parent_start: int):
    """A child is a draft when its own score is finite and its parent is one (no node is offered
    under an ancestor that was not). valid: [B, P+1] so far; ok: [B, c] from `children`."""
    parent = parent_start + jnp.asarray(parent_idx, jnp.int32)
    return ok & valid[:, parent]


def levels(tree: Tree) -> tuple[tuple[int, int], ...]:
    """(start, end) node-index ranges per depth; the static trees here are breadth-first."""
    depth = tree.depth.tolist()
    ranges = []
    for d in range(tree.max_depth + 1):
        idx = [j for j, dj in enumerate(depth) if dj == d]
        if idx != list(range(idx[0], idx[-1] + 1)):
            raise ValueError(f"draft tree nodes at depth {d} are not contiguous: {idx}")
        ranges.append((idx[0], idx[-1] + 1))
    return tuple(ranges)


def level_plan(tree: Tree) -> tuple[Level, ...]:
    """The levels below the root (depths 1..Dmax), in the order they are drafted."""
    ranges = levels(tree)
    parents, rank = tree.parents_array.tolist(), tree.rank.tolist()
    plan = []
    for d in range(1, len(ranges)):
        first, (s, e) = ranges[d - 1][0], ranges[d]
        parent_idx = tuple(parents[j] - first for j in range(s, e))
        plan.append(Level(d, s, e, first, parent_idx, tuple(rank[j] for j in range(s, e))))
    return tuple(plan)


def empty_draft(root, num_nodes: int, vocab: int, sampled: bool) -> Draft:
    """The block before any level is drafted: the root [B] at node 0, every node valid.

    Sampled drafts carry probs [B, P+1, V] (float32), the law each node is drawn from.
    """
    B = root.shape[0]
    tokens = jnp.zeros((B, num_nodes), jnp.int32).at[:, 0].set(root)  # [B, P+1]
    probs = jnp.zeros((B, num_nodes, vocab), jnp.float32) if sampled else None
    return Draft(tokens=tokens, valid=jnp.ones((B, num_nodes), bool), probs=probs)


def draft_level(draft: Draft, scores, level: Level, key, sampled: bool) -> Draft:
    """`draft` with `level`'s nodes drafted from their parents' scores [B, n, V].

    A node is valid when its score is finite and its parent is valid (`child_valid`); sampled
    nodes record the law they were drawn from in `probs`.
    """
    s, e = level.start, level.end
    child, ok = children(scores, level.parent_idx, level.ranks, key, s, sampled)  # [B, c]
    valid = child_valid(draft.valid, ok, level.parent_idx, level.parent_start)  # [B, c]
    probs = draft.probs
    if sampled:
        probs = probs.at[:, s:e].set(jnp.exp(scores)[:, jnp.asarray(level.parent_idx)])
    return draft.replace(
        tokens=draft.tokens.at[:, s:e].set(child),
        valid=draft.valid.at[:, s:e].set(valid),
        probs=probs,
    )
