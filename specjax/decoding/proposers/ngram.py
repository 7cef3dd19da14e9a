"""ngram (prompt lookup): propose what followed the latest n-gram's earliest earlier match.

The history is prompt + generated tokens (committed ones, then the pending root). For n from
`prompt_lookup_max` down to `prompt_lookup_min`, the last n tokens are searched for in the
history; the first (earliest) match whose continuation exists wins, and up to k following
tokens become a chain draft. Missing tokens are invalid nodes, so without a match the step is
a plain target step. All in static shapes: matching is one vectorised compare per n.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from specjax.decoding.proposers.base import Capabilities, Context, Draft, OwnKeys, StepInput
from specjax.validate import check_int


@struct.dataclass
class NgramState:
    history: jax.Array  # [B, S] int32: committed tokens at 0..L-1 (slot index = position)


def prompt_lookup_keys(raw: dict) -> OwnKeys:
    """vLLM's prompt_lookup_min (default 1) <= prompt_lookup_max (default max(min, 3)), >= 1."""
    name = lambda key: f"speculative_config[{key!r}]"  # noqa: E731
    lo = check_int(name("prompt_lookup_min"), raw.get("prompt_lookup_min", 1), 1)
    hi = check_int(name("prompt_lookup_max"), raw.get("prompt_lookup_max", max(lo, 3)), 1)
    if lo > hi:
        raise ValueError(
            f"speculative_config['prompt_lookup_min']={lo} must be <= prompt_lookup_max={hi}"
        )
    return OwnKeys({"prompt_lookup_min": lo, "prompt_lookup_max": hi})


@dataclasses.dataclass(frozen=True)
class NgramProposer:
    # A chain of N copied tokens: deterministic, no model.
    CAPABILITIES = Capabilities(
        methods=("ngram",),
        keys=("prompt_lookup_min", "prompt_lookup_max"),
        parse_keys=prompt_lookup_keys,
        keys_owner="prompt lookup",
    )

    k: int
    n_min: int
    n_max: int
    max_positions: int | None = None  # no positional limit of its own
    tap_layers: tuple[int, ...] = ()
    extra_nodes = 0  # no non-draft nodes in the verify forward

    @classmethod
    def build(cls, cfg, target, draft):
        return cls(cfg.num_speculative_tokens, cfg.prompt_lookup_min, cfg.prompt_lookup_max), ()

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root):
        B, Tp = prompt.shape
        history = jnp.zeros((B, ctx.cache_len), jnp.int32).at[:, :Tp].set(prompt)
        return NgramState(history)

    def _match_row(self, seq, n_tokens):
        """seq: [S] history with the root at n_tokens-1. Returns (start of continuation, found)."""
        S = seq.shape[0]
        idx = jnp.arange(S)  # [S]
        best_start, best_found = jnp.zeros((), jnp.int32), jnp.zeros((), bool)
        for n in range(self.n_min, self.n_max + 1):  # larger n overrides: longest match wins
            suffix_start = n_tokens - n
            ok = (
                idx + n < n_tokens
            )  # the window ends before the suffix's last token: a continuation exists
            for j in range(n):
                suffix_tok = jnp.take(seq, jnp.clip(suffix_start + j, 0, S - 1))
                ok &= jnp.take(seq, jnp.clip(idx + j, 0, S - 1)) == suffix_tok
            ok &= suffix_start >= 0
            found = jnp.any(ok)
            start = (jnp.argmax(ok) + n).astype(jnp.int32)  # earliest match's continuation
            best_start = jnp.where(found, start, best_start)
            best_found = best_found | found
        return best_start, best_found

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        ps: NgramState = step.pstate
        L = step.lengths  # [B]
        B = L.shape[0]
        write = jax.vmap(lambda h, t, at: jax.lax.dynamic_update_slice(h, t[None], (at,)))
        seq = write(ps.history, step.root, L)  # [B, S] root appended at L
        n_tokens = L + 1  # [B]
        start, found = jax.vmap(self._match_row)(seq, n_tokens)  # [B], [B]
        offs = jnp.arange(self.k, dtype=jnp.int32)  # [k]
        src = start[:, None] + offs[None, :]  # [B, k]
        drafts = jnp.take_along_axis(seq, jnp.clip(src, 0, seq.shape[1] - 1), axis=1)  # [B, k]
        valid = found[:, None] & (src < n_tokens[:, None])  # [B, k]
        # A chain: once a draft is missing, everything after it is too.
        tokens = jnp.concatenate([step.root[:, None], drafts], axis=1)  # [B, k+1]
        valid = jnp.concatenate([jnp.ones((B, 1), bool), valid], axis=1)  # [B, k+1]
        return Draft(tokens=tokens, valid=valid), ps

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ):
        # Committed this step: [root, accepted drafts] at positions L .. L + n_commit - 1.
        L = step.lengths
        block = jnp.concatenate([step.root[:, None], result.tokens[:, :-1]], axis=1)  # [B, M]
        write = jax.vmap(lambda h, t, at: jax.lax.dynamic_update_slice(h, t, (at,)))
        history = write(pstate.history, block, L)  # [B, S]; entries past n_commit are stale
        history = jnp.where((n_commit > 0)[:, None], history, pstate.history)
        return NgramState(history)
