"""draft_model: a second (smaller) specjax model drafts a chain or a top-k tree.

The draft keeps its own KVCache, committed in lock step with the target's (same lengths).
Drafting fills the block level by level: first a catch-up forward over [prev, root] at
positions [L-1, L] (prev = the last committed token, whose draft K/V is missing when the
previous step accepted its deepest draft; rewriting an existing slot is harmless), then one
forward per depth over that depth's nodes, each attending to its ancestors in the block. A
chain is the tree with one node per depth, so one implementation serves both.

Children of a node are its draft distribution's top-k (ranks 0..k-1, deterministic, for
greedy / one_hot / strict) or i.i.d. samples from it (probabilistic: the SpecInfer rule).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from specjax import kernels
from specjax import sampling as sp
from specjax.cache import KVCache
from specjax.decoding.proposers.base import Context, Draft, StepInput
from specjax.decoding.trees import Tree
from specjax.models import Decoder, Model, as_model, check_same_vocabulary


@struct.dataclass
class DraftModelState:
    cache: KVCache  # the draft's cache; lengths equal the target's committed lengths
    prev: jax.Array  # [B] int32 the token at position L-1 (last committed)


def child_scores(logits, sampling, sampled: bool):
    """What children are drawn from (sampled: processed log-probs) or ranked by (top-k).

    At T=0 the processed law is one-hot: ranks >= 1 would all tie at -inf and fall to the
    lowest token ids. Top-k children are ranked by the raw logits there (same rank 0).
    """
    if sampling.greedy and not sampled:
        return logits.astype(jnp.float32)  # [..., V]
    return sp.processed_logprobs(logits, sampling)  # [..., V]


def children(q_logp, parent_idx, ranks, key, first_node: int, sampled: bool):
    """Draft tokens of one tree level from their parents' scores (any proposer that drafts a
    static tree level by level: draft_model, EAGLE).

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


def _as_draft_model(draft) -> Model:
    if isinstance(draft, (Model, Decoder)):
        return as_model(draft)
    raise ValueError(
        "speculative_config['model'] must be a specjax Model, Decoder or checkpoint directory "
        f"for method='draft_model', got {type(draft).__name__}"
    )


def check_draft_window(draft: Model, tree: Tree) -> None:
    """A tree is drafted level by level into the draft's cache; its earlier levels' keys then sit
    at slot indices past their positions, which only a sliding window shorter than the tree's
    depth could tell apart (keys within the window would be counted as outside it or vice
    versa). Refuse that case rather than draft with a wrong mask."""
    window, depth = draft.config.sliding_window, tree.max_depth
    if window is not None and tree.num_drafts != depth and window <= depth:
        raise ValueError(
            f"the draft model's sliding_window={window} must exceed the draft tree's depth "
            f"{depth} (speculative_config['draft_tree']); use a chain or a shallower tree"
        )


@dataclasses.dataclass(frozen=True)
class DraftModelProposer:
    graphdef: Any
    tree: Tree
    mode: str  # verification mode: decides top-k children vs sampled children
    max_positions: int
    tap_layers: tuple[int, ...] = ()
    extra_nodes = 0  # no non-draft nodes in the verify forward

    @classmethod
    def build(cls, cfg, target, draft):
        draft = _as_draft_model(draft)
        check_same_vocabulary(target, draft)
        check_draft_window(draft, cfg.tree)
        graphdef, params = kernels.split_for_decode(draft.module)
        return cls(
            graphdef, cfg.tree, cfg.verification, draft.config.max_position_embeddings
        ), params

    @property
    def sampled(self) -> bool:
        return self.mode == "probabilistic"

    def _model(self, params):
        return nnx.merge(self.graphdef, params)

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root):
        model = self._model(params)
        B, Tp = prompt.shape
        cache = KVCache.for_model(model.config, B, ctx.cache_len)
        positions = jnp.minimum(
            jnp.broadcast_to(jnp.arange(Tp, dtype=jnp.int32), (B, Tp)), self.max_positions - 1
        )  # [B, Tp]
        out = model(prompt, positions, cache, logit_index=jnp.zeros((B, 1), jnp.int32))
        prev = jnp.take_along_axis(prompt, jnp.maximum(prompt_len - 1, 0)[:, None], axis=1)[:, 0]
        return DraftModelState(out.cache.replace(lengths=prompt_len.astype(jnp.int32)), prev)

    def _scores(self, logits, sampling):
        return child_scores(logits, sampling, self.sampled)

    def _children(self, q_logp, parent_idx, ranks, key, first_node):
        return children(q_logp, parent_idx, ranks, key, first_node, self.sampled)

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        model = self._model(params)
        ps: DraftModelState = step.pstate
        tree = self.tree
        parents = tree.parents_array
        tree_levels = levels(tree)
        P1 = tree.num_nodes
        B = step.root.shape[0]
        L = step.lengths  # [B]
        anc = jnp.asarray(tree.ancestor_mask)  # [P+1, P+1]
        sampling = ctx.sampling
        clip = lambda pos: jnp.minimum(pos, self.max_positions - 1)

        # Catch-up + root: [prev, root] at [L-1, L]; the cache viewed with lengths L-1.
        view = ps.cache.replace(lengths=L - 1)
        toks = jnp.stack([ps.prev, step.root], axis=1)  # [B, 2]
        pos = clip(jnp.stack([L - 1, L], axis=1))  # [B, 2]
        out = model(toks, pos, view, logit_index=jnp.ones((B, 1), jnp.int32))
        cache = out.cache.replace(lengths=L)
        level_logp = self._scores(out.logits, sampling)  # [B, 1, V] root's children law

        tokens = jnp.zeros((B, P1), jnp.int32).at[:, 0].set(step.root)  # [B, P+1]
        probs = jnp.zeros((B, P1, level_logp.shape[-1]), jnp.float32) if self.sampled else None
        valid = jnp.ones((B, P1), bool)
        rank = tree.rank.tolist()
        for d in range(1, len(tree_levels)):
            ps_, (s, e) = tree_levels[d - 1][0], tree_levels[d]
            parent_idx = [int(parents[j]) - ps_ for j in range(s, e)]
            child, ok = self._children(
                level_logp, parent_idx, [rank[j] for j in range(s, e)], key, s
            )
            tokens = tokens.at[:, s:e].set(child)
            valid = valid.at[:, s:e].set(child_valid(valid, ok, parent_idx, ps_))
            if self.sampled:
                probs = probs.at[:, s:e].set(jnp.exp(level_logp)[:, jnp.asarray(parent_idx)])
            if d == len(tree_levels) - 1:
                break  # the deepest level's children are never needed
            # Feed level d (nodes s..e-1) at positions L + d, written at slots L + s .. L + e - 1.
            mask = jnp.broadcast_to(anc[s:e], (B, e - s, P1))  # [B, n, P+1]
            pos = clip(jnp.broadcast_to((L + d)[:, None], (B, e - s)))  # [B, n]
            out = model(tokens[:, s:e], pos, cache, mask, offset=L + s)
            cache = out.cache
            level_logp = self._scores(out.logits, sampling)  # [B, n, V]
        return Draft(tokens=tokens, valid=valid, probs=probs), DraftModelState(cache, ps.prev)

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ):
        if self.tree.num_drafts == self.tree.max_depth:  # a chain: the path is already contiguous
            cache = pstate.cache.advance(n_commit)
        else:
            cache = pstate.cache.commit_path(result.path, n_commit)
        a = result.num_accepted  # [B]
        last_accepted = jnp.take_along_axis(result.tokens, jnp.maximum(a - 1, 0)[:, None], axis=1)[
            :, 0
        ]
        prev = jnp.where(a > 0, last_accepted, step.root)  # [B] token now at position L'-1
        prev = jnp.where(n_commit > 0, prev, pstate.prev)
        return DraftModelState(cache, prev)
