"""The speculative step: propose -> verify (one target forward over the block) -> commit.

`build_plan` takes a parsed `spec_config.Speculative` (or parses a dict) whose draft is
loaded (a Model, Decoder or draft heads; `specjax.api` turns paths into those) and returns a
hashable `SpecPlan` (a static jit argument) plus the proposer's parameters (data). The engine's
while_loop calls `speculative_step` once per iteration; every method shares it and differs only
in its proposer (`specjax/decoding/proposers/`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax import sampling as sp
from specjax.decoding import spec_config
from specjax.decoding.proposers import PROPOSERS
from specjax.decoding.proposers.base import Proposer, StepInput
from specjax.decoding.state import DecodeState, Static, emit, target_module
from specjax.decoding.topology import Topology, ancestor_mask_of
from specjax.decoding.verify import LOSSY_MODES, verify


@dataclasses.dataclass(frozen=True)
class SpecPlan:
    """Static description of one speculative method instance."""

    config: spec_config.SpecConfig
    proposer: Proposer

    @property
    def tree(self):
        return self.config.tree

    @property
    def max_emit(self) -> int:
        """M: the most tokens one step can emit (Dmax accepted drafts + 1)."""
        return self.config.tree.max_depth + 1

    @property
    def block_nodes(self) -> int:
        """Nodes one verify forward writes into the caches (root + P drafts + E extra)."""
        return self.config.tree.num_nodes + self.proposer.extra_nodes

    @property
    def lossy(self) -> bool:
        return self.config.verification in LOSSY_MODES

    def check_positions(self, longest_prompt: int, max_new_tokens: int) -> None:
        """The proposer's own position limit (a draft model's), checked on the host."""
        limit = self.proposer.max_positions
        if limit is not None and longest_prompt + max_new_tokens > limit:
            raise ValueError(
                f"prompt length {longest_prompt} + max_new_tokens={max_new_tokens} exceeds "
                f"the draft model's max_position_embeddings={limit}"
            )


def speculative_step(static: Static, params, state: DecodeState) -> DecodeState:
    """One propose/verify/commit iteration for every row (frozen rows change nothing)."""
    plan: SpecPlan = static.spec
    proposer, ctx, cfg = plan.proposer, static.context, plan.config
    tree = plan.tree  # a static Tree, or the TreeShape of a proposer's per-step trees
    target = target_module(static, params)
    active = ~state.done  # [B]
    L = state.cache.lengths  # [B]
    step_key = sp.step_key(state.keys, state.step)  # [B]
    propose_key = jax.vmap(lambda k: jax.random.fold_in(k, 1))(step_key)
    verify_key = jax.vmap(lambda k: jax.random.fold_in(k, 2))(step_key)
    view = StepInput(pstate=state.proposer, root=state.last, lengths=L, active=active)

    draft, pstate = proposer.propose(ctx, target, params[1], view, propose_key)
    # The block's topology as data: the proposer's own, or the static tree's held constant.
    topo = draft.topology if draft.topology is not None else Topology.of(tree, L.shape[0])
    depth = topo.depth  # [B, P+1]
    # Near the budget the effective depth shrinks by masking: never accept more than fits.
    room = state.max_new - state.num_out  # [B] tokens this row may still emit
    valid = draft.valid & (depth <= (room - 1)[:, None])  # [B, P+1]

    tokens = draft.tokens.at[:, 0].set(state.last)  # [B, P+1]
    block_mask = ancestor_mask_of(topo.parents, tree.max_depth)  # [B, P+1, P+1]
    offsets = depth
    if draft.extra is not None:  # E non-draft nodes after the block (drafts never see them)
        tokens, offsets, block_mask = _with_extra(tokens, depth, block_mask, draft.extra)
    positions = jnp.minimum(L[:, None] + offsets, static.max_positions - 1)  # [B, P+1(+E)]
    taps, rope = proposer.tap_layers, state.rope
    out = target(tokens, positions, state.cache, block_mask, tap_layers=taps, rope_table=rope)
    n_block = depth.shape[1]  # P+1: the verifier's nodes
    tokens = tokens[:, :n_block]
    logits = out.logits[:, :n_block]  # [B, P+1, V]
    # The walk makes each node's law from its logits as it reaches it (greedy reads only the
    # argmax); Medusa's typical rule judges every node at once, so it gets the laws.
    typical = cfg.verification == "typical"
    result = verify(
        sp.processed_probs(logits, static.sampling) if typical else logits,
        tokens,
        tree,
        cfg.verification,
        verify_key,
        topology=topo,
        draft_probs=draft.probs,
        node_valid=valid,
        target_logits=_typical_logits(logits, static.sampling, cfg.verification),
        typical_eps=cfg.typical_epsilon,
        typical_delta=cfg.typical_delta,
        sampling=None if typical else static.sampling,
    )

    # Commit root + accepted drafts for active rows; the emitted bonus becomes the pending token.
    n_commit = jnp.where(active, result.num_accepted + 1, 0)  # [B]
    if cfg.is_chain:
        cache = out.cache.advance(n_commit)
    else:
        cache = out.cache.commit_path(result.path, n_commit)
    pstate = proposer.commit(ctx, target, params[1], view, pstate, out, result, n_commit)

    # Offered to the verifier: drafts masked out by the budget do not count.
    drafted = jnp.sum(valid[:, 1:], axis=1).astype(jnp.int32)  # [B]
    a = result.num_accepted
    hist = jax.nn.one_hot(a, plan.max_emit, dtype=jnp.int32) * active[:, None]  # [B, M]
    position = jnp.arange(plan.max_emit)  # [M] draft position i (0: the root)
    at_depth = depth[:, :, None] == position[None, None, :]  # [B, P+1, M]
    offered = jnp.any(valid[:, :, None] & at_depth, axis=1) & active[:, None]  # [B, M]
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
    return emit(state, result.tokens, result.num_accepted + 1)


def _with_extra(tokens, depth, block_mask, extra):
    """The forward's tokens, position offsets and mask with the extra nodes appended."""
    B, n = tokens.shape
    E = extra.tokens.shape[1]
    top = jnp.concatenate([block_mask, jnp.zeros((B, n, E), bool)], axis=2)  # [B, P+1, P+1+E]
    mask = jnp.concatenate([top, extra.mask], axis=1)  # [B, P+1+E, P+1+E]
    return (
        jnp.concatenate([tokens, extra.tokens.astype(tokens.dtype)], axis=1),
        jnp.concatenate([depth, extra.depth.astype(depth.dtype)], axis=1),
        mask,
    )


def _typical_logits(logits, sampling, mode):
    """Medusa judges typicality on softmax(logits / T), before top-k/top-p; None otherwise."""
    if mode != "typical" or sampling.temperature == 0:
        return None
    return logits / sampling.temperature  # [B, P+1, V]


def build_plan(spec, target, sampling) -> tuple[SpecPlan, object]:
    """Return (plan, proposer params) for a parsed config. Nothing is compiled here.

    Args:
      spec: a `spec_config.Speculative` (parsed once by `sj.generate`; checked against the
        call's temperature), or a speculative_config dict, parsed here; its draft (where the
        method has one) is a loaded object: a Model or Decoder, or draft heads.
      target: the target `Model`.
      sampling: the call's SamplingParams (None = greedy).
    """
    temperature = 0.0 if sampling is None else sampling.temperature
    spec = spec_config.resolve(spec, temperature=temperature)
    cfg = spec.config
    proposer, params = PROPOSERS[cfg.method].build(cfg, target, spec.draft)
    bad = [i for i in proposer.tap_layers if not 0 <= i < target.config.num_layers]
    if bad:
        raise ValueError(
            f"method {cfg.method!r} taps target layers {proposer.tap_layers}, but the target "
            f"has layers 0..{target.config.num_layers - 1}"
        )
    return SpecPlan(cfg, proposer), params
