"""EAGLE-2's dynamic draft tree: its static sizes, its scoring law and the per-step rerank.

`DynamicTree` fixes what is static (top_k, depth, total_tokens: P+1 nodes, paths of at most
Dmax) and the law candidates are scored under; `keep_best` turns one step's scored candidates
into a block whose topology is data (`topology.Topology`). The expansion itself (one drafter
call per depth over the frontier) is the EAGLE proposer's (`eagle.py`).

Axis letters follow `specjax/models/axes.py`: B batch, C candidates, P draft nodes, V vocab.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax import sampling as sp
from specjax.decoding.topology import Topology, check_size
from specjax.validate import check_int, check_real

# The law a dynamic tree scores candidates under at T = 0 (`DynamicTree.score_logprobs`):
# tau on the quickstart pair is flat for temperatures 0.1-0.35 and falls at 0.5 and 1.
GREEDY_SCORE_TEMPERATURE = 0.25


@dataclasses.dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2's dynamic draft tree: its sizes (static); the topology is built every step.

    Root's top-k children, then `depth - 1` expansions of the best `top_k` frontier nodes
    (top_k children each), then the best `total_tokens` candidates by cumulative
    log-probability (Li et al. 2024b). P = total_tokens draft nodes, paths of at most `depth`.

    `score_temperature` sets the law candidates are scored under (`score_logprobs`): None (the
    default) scores them under the law the target's next token is drawn from, which is the
    drafter's processed law at T > 0 and, at T = 0 where that law is one-hot, the drafter's
    law sharpened by `GREEDY_SCORE_TEMPERATURE`; a number scores them by
    log_softmax(logits / score_temperature) at every temperature.
    """

    top_k: int
    depth: int
    total_tokens: int
    score_temperature: float | None = None

    def __post_init__(self):
        if self.score_temperature is not None:
            t = check_real(
                "draft_tree.dynamic.score_temperature", self.score_temperature, 0.0, lo_open=True
            )
            object.__setattr__(self, "score_temperature", t)
        k = check_int("draft_tree.dynamic.top_k", self.top_k, 1)
        d = check_int("draft_tree.dynamic depth (num_speculative_tokens)", self.depth, 1)
        n = check_int("draft_tree.dynamic.total_tokens", self.total_tokens, 1)
        if n < d:
            raise ValueError(
                f"draft_tree.dynamic.total_tokens={n} is smaller than the depth {d} "
                "(num_speculative_tokens): the deepest path could never be kept"
            )
        if n > self.num_candidates:
            raise ValueError(
                f"draft_tree.dynamic.total_tokens={n} exceeds the {self.num_candidates} "
                f"candidates that top_k={k}, depth={d} produce (top_k + (depth - 1) * top_k^2)"
            )
        check_size(n + 1, "draft_tree.dynamic")

    @property
    def num_candidates(self) -> int:
        """Candidates scored per step: the root's top_k, then top_k^2 per further depth."""
        return self.top_k + (self.depth - 1) * self.top_k**2

    @property
    def num_nodes(self) -> int:
        return self.total_tokens + 1

    @property
    def num_drafts(self) -> int:
        return self.total_tokens

    @property
    def max_depth(self) -> int:
        return self.depth

    def score_logprobs(self, logits, sampling):
        """[..., V] the log-probabilities a candidate's cumulative score adds up.

        Why sharpen at T = 0: a greedy verifier accepts a child exactly when it is the
        target's argmax, an event more likely than the target's (and so a well-trained
        drafter's) probability of that token whenever the target's law is broad. Scored by the
        drafter's plain law, a deep child of confident argmax steps ranks below shallow
        siblings that are rarely accepted (LOG 2026-12-01: tau 3.34 -> 4.13 at 16 drafts on
        the quickstart pair with the sharpened law).
        """
        if self.score_temperature is not None:
            return jax.nn.log_softmax(logits.astype(jnp.float32) / self.score_temperature)
        if sampling.greedy:
            return jax.nn.log_softmax(logits.astype(jnp.float32) / GREEDY_SCORE_TEMPERATURE)
        return sp.processed_logprobs(logits, sampling)


def keep_best(tokens, scores, parents, depth, num_keep: int):
    """EAGLE-2's rerank: the best `num_keep` candidates as a block, topology as data.

    Candidates are numbered so that a parent's index is below its children's (EAGLE-2 records
    them depth by depth). The kept set is the top `num_keep` by (score desc, index asc); a
    child's score (its parent's plus a log-probability <= 0) never exceeds its parent's, and on
    a tie the parent has the lower index, so the kept set is closed under ancestors even when
    a saturated softmax gives a child its parent's score. Kept nodes are placed in index order
    (topological, siblings in candidate order).

    Args:
      tokens, scores: [B, C] candidate tokens and cumulative log-probabilities (-inf allowed).
      parents: [B, C] int32 candidate index of each candidate's parent, -1 under the root.
      depth: [C] int32 each candidate's depth (1 under the root).
      num_keep: P, the draft nodes of the block (static).
    Returns:
      (tokens [B, P], valid [B, P] (finite score and every ancestor kept and valid),
      Topology with [B, P+1] parents and depth, the root prepended).
    """
    B, C = tokens.shape
    _, kept = jax.lax.top_k(scores, num_keep)  # [B, P] ties go to the lower index
    kept = jnp.sort(kept, axis=1)
    rows = jnp.arange(B)[:, None]
    block_of = (
        jnp.zeros((B, C), jnp.int32)
        .at[rows, kept]
        .set(jnp.arange(1, num_keep + 1, dtype=jnp.int32))
    )  # [B, C] block node id of each kept candidate (0 elsewhere)
    kept_parent = jnp.take_along_axis(parents, kept, axis=1)  # [B, P]
    up = jnp.take_along_axis(block_of, jnp.maximum(kept_parent, 0), axis=1)  # [B, P]
    block_parent = jnp.where(kept_parent < 0, 0, up)
    topology = Topology(
        parents=jnp.concatenate([jnp.full((B, 1), -1, jnp.int32), block_parent], axis=1),
        depth=jnp.concatenate([jnp.zeros((B, 1), jnp.int32), jnp.asarray(depth)[kept]], axis=1),
    )
    finite = jnp.isfinite(jnp.take_along_axis(scores, kept, axis=1))  # [B, P]
    # A kept node whose parent was not kept would hang under the root, where its logits and KV
    # were computed with other ancestors: such a node (and, in index order, its kept
    # descendants) is never offered. Unreachable by scores alone (see above); here by data.
    attached = (kept_parent < 0) | (up > 0)  # [B, P]

    def settle(i, valid):  # block parents precede their children: one pass in index order
        parent = block_parent[:, i]  # [B] 0 = the root
        ok = valid[:, i] & ((parent == 0) | valid[rows[:, 0], jnp.maximum(parent - 1, 0)])
        return valid.at[:, i].set(ok)

    valid = jax.lax.fori_loop(0, num_keep, settle, finite & attached)
    return jnp.take_along_axis(tokens, kept, axis=1), valid, topology
