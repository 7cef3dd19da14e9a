"""draft_model: a second (smaller) specjax model drafts a chain or a top-k tree.

The draft keeps its own KVCache, committed in lock step with the target's (same lengths).
Drafting fills the block level by level: first a catch-up forward over [prev, root] at
positions [L-1, L] (prev = the last committed token, whose draft K/V is missing when the
previous step accepted its deepest draft; rewriting an existing slot is harmless), then one
forward per depth over that depth's nodes, each attending to its ancestors in the block. A
chain is the tree with one node per depth, so one implementation serves both.

Children of a node are its draft distribution's top-k (ranks 0..k-1, deterministic, for
greedy / one_hot / strict) or i.i.d. samples from it (probabilistic: the SpecInfer rule); the
level steps are `tree_drafting.py`'s, shared with EAGLE.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from specjax import kernels
from specjax.cache import KVCache
from specjax.decoding.proposers.base import Capabilities, Context, StepInput
from specjax.decoding.proposers.tree_drafting import (
    child_scores,
    draft_level,
    empty_draft,
    level_plan,
)
from specjax.decoding.trees import Tree
from specjax.models import Decoder, Model, as_model, check_same_vocabulary


@struct.dataclass
class DraftModelState:
    cache: KVCache  # the draft's cache; lengths equal the target's committed lengths
    prev: jax.Array  # [B] int32 the token at position L-1 (last committed)


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
    # A second LM drafts the tree's depth level by level; its drafts can be sampled, and at
    # T > 0 they are by default (verified probabilistically).
    CAPABILITIES = Capabilities(
        methods=("draft_model",),
        model="draft_lm",
        trees=("chain", "static"),
        sampled_drafts=True,
        auto_probabilistic="always",
        depth="equal",
    )

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
        graphdef, params = kernels.split_for_decode(
            draft.module, weight_dtype=cfg.draft_weight_dtype
        )
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

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        model = self._model(params)
        ps: DraftModelState = step.pstate
        tree = self.tree
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

        draft = empty_draft(step.root, P1, level_logp.shape[-1], self.sampled)
        for level in level_plan(tree):
            draft = draft_level(draft, level_logp, level, key, self.sampled)
            if level.depth == tree.max_depth:
                break  # the deepest level's children are never needed
            # Feed level d (nodes s..e-1) at positions L + d, written at slots L + s .. L + e - 1.
            d, s, e = level.depth, level.start, level.end
            mask = jnp.broadcast_to(anc[s:e], (B, e - s, P1))  # [B, n, P+1]
            pos = clip(jnp.broadcast_to((L + d)[:, None], (B, e - s)))  # [B, n]
            out = model(draft.tokens[:, s:e], pos, cache, mask, offset=L + s)
            cache = out.cache
            level_logp = self._scores(out.logits, sampling)  # [B, n, V]
        return draft, DraftModelState(cache, ps.prev)

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
