"""medusa: K heads on the target's last hidden state propose a chain or a sparse tree.

The state is one feature per row: the target's `last_hidden` at the last committed token (the
feature that produced the pending root token). Head k's logits there rank the candidates for
depth k + 1 below the root. A node of the block at depth d with sibling rank r holds head
(d - 1)'s r-th most likely token (Medusa's sparse tree: a node's token depends on its depth
and rank only), so a chain is every head's top-1, as vLLM drafts it. These drafts are
deterministic: greedy verification at T=0, the lossless one-hot rule at T>0 (the default),
Medusa's typical acceptance (lossy) only when asked for.

With `verification="probabilistic"` (T>0) every node's token is instead *sampled* from its
head's processed distribution (the same temperature / top-k / top-p as the target), siblings
i.i.d., and the verifier applies the min(1, p/q) rule with the residual: lossless for any q a
draft was really drawn from, and accepted with sum(min(p, q)) rather than p(top-1), which is
what pays at T>0 when the target's law is broad.

After verification the new feature is the verify forward's `last_hidden` at the last accepted
node, read from the same forward: no extra target pass, no cache of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from specjax import kernels
from specjax import sampling as sp
from specjax.decoding.proposers.base import Capabilities, Context, Draft, StepInput
from specjax.decoding.trees import Tree
from specjax.heads import MedusaHeads, check_heads_fit


def _top(logits, width: int):
    """[..., V] -> [..., width] int32 ids of the `width` largest, ties to the lower id (a
    reduction, not a sort, for one)."""
    if width == 1:
        return jnp.argmax(logits, axis=-1, keepdims=True).astype(jnp.int32)
    return jax.lax.top_k(logits, width)[1].astype(jnp.int32)


@struct.dataclass
class MedusaState:
    hidden: jax.Array  # [B, D] target's last_hidden at the last committed token


def check_heads(heads, target, num_heads: int, method: str = "medusa") -> None:
    """Refuse heads that cannot serve `target` with this config, naming both values."""
    if not isinstance(heads, MedusaHeads):
        kind = getattr(getattr(heads, "config", None), "method", None)
        raise ValueError(
            f"speculative_config['model'] must be Medusa heads (sj.load_draft) or their "
            f"directory for method={method!r}, got {type(heads).__name__}"
            + (f" (heads for method {kind!r})" if kind else "")
        )
    check_heads_fit(heads, target)
    hc = heads.config
    if num_heads > hc.num_heads:
        raise ValueError(
            f"speculative_config['num_speculative_tokens']={num_heads} asks for more heads "
            f"than the {hc.num_heads} stored"
        )


@dataclasses.dataclass(frozen=True)
class MedusaProposer:
    # Head d drafts depth d + 1, so N (the heads used) bounds a tree's depth; top-k drafts
    # by default (one-hot at T > 0), sampled ones when verification="probabilistic".
    CAPABILITIES = Capabilities(
        methods=("medusa",),
        model="heads",
        trees=("chain", "static"),
        sampled_drafts=True,
        auto_probabilistic="never",
        depth="at_most",
    )

    graphdef: Any
    tree: Tree
    num_heads: int  # K heads used (num_speculative_tokens)
    sampled: bool = False  # probabilistic verification: nodes sampled from their head's law
    max_positions: int | None = None
    tap_layers: tuple[int, ...] = ()
    extra_nodes = 0  # no non-draft nodes in the verify forward

    @classmethod
    def build(cls, cfg, target, heads):
        check_heads(heads, target, cfg.num_speculative_tokens)
        graphdef, params = kernels.split_for_decode(heads, weight_dtype=cfg.draft_weight_dtype)
        sampled = cfg.verification == "probabilistic"
        return cls(graphdef, cfg.tree, cfg.num_speculative_tokens, sampled), params

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root):
        last = jnp.maximum(prompt_len - 1, 0)[:, None, None]  # [B, 1, 1]
        hidden = jnp.take_along_axis(prefill.last_hidden, last, axis=1)[:, 0]  # [B, D]
        return MedusaState(hidden)

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        heads: MedusaHeads = nnx.merge(self.graphdef, params)
        tree = self.tree
        head = np.maximum(tree.depth[1:] - 1, 0)  # [P] node j's head: depth - 1
        probs = None
        width = int(tree.rank.max()) + 1
        if not self.sampled and heads.config.truncated and width <= heads.config.draft_vocab_size:
            # Ranked over the draft vocabulary itself, mapped to target ids after: the same
            # tokens as ranking the [B, K, V] logits (-inf outside it; token_map increases,
            # so ties still go to the lower id) without building them.
            logits = heads.draft_logits(step.pstate.hidden, self.num_heads)  # [B, K, Vd]
            top = _top(logits, width)
            drafts = heads.token_map[...][top[:, head, tree.rank[1:]]]  # [B, P]
            tokens = jnp.concatenate([step.root[:, None], drafts], axis=1)  # [B, P+1]
            return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool)), step.pstate
        logits = heads(step.pstate.hidden, self.num_heads)  # [B, K, V]
        if self.sampled:
            logq = sp.processed_logprobs(logits, ctx.sampling)[:, head]  # [B, P, V]
            nodes = jnp.arange(1, tree.num_nodes)  # [P] keys fold in the node id
            row = lambda k, lq: jax.vmap(  # noqa: E731
                lambda n, l: jax.random.categorical(jax.random.fold_in(k, n), l)
            )(nodes, lq)
            drafts = jax.vmap(row)(key, logq).astype(jnp.int32)  # [B, P]
            q = jnp.exp(logq)  # [B, P, V] the law each node was drawn from
            probs = jnp.concatenate([jnp.zeros_like(q[:, :1]), q], axis=1)  # [B, P+1, V]
        else:
            drafts = _top(logits, width)[:, head, tree.rank[1:]]  # [B, P]
        tokens = jnp.concatenate([step.root[:, None], drafts], axis=1)  # [B, P+1]
        valid = jnp.ones(tokens.shape, bool)
        return Draft(tokens=tokens, valid=valid, probs=probs), step.pstate

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ):
        a = result.num_accepted  # [B]
        node = jnp.take_along_axis(result.path, a[:, None], axis=1)  # [B, 1] last accepted
        hidden = jnp.take_along_axis(verified.last_hidden, node[:, :, None], axis=1)[:, 0]
        hidden = jnp.where((n_commit > 0)[:, None], hidden, pstate.hidden)  # [B, D]
        return MedusaState(hidden)
