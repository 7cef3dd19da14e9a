"""The speculative step: propose -> verify (one target forward over the block) -> commit.

`build_plan` validates a speculative_config, loads/checks the draft and returns a hashable
`SpecPlan` (a static jit argument) plus the proposer's parameters (data). The engine's
while_loop calls `SpecPlan.step` once per iteration; every method shares it, and differs only
in its proposer (`specjax/decoding/proposers/`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax import sampling as sp
from specjax.decoding import spec_config
from specjax.decoding.proposers import PROPOSERS
from specjax.decoding.verify import verify


@dataclasses.dataclass(frozen=True)
class SpecPlan:
    """Static description of one speculative method instance."""

    config: spec_config.SpecConfig
    proposer: Any  # a hashable proposer (see proposers/base.py)

    @property
    def tree(self):
        return self.config.tree

    @property
    def max_emit(self) -> int:
        """M: the most tokens one step can emit (Dmax accepted drafts + 1)."""
        return self.config.tree.max_depth + 1

    def init(self, static, params, state, prompt, prompt_len, target_out):
        return self.proposer.init(static, params[1], state, prompt, prompt_len, target_out)

    def step(self, static, params, state):
        return speculative_step(static, params, state)


def speculative_step(static, params, state):
    """One propose/verify/commit iteration for every row (frozen rows change nothing)."""
    from specjax.decoding.engine import _model  # the engine owns the target merge

    plan: SpecPlan = static.spec
    tree = plan.tree
    target = _model(static, params)
    active = ~state.done  # [B]
    L = state.cache.lengths  # [B]
    depth = jnp.asarray(tree.depth, jnp.int32)  # [P+1]
    step_key = sp.step_key(state.keys, state.step)  # [B]
    propose_key = jax.vmap(lambda k: jax.random.fold_in(k, 1))(step_key)
    verify_key = jax.vmap(lambda k: jax.random.fold_in(k, 2))(step_key)

    draft, pstate = plan.proposer.propose(static, params[1], state, propose_key)
    # Near the budget the effective depth shrinks by masking: never accept more than fits.
    room = state.max_new - state.num_out  # [B] tokens this row may still emit
    valid = draft.valid & (depth[None, :] <= (room - 1)[:, None])  # [B, P+1]

    tokens = draft.tokens.at[:, 0].set(state.last)  # [B, P+1]
    positions = jnp.minimum(L[:, None] + depth[None, :], static.max_positions - 1)  # [B, P+1]
    block_mask = jnp.asarray(tree.ancestor_mask)  # [P+1, P+1]
    out = target(tokens, positions, state.cache, block_mask)  # logits [B, P+1, V]
    p = sp.processed_probs(out.logits, static.sampling)  # [B, P+1, V] float32
    cfg = plan.config
    result = verify(
        p,
        tokens,
        tree,
        cfg.verification,
        verify_key,
        draft_probs=draft.probs,
        node_valid=valid,
        target_logits=_typical_logits(out.logits, static.sampling, cfg.verification),
        typical_eps=cfg.typical_epsilon,
        typical_delta=cfg.typical_delta,
    )

    # Commit root + accepted drafts for active rows; the emitted bonus becomes the pending token.
    n_commit = jnp.where(active, result.num_accepted + 1, 0)  # [B]
    if cfg.is_chain:
        cache = out.cache.advance(n_commit)
    else:
        cache = out.cache.commit_path(result.path, n_commit)
    pstate = plan.proposer.commit(static, params[1], pstate, state, result, n_commit)

    # Offered to the verifier: drafts masked out by the budget do not count.
    drafted = jnp.sum(valid[:, 1:], axis=1).astype(jnp.int32)  # [B]
    a = result.num_accepted
    hist = jax.nn.one_hot(a, plan.max_emit, dtype=jnp.int32) * active[:, None]  # [B, M]
    position = jnp.arange(plan.max_emit)  # [M] draft position i (0: the root)
    at_depth = depth[:, None] == position[None, :]  # [P+1, M]
    offered = jnp.any(valid[:, :, None] & at_depth[None], axis=1) & active[:, None]  # [B, M]
    reached = offered & (a[:, None] >= position[None, :] - 1)  # [B, M]
    act = active.astype(jnp.int32)
    state = state.replace(
        cache=cache,
        proposer=pstate,
        step=state.step + 1,
        steps=state.steps + act,
        drafted=state.drafted + drafted * act,
        accepted=state.accepted + a * act,
        accept_hist=state.accept_hist + hist,
        offered=state.offered + offered.astype(jnp.int32),
        reached=state.reached + reached.astype(jnp.int32),
    )
    from specjax.decoding.engine import emit

    return emit(state, result.tokens, result.num_accepted + 1)


def _typical_logits(logits, sampling, mode):
    """Medusa judges typicality on softmax(logits / T), before top-k/top-p; None otherwise."""
    if mode != "typical" or sampling.temperature == 0:
        return None
    return logits / sampling.temperature  # [B, P+1, V]


# ------------------------------------------------------------------------- building a plan


def _resolve_draft(model_spec):
    from specjax.io.hf import Model, as_model, load_model

    if isinstance(model_spec, (str,)) or hasattr(model_spec, "__fspath__"):
        return load_model(model_spec)
    if isinstance(model_spec, Model):
        return model_spec
    try:
        return as_model(model_spec)
    except TypeError:
        raise ValueError(
            f"speculative_config['model'] must be a specjax Model, Decoder or checkpoint directory, "
            f"got {type(model_spec).__name__}"
        ) from None


def check_vocabularies(target, draft) -> None:
    """Draft and target must share the vocabulary: same size, token strings and specials."""
    tv, dv = target.config.vocab_size, draft.config.vocab_size
    if tv != dv:
        raise ValueError(f"draft vocab_size={dv} differs from the target's vocab_size={tv}")
    if target.tokenizer is None or draft.tokenizer is None:
        return
    t, d = target.tokenizer.vocab_strings(), draft.tokenizer.vocab_strings()
    for i in range(max(len(t.tokens), len(d.tokens))):
        a = t.tokens[i] if i < len(t.tokens) else None
        b = d.tokens[i] if i < len(d.tokens) else None
        if a != b:
            raise ValueError(
                f"draft and target vocabularies differ first at id {i}: target {a!r} vs draft {b!r}"
            )
    if t.special != d.special:
        diff = sorted(set(t.special) ^ set(d.special))
        raise ValueError(f"draft and target special tokens differ: {diff[:5]}")


def build_plan(raw: dict, model, sampling) -> tuple[SpecPlan, Any]:
    """Validate `raw` and return (plan, proposer params). Nothing is compiled here."""
    temperature = 0.0 if sampling is None else sampling.temperature
    cfg = spec_config.parse(raw, temperature=temperature)
    proposer_cls = PROPOSERS[cfg.method]
    draft = None
    if cfg.method == "draft_model":
        draft = _resolve_draft(raw["model"])
        check_vocabularies(model, draft)
        check_draft_window(draft, cfg)
    proposer, params = proposer_cls.build(cfg, draft)
    return SpecPlan(cfg, proposer), params


def check_draft_window(draft, cfg) -> None:
    """A tree is drafted level by level into the draft's cache; its earlier levels' keys then sit
    at slot indices past their positions, which only a sliding window shorter than the tree's
    depth could tell apart (keys within the window would be counted as outside it or vice
    versa). Refuse that case rather than draft with a wrong mask."""
    window, depth = draft.config.sliding_window, cfg.tree.max_depth
    if window is not None and not cfg.is_chain and window <= depth:
        raise ValueError(
            f"the draft model's sliding_window={window} must exceed the draft tree's depth "
            f"{depth} (speculative_config['draft_tree']); use a chain or a shallower tree"
        )


def check_draft_positions(plan: SpecPlan, longest_prompt: int, max_new_tokens: int) -> None:
    limit = plan.proposer.max_positions
    if limit is not None and longest_prompt + max_new_tokens > limit:
        raise ValueError(
            f"prompt length {longest_prompt} + max_new_tokens={max_new_tokens} exceeds "
            f"the draft model's max_position_embeddings={limit}"
        )
