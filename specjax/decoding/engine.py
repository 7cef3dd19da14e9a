"""The engine: prefill + a `lax.while_loop` of decode steps, all in one jit.

Every step is propose -> verify -> commit. Plain autoregressive decoding is the step whose
proposer drafts nothing (a block of just the pending token); speculative methods plug a proposer
(`specjax/decoding/proposers/`) into the same loop and the same verifier.

Shapes are static per (batch bucket, prompt bucket, generation bucket, method config): prompts
are right-padded into buckets (powers of two and, from 48, half steps between them:
`prompt_bucket`), `max_new_tokens` and stop ids are data, so calls with different prompt
lengths or budgets inside one bucket reuse one compiled program.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from specjax import kernels, parallel
from specjax import sampling as sp
from specjax.cache import KVCache, check_room
from specjax.decoding import prompts as pr
from specjax.decoding import spec_config
from specjax.decoding.speculative import build_plan, speculative_step
from specjax.decoding.state import MAX_STOP_IDS, DecodeState, Static, emit, target_module
from specjax.models import Model, as_model

_TRACES: dict[str, int] = {"generate": 0}


def trace_count(kind: str = "generate") -> int:
    """How many times the engine's jitted programs were traced (compile-count tests)."""
    return _TRACES.get(kind, 0)


def prefill(static: Static, params, prompt, prompt_len, max_new, stop_ids, keys) -> DecodeState:
    """Run the prompts through the target and emit each row's first token.

    Args:
      prompt: [B, Tp] int32 right-padded; prompt_len: [B] int32 (0 marks a padding row).
    """
    model = target_module(static, params)
    spec = static.spec
    B, Tp = prompt.shape
    cache = KVCache.for_model(model.config, B, static.cache_len)
    positions = jnp.minimum(
        jnp.broadcast_to(jnp.arange(Tp, dtype=jnp.int32), (B, Tp)), static.max_positions - 1
    )  # [B, Tp]; padding positions clipped
    last_idx = jnp.maximum(prompt_len - 1, 0)[:, None]  # [B, 1]
    taps = () if spec is None else spec.proposer.tap_layers
    out = model(prompt, positions, cache, logit_index=last_idx, tap_layers=taps)
    cache = out.cache.replace(lengths=prompt_len.astype(jnp.int32))
    first = jax.vmap(lambda k, lg: sp.sample(k, lg, static.sampling))(
        sp.step_key(keys, 0), out.logits[:, 0]
    )  # [B]
    M = 1 if spec is None else spec.max_emit
    state = DecodeState(
        cache=cache,
        proposer=(),
        last=first,
        out=jnp.zeros((B, static.out_len), jnp.int32),
        num_out=jnp.zeros((B,), jnp.int32),
        done=prompt_len == 0,
        max_new=max_new,
        stop_ids=stop_ids,
        keys=keys,
        step=jnp.ones((), jnp.int32),
        steps=jnp.zeros((B,), jnp.int32),
        drafted=jnp.zeros((B,), jnp.int32),
        accepted=jnp.zeros((B,), jnp.int32),
        accept_hist=jnp.zeros((B, M), jnp.int32),
        offered=jnp.zeros((B, M), jnp.int32),
        reached=jnp.zeros((B, M), jnp.int32),
        # Every step's positions are below cache_len (check_room); twice that is ample.
        rope=model.rope_table(2 * static.cache_len),
    )
    if spec is not None:
        pstate = spec.proposer.init(
            static.context, model, params[1], prompt, prompt_len, out, first
        )
        state = state.replace(proposer=pstate)
    # Under a mesh: the caches, the draft buffers and every per-row array follow the batch.
    state = parallel.constrain_batch(state, static.layout, B)
    return emit(state, first[:, None], jnp.ones((B,), jnp.int32))


def autoregressive_step(static: Static, params, state: DecodeState) -> DecodeState:
    """One target forward over the pending token, then one sampled token per active row."""
    model = target_module(static, params)
    B = state.last.shape[0]
    positions = state.cache.lengths[:, None]  # [B, 1]
    out = model(state.last[:, None], positions, state.cache, rope_table=state.rope)
    # Commit the pending token for active rows only; frozen rows never move.
    cache = out.cache.advance((~state.done).astype(jnp.int32))
    nxt = jax.vmap(lambda k, lg: sp.sample(k, lg, static.sampling))(
        sp.step_key(state.keys, state.step), out.logits[:, 0]
    )  # [B]
    active = ~state.done
    state = state.replace(
        cache=cache, step=state.step + 1, steps=state.steps + active.astype(jnp.int32)
    )
    return emit(state, nxt[:, None], jnp.ones((B,), jnp.int32))


def _step_fn(static: Static):
    return autoregressive_step if static.spec is None else speculative_step


@functools.partial(jax.jit, static_argnums=0)
def _generate_jit(static: Static, params, prompt, prompt_len, max_new, stop_ids, keys):
    _TRACES["generate"] += 1
    state = prefill(static, params, prompt, prompt_len, max_new, stop_ids, keys)
    step = _step_fn(static)
    state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), lambda s: step(static, params, s), state)
    return state


@functools.partial(jax.jit, static_argnums=0)
def _prefill_jit(static: Static, params, prompt, prompt_len, max_new, stop_ids, keys):
    return prefill(static, params, prompt, prompt_len, max_new, stop_ids, keys)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def _step_jit(static: Static, params, state):
    return _step_fn(static)(static, params, state)


# ---------------------------------------------------------------------------- public API


@dataclasses.dataclass
class GenerateOutput:
    tokens: list[list[int]]  # generated ids per row (a stop token, if hit, is the last id)
    texts: list[str] | None  # detokenised, special tokens skipped; None without a tokenizer
    stats: dict


def _stats(state: DecodeState, rows: int, spec) -> dict:
    host = parallel.to_host
    steps = host(state.steps)[:rows]
    drafted = host(state.drafted)[:rows]
    accepted = host(state.accepted)[:rows]
    hist = host(state.accept_hist)[:rows].sum(0)  # [M] steps that accepted exactly i drafts
    total_steps = int(steps.sum())
    stats = {
        "method": "autoregressive" if spec is None else spec.config.method,
        "lossy": spec is not None and spec.lossy,
        "steps": int(host(state.step)) - 1,
        "row_steps": steps.tolist(),
        "generated_tokens": host(state.num_out)[:rows].tolist(),
        "draft_tokens": int(drafted.sum()),
        "accepted_tokens": int(accepted.sum()),
        "row_draft_tokens": drafted.tolist(),
        "row_accepted_tokens": accepted.tolist(),
        # tau: tokens per target call = accepted drafts + 1 per step, averaged over active steps.
        "mean_accepted_length": (
            float(accepted.sum() + total_steps) / total_steps if total_steps else 0.0
        ),
        "acceptance_rate": float(accepted.sum() / drafted.sum()) if drafted.sum() else 0.0,
    }
    if len(hist) > 1:
        # Per draft position i = 1..Dmax: steps that offered it (the token budget can mask the
        # deeper ones near the end), of those the steps that had accepted >= i - 1 drafts, and
        # the steps that accepted >= i.
        stats["offered_by_position"] = host(state.offered)[:rows].sum(0)[1:].tolist()
        stats["reached_by_position"] = host(state.reached)[:rows].sum(0)[1:].tolist()
        stats["accepted_by_position"] = hist[::-1].cumsum()[::-1][1:].tolist()
        stats.update(acceptance_rates(stats))
    return stats


def acceptance_rates(counts: dict) -> dict:
    """acceptance_by_position u_i = P(a step accepts >= i drafts | it offered position i) and
    conditional_acceptance_by_position c_i = P(>= i | >= i - 1, offered i), from the counts in
    `counts` (offered/reached/accepted_by_position). When every step offers every position
    (no budget masking, no short n-gram matches), u = cumprod(c)."""
    ratio = lambda a, b: float(a / b) if b else 0.0  # noqa: E731
    at_least = counts["accepted_by_position"]
    return {
        "acceptance_by_position": [
            ratio(a, o) for a, o in zip(at_least, counts["offered_by_position"], strict=True)
        ],
        "conditional_acceptance_by_position": [
            ratio(a, r) for a, r in zip(at_least, counts["reached_by_position"], strict=True)
        ],
    }


def _bucket(n: int, minimum: int) -> int:
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


def prompt_bucket(longest: int) -> int:
    """The padded prompt length a batch whose longest prompt has `longest` tokens compiles
    for: batches in one bucket share one program.

    16, 32, 48, 64, 96, 128, 192, 256, 384, ...: powers of two, and from 48 on also three
    quarters of the next one. The prefill runs over the whole bucket, and its time grows with
    it, so the half steps cut the padding a prompt can pay for from up to 2x to up to 1.5x
    (SmolLM2, 2-core Zen 4: a 70-token prompt's first token 195 -> 156 ms, 140 tokens
    364 -> 280 ms; BENCHMARKS.md) for at most twice the programs over a range of lengths.
    """
    whole = _bucket(longest, 16)
    three_quarters = whole * 3 // 4
    return three_quarters if whole >= 64 and longest <= three_quarters else whole


def _prepare(
    model: Model, prompts, max_new_tokens, sampling, stop_token_ids, seeds, spec, layout=None
):
    config = model.config
    rows = pr.normalize_prompts(prompts, model.tokenizer, config.vocab_size)
    pr.check_max_new_tokens(max_new_tokens)
    sampling = sampling_params(sampling)
    sampling.check_vocab(config.vocab_size)
    longest = max(len(r) for r in rows)
    pr.check_positions(longest, max_new_tokens, config.max_position_embeddings)
    if spec is not None:
        spec.check_positions(longest, max_new_tokens)
    # Every forward writes its whole block (all nodes, rejected ones included) after a row's
    # committed length, so the caches get that many slots of room past the two buckets.
    block = 1 if spec is None else spec.block_nodes
    emit_max = 1 if spec is None else spec.max_emit
    stops = pr.resolve_stop_ids(stop_token_ids, model, MAX_STOP_IDS)
    B, Tp, O = _bucket(len(rows), 1), prompt_bucket(longest), _bucket(max_new_tokens, 16)
    if layout is not None:
        B = layout.batch_bucket(B)  # rows over the data axis; padding rows are inactive
    prompt = np.zeros((B, Tp), np.int32)
    prompt_len = np.zeros((B,), np.int32)
    for b, r in enumerate(rows):
        prompt[b, : len(r)] = r
        prompt_len[b] = len(r)
    max_new = np.full((B,), max_new_tokens, np.int32)
    if seeds is not None and len(seeds) != len(rows):
        raise ValueError(f"seeds has {len(seeds)} entries for {len(rows)} prompts")
    keys = sp.row_keys(
        sampling.seed, B, None if seeds is None else list(seeds) + [0] * (B - len(rows))
    )
    # A step runs while num_out <= max_new - 1, so the committed length is at most
    # prompt + max_new - 2 <= Tp + O - 2 and the block's last slot must still fit.
    cache_len = Tp + O + block - 1
    check_room(prompt_len + max_new_tokens - 2, block, cache_len, "KV cache")
    static = Static(
        graphdef=None,
        sampling=dataclasses.replace(sampling, seed=0),
        cache_len=cache_len,
        out_len=O + emit_max,
        max_positions=config.max_position_embeddings,
        spec=spec,
        layout=layout,
    )
    if layout is None:
        args = (jnp.asarray(prompt), jnp.asarray(prompt_len), jnp.asarray(max_new))
        return rows, static, (*args, jnp.asarray(stops), keys)
    rowwise = parallel.shard_batch((prompt, prompt_len, max_new, keys), layout)
    stops = parallel.place(stops, layout.replicated())
    return rows, static, (*rowwise[:3], stops, rowwise[3])


def sampling_params(sampling) -> sp.SamplingParams:
    """The call's SamplingParams (None: greedy); anything else is refused."""
    sampling = sp.SamplingParams() if sampling is None else sampling
    if not isinstance(sampling, sp.SamplingParams):
        raise TypeError(f"sampling must be a specjax SamplingParams, got {type(sampling).__name__}")
    return sampling


def _finish(model: Model, state: DecodeState, n_rows: int, spec) -> GenerateOutput:
    out = parallel.to_host(state.out)
    num = parallel.to_host(state.num_out)
    tokens = [out[b, : num[b]].tolist() for b in range(n_rows)]
    texts = None
    if model.tokenizer is not None:
        texts = [model.tokenizer.decode(t) for t in tokens]
    return GenerateOutput(tokens, texts, _stats(state, n_rows, spec))


def generate(
    model,
    prompts,
    max_new_tokens: int,
    sampling: sp.SamplingParams | None = None,
    stop_token_ids=None,
    speculative_config=None,
    *,
    seeds=None,
    mesh=None,
    weight_dtype=None,
) -> GenerateOutput:
    """Generate up to `max_new_tokens` per prompt, optionally with speculative decoding.

    Args:
      model: a specjax Model (from `load_model`) or Decoder.
      prompts: a string, a list of strings, a list of token ids, or a list of id lists.
      max_new_tokens: exact budget per row (fewer only when a stop id is emitted).
      sampling: SamplingParams; default greedy.
      stop_token_ids: None = the model's EOS ids; [] disables stopping; or a list of ids.
      speculative_config: None (autoregressive), a dict in vLLM's key names
        (see `specjax.decoding.spec_config`; its `model` a loaded Model, Decoder or heads;
        `specjax.generate` also takes a checkpoint path there), parsed here once, or a
        `spec_config.Speculative` already parsed (by `specjax.generate`) at a temperature
        of the same kind (0 or > 0) as `sampling`'s, taken as is.
      seeds: optional per-row seeds (overrides sampling.seed row by row).
      mesh: optional `jax.sharding.Mesh` with axes ("data", "model")
        (`specjax.parallel.make_mesh`): the parameters are placed by the logical-axis rules of
        `specjax.parallel` (tensor parallelism over `model`), rows over `data` (the batch
        bucket padded to a multiple of it), and the same one-jit loop runs sharded. None: one
        device. Tokens and stats are gathered to the host before they are read.
      weight_dtype: what the target's matmul weights (projections, LM head, a tied table) are
        read in: None = as stored; "bfloat16" = rounded to bfloat16 once, when the weights are
        laid out for decoding, activations and accumulation staying float32. On the CPU
        kernel that halves the bytes a token reads (a float32 model's decode step runs up to
        about twice as fast where it is bound by reading its weights); on XLA's path the
        rounded values are kept as float32, so the tokens are the same either way. It is a
        slightly different model: the outputs are those of the rounded weights. A draft's
        own is `speculative_config["draft_weight_dtype"]` (lossless: the target verifies).
    Returns:
      GenerateOutput(tokens, texts, stats). stats: method, steps, row_steps, generated_tokens,
      draft_tokens / accepted_tokens (and per row), mean_accepted_length (tau: tokens per
      target call) and acceptance_rate; speculative runs add, per draft position i = 1..Dmax,
      offered_by_position (steps that offered i), reached_by_position (of those, steps that
      had accepted i - 1), accepted_by_position (steps that accepted >= i) and the rates
      acceptance_by_position and conditional_acceptance_by_position (`acceptance_rates`),
      and `lossy` (True only for a lossy verification rule such as Medusa's typical).
    """
    model, rows, static, params, args = _setup(
        model, prompts, max_new_tokens, sampling, stop_token_ids, speculative_config, seeds, mesh,
        weight_dtype,
    )  # fmt: skip
    state = _generate_jit(static, params, *args)
    return _finish(model, state, len(rows), static.spec)


def _setup(
    model,
    prompts,
    max_new_tokens,
    sampling,
    stop_token_ids,
    speculative_config,
    seeds,
    mesh=None,
    weight_dtype=None,
):
    """Validate everything on the host, then split the model: (model, rows, static, params, args)."""
    model = as_model(model)
    kernels.check_weight_dtype("weight_dtype", weight_dtype)
    layout = parallel.layout_of(mesh)
    spec, spec_params, draft = None, (), None
    if speculative_config is not None:
        temperature = sampling_params(sampling).temperature
        resolved = spec_config.resolve(speculative_config, temperature=temperature)
        spec, spec_params = build_plan(resolved, model, sampling)
        draft = resolved.draft
    rows, static, args = _prepare(
        model, prompts, max_new_tokens, sampling, stop_token_ids, seeds, spec, layout
    )
    # Weights packed once for the CPU kernel; a mesh shards the standard layout instead.
    graphdef, params = kernels.split_for_decode(
        model.module, pack=False if layout else None, weight_dtype=weight_dtype
    )
    static = dataclasses.replace(static, graphdef=graphdef)
    if layout is not None:
        spec_params = kernels.standard_layout(spec_params)
        head_dim = model.config.head_dim
        draft_head_dim = getattr(getattr(draft, "config", None), "head_dim", None) or head_dim
        params = parallel.shard_params(params, layout, "target parameters", head_dim)
        spec_params = parallel.shard_params(spec_params, layout, "draft parameters", draft_head_dim)
    return model, rows, static, (params, spec_params), args


def generate_stream(
    model,
    prompts,
    max_new_tokens: int,
    sampling=None,
    stop_token_ids=None,
    speculative_config=None,
    *,
    seeds=None,
    mesh=None,
    weight_dtype=None,
) -> Iterator[list[list[int]]]:
    """Like `generate`, one jitted step per iteration: yields each row's new tokens per step.

    The decode state (caches included) is donated to every step call. Bad prompts, sampling
    or configs raise here, at the call, as `generate` does (not at the first `next()`).
    """
    _, rows, static, params, args = _setup(
        model, prompts, max_new_tokens, sampling, stop_token_ids, speculative_config, seeds, mesh,
        weight_dtype,
    )  # fmt: skip
    return _stream(rows, static, params, args)


def _stream(rows, static, params, args) -> Iterator[list[list[int]]]:
    state = _prefill_jit(static, params, *args)
    seen = np.zeros(len(rows), np.int64)
    while True:
        num = parallel.to_host(state.num_out)[: len(rows)]
        out = parallel.to_host(state.out)[: len(rows)]
        yield [out[b, seen[b] : num[b]].tolist() for b in range(len(rows))]
        seen = num.copy()
        if bool(np.all(parallel.to_host(state.done))):
            return
        state = _step_jit(static, params, state)
