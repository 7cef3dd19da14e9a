"""eagle / eagle3: a one-layer drafter that reads the target's features (EAGLE-1/2/3).

The drafter (`specjax.heads.eagle.EagleHead`) keeps its own one-layer KV cache. Its entry at
position t consumes the token x_{t+1} and the target's feature of position t (EAGLE-1: the
post-norm last hidden state; EAGLE-3: fc over three layer taps), so with L tokens committed
and the pending root x_L, the drafter holds entries 0..L-1 and, in the state, its output h at
entry L-1: the hidden whose logits rank the root's children.

- **init** (inside prefill): entries 0..len-1 from the prompt shifted by one (the first
  pending token closes it) and the prefill's features.
- **propose**: the block below the root, drafted from the drafter's own outputs. A node at
  depth d is fed as the entry at position L + d - 1 with its parent's hidden, written after the
  committed entries and attending to them and to its ancestors' entries. Static trees (a
  chain, EAGLE-1's `eagle1_25`, `topk_<d>x<w>`, choices lists) are drafted level by level
  with draft_model's steps (`tree_drafting.py`); children are the parent's top-k (greedy /
  one_hot / strict) or i.i.d. samples from its processed law (probabilistic). The dynamic
  tree (EAGLE-2, Li et al. 2024b; `eagle_tree.py`;
  `draft_tree={"dynamic": {"top_k": k, "total_tokens": n}}`): the root's top-k children, then
  per depth one batched drafter call over the k frontier nodes, each giving its top-k children
  scored by cumulative log-probability (`DynamicTree.score_logprobs`: the decode's own law,
  sharpened at T=0), the best k of the k^2 becoming the next frontier; at
  the end the best `total_tokens` candidates over all depths, ordered by (score, depth, index)
  (a child never outscores its parent and ties go to the shallower node, so the kept set is
  closed under ancestors), handed to the verifier with their parents as data (`keep_best`).
- **commit**: the drafter re-runs over the accepted path with the *target's* features (the
  verify forward's, at the path's nodes): entries L..L+a hold x_{L+1}..x_{L+a} and the bonus
  token, so its cache holds exactly what the next draft needs and everything drafted past it
  is overwritten or masked (rolled back by index, like the target's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from specjax import kernels
from specjax.cache import KVCache
from specjax.decoding.proposers.base import Capabilities, Context, Draft, StepInput
from specjax.decoding.proposers.eagle_tree import DynamicTree, keep_best
from specjax.decoding.proposers.tree_drafting import (
    child_scores,
    draft_level,
    empty_draft,
    level_plan,
)
from specjax.decoding.trees import Tree
from specjax.heads import check_heads_fit
from specjax.heads.eagle import EagleHead


@struct.dataclass
class EagleState:
    cache: KVCache  # the drafter's one-layer cache: entries 0..L-1 (lengths = the target's L)
    hidden: jax.Array  # [B, H] the drafter's output at entry L-1 (its root's children)


def check_drafter(head, target, method: str) -> None:
    """Refuse a drafter that cannot serve `target` with `method`, naming both values."""
    if not isinstance(head, EagleHead):
        kind = getattr(getattr(head, "config", None), "method", None)
        raise ValueError(
            f"speculative_config['model'] must be an EAGLE drafter (sj.load_draft) or its "
            f"directory for method={method!r}, got {type(head).__name__}"
            + (f" (heads for method {kind!r})" if kind else "")
        )
    if head.config.method != method:
        raise ValueError(
            f"speculative_config['method']={method!r} but the drafter is an "
            f"{head.config.method!r} head; use method={head.config.method!r}"
        )
    check_heads_fit(head, target)  # widths, vocabulary, EAGLE-3 tap layers


@dataclasses.dataclass(frozen=True)
class EagleProposer:
    # One class for both methods: the head's config says which (`check_drafter`). Chains are
    # sampled at T > 0 by default; trees hold each node's top-k (one-hot), EAGLE-2's dynamic
    # tree included.
    CAPABILITIES = Capabilities(
        methods=("eagle", "eagle3"),
        model="heads",
        trees=("chain", "static", "dynamic"),
        sampled_drafts=True,
        auto_probabilistic="chains",
        depth="at_most",
    )

    graphdef: Any
    tree: Tree | DynamicTree
    mode: str  # verification mode: top-k children vs sampled children
    tap_layers: tuple[int, ...] = ()
    max_positions: int | None = None
    extra_nodes = 0  # no non-draft nodes in the verify forward

    @classmethod
    def build(cls, cfg, target, head):
        check_drafter(head, target, cfg.method)
        graphdef, params = kernels.split_for_decode(head, weight_dtype=cfg.draft_weight_dtype)
        return cls(graphdef, cfg.tree, cfg.verification, head.config.tap_layers), params

    @property
    def sampled(self) -> bool:
        return self.mode == "probabilistic"

    @property
    def scratch(self) -> int:
        """Drafter cache slots past the committed entries that one propose writes."""
        if isinstance(self.tree, DynamicTree):
            return (self.tree.depth - 1) * self.tree.top_k
        return self.tree.num_drafts

    def _head(self, params) -> EagleHead:
        return nnx.merge(self.graphdef, params)

    def _clip(self, ctx: Context, positions):
        return jnp.minimum(positions, ctx.max_positions - 1)

    # ------------------------------------------------------------------------------ init

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root):
        head = self._head(params)
        B, Tp = prompt.shape
        # The commit writes up to Dmax + 1 entries, a propose `scratch` entries, after L.
        room = max(self.scratch, self.tree.max_depth + 1)
        cache = head.init_cache(B, ctx.cache_len + room)
        idx = jnp.arange(Tp, dtype=jnp.int32)  # [Tp]
        last = jnp.maximum(prompt_len - 1, 0)  # [B]
        # Entry t holds x_{t+1}: the prompt shifted left, the first pending token at len - 1.
        shifted = jnp.concatenate([prompt[:, 1:], jnp.zeros((B, 1), prompt.dtype)], axis=1)
        tokens = jnp.where(idx[None, :] == last[:, None], root[:, None], shifted)  # [B, Tp]
        feature = head.target_feature(prefill.last_hidden, prefill.taps)  # [B, Tp, H]
        positions = self._clip(ctx, jnp.broadcast_to(idx, (B, Tp)))
        causal = jnp.broadcast_to(jnp.tril(jnp.ones((Tp, Tp), bool)), (B, Tp, Tp))
        h, _, cache = head(target, tokens, feature, positions, cache, causal)
        hidden = jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]  # [B, H]
        return EagleState(cache.replace(lengths=prompt_len.astype(jnp.int32)), hidden)

    # --------------------------------------------------------------------------- propose

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        head = self._head(params)
        if isinstance(self.tree, DynamicTree):
            return self._propose_dynamic(ctx, target, head, step)
        return self._propose_static(ctx, target, head, step, key)

    def _propose_static(self, ctx, target, head: EagleHead, step: StepInput, key):
        ps: EagleState = step.pstate
        tree = self.tree
        B, P1 = step.root.shape[0], tree.num_nodes
        L = step.lengths  # [B]
        anc = jnp.asarray(tree.ancestor_mask[:, 1:])  # [P+1, P]: node j's entry at slot L+j-1
        scores = child_scores(head.logits(target, ps.hidden)[:, None], ctx.sampling, self.sampled)
        hidden = ps.hidden[:, None]  # [B, 1, H] the root level's output
        cache = ps.cache
        draft = empty_draft(step.root, P1, scores.shape[-1], self.sampled)
        for level in level_plan(tree):
            draft = draft_level(draft, scores, level, key, self.sampled)
            if level.depth == tree.max_depth:
                break  # the deepest level's children are never needed
            d, s, e = level.depth, level.start, level.end
            feature = hidden[:, jnp.asarray(level.parent_idx)]  # [B, n, H] each parent's output
            mask = jnp.broadcast_to(anc[s:e], (B, e - s, P1 - 1))  # [B, n, P]
            pos = self._clip(ctx, jnp.broadcast_to((L + d - 1)[:, None], (B, e - s)))
            hidden, logits, cache = head(
                target, draft.tokens[:, s:e], feature, pos, cache, mask, offset=L + s - 1
            )
            scores = child_scores(logits, ctx.sampling, self.sampled)  # [B, n, V]
        return draft, ps.replace(cache=cache)

    def _propose_dynamic(self, ctx, target, head: EagleHead, step: StepInput):
        ps: EagleState = step.pstate
        k, D, n = self.tree.top_k, self.tree.depth, self.tree.total_tokens
        B = step.root.shape[0]
        L = step.lengths  # [B]
        W = self.scratch  # scratch slots L .. L + W - 1: frontier entries, k per depth
        logp = self.tree.score_logprobs(head.logits(target, ps.hidden), ctx.sampling)  # [B, V]
        top_lp, top_tok = jax.lax.top_k(logp, k)  # [B, k]
        cand_tok, cand_score = [top_tok], [top_lp]  # per depth, [B, k] then [B, k*k]
        cand_parent = [jnp.full((B, k), -1, jnp.int32)]  # candidate index of each parent
        frontier = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (B, k))  # candidate ids
        f_tok, f_score = top_tok, top_lp  # [B, k]
        f_hidden = jnp.broadcast_to(ps.hidden[:, None], (B, k, ps.hidden.shape[-1]))
        f_anc = jnp.zeros((B, k, W), bool)  # the frontier's ancestors' scratch slots
        cache = ps.cache
        base = k  # candidate index of the first candidate at the next depth
        slots = jnp.arange(W, dtype=jnp.int32)
        for d in range(1, D):
            # Feed the k frontier nodes (depth d) at position L + d - 1, slots (d-1)k .. dk-1.
            own = (slots[None, None, :] // k == d - 1) & (
                slots[None, None, :] % k == jnp.arange(k)[None, :, None]
            )  # [1, k, W]
            mask = f_anc | own  # [B, k, W]
            pos = self._clip(ctx, jnp.broadcast_to((L + d - 1)[:, None], (B, k)))
            h, logits, cache = head(
                target, f_tok, f_hidden, pos, cache, mask, offset=L + (d - 1) * k
            )
            lp = self.tree.score_logprobs(logits, ctx.sampling)  # [B, k, V]
            c_lp, c_tok = jax.lax.top_k(lp, k)  # [B, k, k]
            c_score = (f_score[:, :, None] + c_lp).reshape(B, k * k)  # [B, k*k]
            c_tok = c_tok.reshape(B, k * k)
            c_parent = jnp.repeat(frontier, k, axis=1)  # [B, k*k] candidate ids of parents
            cand_tok.append(c_tok)
            cand_score.append(c_score)
            cand_parent.append(c_parent)
            if d == D - 1:
                break  # the deepest candidates are never expanded
            best_score, best = jax.lax.top_k(c_score, k)  # [B, k] ties: lower index first
            slot = best // k  # [B, k] which frontier node each came from
            f_hidden = jnp.take_along_axis(h, slot[..., None], axis=1)  # [B, k, H] the
            # parent's output feeds the child, which sees the parent's ancestors and the parent
            f_anc = jnp.take_along_axis(mask, slot[..., None], axis=1)  # [B, k, W]
            f_tok = jnp.take_along_axis(c_tok, best, axis=1)
            f_score, frontier = best_score, base + best
            base += k * k
        tok = jnp.concatenate(cand_tok, axis=1)  # [B, C]
        score = jnp.concatenate(cand_score, axis=1)  # [B, C]
        parent = jnp.concatenate(cand_parent, axis=1)  # [B, C]
        depth = jnp.concatenate(
            [jnp.full((k,), 1, jnp.int32)]
            + [jnp.full((k * k,), d + 1, jnp.int32) for d in range(1, D)]
        )  # [C] candidate ids grow with depth
        kept_tok, kept_valid, topology = keep_best(tok, score, parent, depth, n)
        tokens = jnp.concatenate([step.root[:, None], kept_tok], axis=1)  # [B, P+1]
        valid = jnp.concatenate([jnp.ones((B, 1), bool), kept_valid], axis=1)
        draft = Draft(tokens=tokens.astype(jnp.int32), valid=valid, topology=topology)
        return draft, ps.replace(cache=cache)

    # ---------------------------------------------------------------------------- commit

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ):
        head = self._head(params)
        ps: EagleState = pstate
        B, M = result.tokens.shape
        L = step.lengths  # [B]
        # Entries L .. L+a: the accepted drafts and the bonus token, each with the target's
        # feature at the node before it on the path (root = path[0]).
        feature = head.target_feature(verified.last_hidden, verified.taps)  # [B, P+1, H]
        nodes = jnp.maximum(result.path, 0)  # [B, M]
        feature = jnp.take_along_axis(feature, nodes[:, :, None], axis=1)  # [B, M, H]
        pos = self._clip(ctx, L[:, None] + jnp.arange(M, dtype=jnp.int32)[None, :])
        causal = jnp.broadcast_to(jnp.tril(jnp.ones((M, M), bool)), (B, M, M))
        cache = ps.cache.replace(lengths=L)
        h, _, cache = head(target, result.tokens, feature, pos, cache, causal)
        a = result.num_accepted  # [B]
        hidden = jnp.take_along_axis(h, a[:, None, None], axis=1)[:, 0]  # [B, H] entry L + a
        moved = n_commit > 0
        return EagleState(
            cache.replace(lengths=jnp.where(moved, L + n_commit, ps.cache.lengths)),
            jnp.where(moved[:, None], hidden, ps.hidden),
        )
