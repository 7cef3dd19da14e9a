"""lookahead: the target guesses n-grams by Jacobi iteration and verifies them in one forward.

Lookahead decoding (Fu et al. 2024; hao-ai-lab/LookaheadDecoding, `lade/decoding.py`) needs no
draft model. With window W, n-gram size N (n = N - 1) and G candidates, every step's single
target forward holds, after the pending root:

- **the verification branch**: the block's P = G * n draft nodes, up to G candidate n-token
  continuations of the root taken from the n-gram pool (keyed by the root), as a trie built
  on device (`ngram_trie.py`: shared prefixes share nodes, duplicates are not offered);
  verified like any tree (greedy longest prefix at T=0, the one-hot multi-candidate rule at
  T>0: lossless);
- **the lookahead branch**: E = n * W extra nodes (`ExtraNodes`), an n x W window of guessed
  tokens. Cell (l, i) (level l, oldest first; column i) sits at position length + 1 + i + l
  and attends to the prefix, the root, level 0's cells 0..i and its own column's cells at
  levels 1..l: the diagonal "trajectory" root, w[0, 0..i], w[1, i], ..., w[l, i], one token
  per position. The top level's argmax predicts each column's next token: a new level.

**commit**: each column i gives the N-gram (w[0, i], ..., w[n-1, i], new[i]), stored under
its first token once the levels above level 0 are all Jacobi outputs; the window drops its
oldest level and appends the new one (one level per step whatever was accepted, as the
reference's `ALWAYS_FWD_ONE`; with `lookahead_advance="accepted"` the columns also shift by
the extra tokens accepted, so every guess keeps its absolute position). The guesses are argmax at every temperature (the reference's
`TEMP_FOR_GUESS = 0`): they only choose what is verified.

**The pool** is fixed-size per row: H buckets (the token id modulo H; H = the vocabulary up
to 8192, so small vocabularies never collide) of G slots, each an n-gram with its key and a
last-use stamp; inserting an n-gram already there refreshes it, otherwise it replaces the
bucket's least recently used slot (the reference's per-key LRU list of G). Seeded, when
`seed_pool_from_prompt`, from the prompt's n-grams and then from every committed token's
(the reference's `POOL_FROM_PROMPT`). The window starts as tokens drawn from the prompt.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.decoding.proposers.base import (
    MAX_SPECULATIVE_TOKENS,
    Capabilities,
    Context,
    Draft,
    ExtraNodes,
    OwnKeys,
    StepInput,
)
from specjax.decoding.proposers.ngram_trie import NgramTrie, ngram_trie
from specjax.decoding.topology import MAX_TREE_NODES
from specjax.validate import check_int

MAX_POOL_BUCKETS = 8192


@struct.dataclass
class LookaheadState:
    window: jax.Array  # [B, n, W] int32 guessed tokens, level 0 oldest
    filled: jax.Array  # [B] int32 steps taken (capped at n): levels made by Jacobi updates
    tail: jax.Array  # [B, n] int32 the last n committed tokens (-1 where there are fewer)
    pool_key: jax.Array  # [B, H, G] int32 key token of each slot (-1 = empty)
    pool_gram: jax.Array  # [B, H, G, n] int32 the continuation stored in each slot
    pool_stamp: jax.Array  # [B, H, G] int32 last use (-1 = empty; LRU = smallest)
    clock: jax.Array  # [B] int32 insertion counter


def pool_insert(state_row, key, gram, ok):
    """One row's pool with `key -> gram` inserted (refreshed if present), where `ok`."""
    pool_key, pool_gram, pool_stamp, clock = state_row
    H = pool_key.shape[0]
    b = jnp.mod(jnp.maximum(key, 0), H)
    keys, grams, stamps = pool_key[b], pool_gram[b], pool_stamp[b]  # [G], [G, n], [G]
    hit = (keys == key) & jnp.all(grams == gram[None, :], axis=1)  # [G]
    slot = jnp.where(jnp.any(hit), jnp.argmax(hit), jnp.argmin(stamps))
    ok = ok & (key >= 0) & jnp.all(gram >= 0)
    return (
        pool_key.at[b, slot].set(jnp.where(ok, key, keys[slot])),
        pool_gram.at[b, slot].set(jnp.where(ok, gram, grams[slot])),
        pool_stamp.at[b, slot].set(jnp.where(ok, clock, stamps[slot])),
        clock + ok.astype(jnp.int32),
    )


def _insert_many(state_row, keys, grams, ok):
    """Insert [K] keys with [K, n] grams in order (later ones are more recent)."""

    def body(i, carry):
        return pool_insert(carry, keys[i], grams[i], ok[i])

    return jax.lax.fori_loop(0, keys.shape[0], body, state_row)


def window_mask(n: int, W: int, P1: int) -> np.ndarray:
    """[E, P+1+E] what each window cell attends to in the block (E = n * W, cells level-major).

    Cell (l, i) sees the root (block node 0), level 0's cells 0..i and its column's cells at
    levels 1..l (itself included); never a draft node.
    """
    E = n * W
    mask = np.zeros((E, P1 + E), bool)
    for level in range(n):
        for i in range(W):
            row = mask[level * W + i]
            row[0] = True
            row[P1 : P1 + i + 1] = True  # level 0, columns 0..i
            for m in range(1, level + 1):
                row[P1 + m * W + i] = True
    return mask


# ---------------------------------------------------------------- speculative_config keys

LOOKAHEAD_KEYS = (
    "lookahead_window",
    "ngram_size",
    "max_candidates",
    "seed_pool_from_prompt",
    "lookahead_advance",
)
LOOKAHEAD_ADVANCES = ("level", "accepted")
# Lookahead's (W, N, G): the reference's README setting on an accelerator; on a CPU, where
# every extra verified node costs, the smaller setting chosen by measurement (LOG.md).
LOOKAHEAD_DEFAULTS = {"gpu": (7, 5, 7), "tpu": (7, 5, 7), "cpu": (3, 4, 3)}


def lookahead_defaults() -> tuple[int, int, int]:
    """(W, N, G) for this machine's default backend (`LOOKAHEAD_DEFAULTS`)."""
    return LOOKAHEAD_DEFAULTS.get(jax.default_backend(), LOOKAHEAD_DEFAULTS["gpu"])


def lookahead_keys(raw: dict) -> OwnKeys:
    """Lookahead's keys validated (window W >= 1, ngram_size N >= 2, max_candidates G >= 1)
    and the candidate trie they size: G candidates of N - 1 tokens, so the depth is N - 1
    (vLLM has no lookahead; num_speculative_tokens, when given, must say the same)."""
    name = lambda key: f"speculative_config[{key!r}]"  # noqa: E731
    W, N, G = lookahead_defaults()
    W = check_int(name("lookahead_window"), raw.get("lookahead_window", W), 1)
    N = check_int(name("ngram_size"), raw.get("ngram_size", N), 2, MAX_SPECULATIVE_TOKENS + 1)
    G = check_int(name("max_candidates"), raw.get("max_candidates", G), 1)
    seed = raw.get("seed_pool_from_prompt", True)
    if not isinstance(seed, bool):
        raise ValueError(f"{name('seed_pool_from_prompt')}={seed!r} must be True or False")
    advance = raw.get("lookahead_advance", "level")
    if advance not in LOOKAHEAD_ADVANCES:
        raise ValueError(
            f"{name('lookahead_advance')}={advance!r} is invalid; allowed: "
            f"{LOOKAHEAD_ADVANCES} (level: one window level per step, as the reference; "
            "accepted: also shift the columns by the tokens accepted)"
        )
    k = N - 1
    if "num_speculative_tokens" in raw and raw["num_speculative_tokens"] != k:
        raise ValueError(
            f"{name('num_speculative_tokens')}={raw['num_speculative_tokens']!r} does not match "
            f"lookahead's candidate length ngram_size - 1 = {k}; leave it unset"
        )
    trie = NgramTrie(G, k)  # the candidates' size limit, by name
    block = trie.num_nodes + k * W
    if block > MAX_TREE_NODES:
        raise ValueError(
            f"lookahead's verify forward would hold {block} nodes (root, max_candidates={G} x "
            f"(ngram_size - 1)={k} candidate nodes and a window of (ngram_size - 1) x "
            f"lookahead_window={W} cells); at most MAX_TREE_NODES={MAX_TREE_NODES}"
        )
    fields = dict(lookahead_window=W, ngram_size=N, max_candidates=G, seed_pool_from_prompt=seed,
                  lookahead_advance=advance)  # fmt: skip
    return OwnKeys(fields, trie)


@dataclasses.dataclass(frozen=True)
class LookaheadProposer:
    # No model: the target's own Jacobi guesses; its per-step trie is sized by its own keys,
    # deterministic (argmax guesses), and its window rides the verify forward as extra nodes.
    CAPABILITIES = Capabilities(
        methods=("lookahead",),
        trees=("trie",),
        depth="own_keys",
        keys=LOOKAHEAD_KEYS,
        parse_keys=lookahead_keys,
        keys_owner="lookahead",
        extra_nodes=True,
    )

    window: int  # W
    ngram_size: int  # N (candidates and window columns hold n = N - 1 tokens after the key)
    max_candidates: int  # G
    seed_pool: bool
    buckets: int  # H
    advance: str = "level"  # "level" (the reference) or "accepted" (see `commit`)
    max_positions: int | None = None
    tap_layers: tuple[int, ...] = ()

    @classmethod
    def build(cls, cfg, target, draft):
        buckets = min(target.config.vocab_size, MAX_POOL_BUCKETS)
        return cls(
            cfg.lookahead_window,
            cfg.ngram_size,
            cfg.max_candidates,
            cfg.seed_pool_from_prompt,
            buckets,
            cfg.lookahead_advance,
        ), ()

    @property
    def n(self) -> int:
        return self.ngram_size - 1

    @property
    def extra_nodes(self) -> int:
        return self.n * self.window

    @property
    def trie(self) -> NgramTrie:
        return NgramTrie(self.max_candidates, self.n)

    # ------------------------------------------------------------------------------ init

    def init(self, ctx: Context, target, params, prompt, prompt_len, prefill, root):
        B, Tp = prompt.shape
        n, W, G, H = self.n, self.window, self.max_candidates, self.buckets
        # The initial guesses: tokens drawn from each row's prompt (the reference's copy_from).
        pick = jax.random.randint(jax.random.key(0), (B, n, W), 0, 1 << 30)
        idx = jnp.mod(pick, jnp.maximum(prompt_len, 1)[:, None, None])
        window = jnp.take_along_axis(prompt, idx.reshape(B, n * W), axis=1).reshape(B, n, W)
        t = jnp.arange(n, dtype=jnp.int32)
        at = prompt_len[:, None] - n + t[None, :]  # [B, n] the last n prompt positions
        tail = jnp.where(at >= 0, jnp.take_along_axis(prompt, jnp.maximum(at, 0), axis=1), -1)
        pool = (
            jnp.full((B, H, G), -1, jnp.int32),
            jnp.zeros((B, H, G, n), jnp.int32),
            jnp.full((B, H, G), -1, jnp.int32),
            jnp.zeros((B,), jnp.int32),
        )
        if self.seed_pool:
            # Every prompt n-gram (prompt[s], prompt[s + 1 .. s + n]), in prompt order.
            s = jnp.arange(Tp, dtype=jnp.int32)
            cols = jnp.minimum(s[:, None] + 1 + t[None, :], Tp - 1)  # [Tp, n]
            grams = prompt[:, cols]  # [B, Tp, n]
            ok = (s[None, :] + n) < prompt_len[:, None]  # [B, Tp] the n-gram lies in the prompt
            pool = jax.vmap(_insert_many)(pool, prompt, grams, ok)
        pool_key, pool_gram, pool_stamp, clock = pool
        return LookaheadState(
            window=window.astype(jnp.int32),
            filled=jnp.zeros((B,), jnp.int32),
            tail=tail.astype(jnp.int32),
            pool_key=pool_key,
            pool_gram=pool_gram,
            pool_stamp=pool_stamp,
            clock=clock,
        )

    # --------------------------------------------------------------------------- propose

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        ps: LookaheadState = step.pstate
        n, W = self.n, self.window
        B = step.root.shape[0]
        rows = jnp.arange(B)
        b = jnp.mod(step.root, self.buckets)  # [B]
        keys, grams = ps.pool_key[rows, b], ps.pool_gram[rows, b]  # [B, G], [B, G, n]
        stamps = ps.pool_stamp[rows, b]  # [B, G]
        found = keys == step.root[:, None]  # [B, G]
        order = jnp.argsort(-jnp.where(found, stamps, -2), axis=1)  # most recent first
        grams = jnp.take_along_axis(grams, order[:, :, None], axis=1)
        found = jnp.take_along_axis(found, order, axis=1)
        tokens, valid, topology = ngram_trie(grams, found)
        tokens = jnp.concatenate([step.root[:, None], tokens], axis=1)  # [B, P+1]
        valid = jnp.concatenate([jnp.ones((B, 1), bool), valid], axis=1)
        P1 = tokens.shape[1]
        level = jnp.arange(n, dtype=jnp.int32)[:, None]
        col = jnp.arange(W, dtype=jnp.int32)[None, :]
        depth = jnp.broadcast_to((1 + level + col).reshape(1, n * W), (B, n * W))
        mask = jnp.broadcast_to(jnp.asarray(window_mask(n, W, P1)), (B, n * W, P1 + n * W))
        extra = ExtraNodes(tokens=ps.window.reshape(B, n * W), depth=depth, mask=mask)
        return Draft(tokens=tokens, valid=valid, topology=topology, extra=extra), ps

    # ---------------------------------------------------------------------------- commit

    def commit(
        self, ctx: Context, target, params, step: StepInput, pstate, verified, result, n_commit
    ):
        ps: LookaheadState = pstate
        n, W = self.n, self.window
        B = step.root.shape[0]
        P1 = verified.logits.shape[1] - n * W
        top = verified.logits[:, P1 + (n - 1) * W :]  # [B, W, V] the newest level's outputs
        new = jnp.argmax(top, axis=-1).astype(jnp.int32)  # [B, W]
        # Column i's N-gram: (w[0, i], ..., w[n-1, i], new[i]), keyed by w[0, i]; stored once
        # the levels above level 0 are Jacobi outputs (the reference's fill phase).
        cols = jnp.concatenate([ps.window, new[:, None, :]], axis=1)  # [B, n+1, W]
        col_keys = cols[:, 0]  # [B, W]
        col_grams = jnp.swapaxes(cols[:, 1:], 1, 2)  # [B, W, n]
        ready = (ps.filled >= n - 1)[:, None] & jnp.ones((B, W), bool)
        pool = (ps.pool_key, ps.pool_gram, ps.pool_stamp, ps.clock)
        pool = jax.vmap(_insert_many)(pool, col_keys, col_grams, ready)
        # Committed this step: the root and the accepted drafts (the bonus is the next root).
        M = result.tokens.shape[1]
        seq = jnp.concatenate([ps.tail, step.root[:, None], result.tokens[:, :-1]], axis=1)
        tail = jax.vmap(lambda s, c: jax.lax.dynamic_slice(s, (c,), (n,)))(seq, n_commit)
        if self.seed_pool:  # the n-grams that end at each newly committed token
            p = jnp.arange(M, dtype=jnp.int32)  # new token p sits at seq index n + p
            t = jnp.arange(n, dtype=jnp.int32)
            gram_keys = seq[:, p]  # [B, M] seq[n + p - n]
            grams = seq[:, p[:, None] + 1 + t[None, :]]  # [B, M, n]
            ok = p[None, :] < n_commit[:, None]
            pool = jax.vmap(_insert_many)(pool, gram_keys, grams, ok)
        pool_key, pool_gram, pool_stamp, clock = pool
        moved = n_commit > 0
        window = jnp.concatenate([ps.window[:, 1:], new[:, None, :]], axis=1)  # [B, n, W]
        if self.advance == "accepted":
            # Keep every guess at its absolute position: the root moved n_commit positions,
            # so the columns shift left by n_commit - 1 (one position is the level shift);
            # the vacated columns restart from committed tokens.
            shift = jnp.maximum(n_commit - 1, 0)  # [B]
            col = jnp.arange(W, dtype=jnp.int32)[None, :] + shift[:, None]  # [B, W]
            src = jnp.broadcast_to(jnp.minimum(col, W - 1)[:, None, :], window.shape)
            moved_cols = jnp.take_along_axis(window, src, axis=2)
            recent = jnp.maximum(jnp.take_along_axis(tail, jnp.mod(col, n), axis=1), 0)
            refill = jnp.broadcast_to(recent[:, None, :], window.shape)
            window = jnp.where((col < W)[:, None, :], moved_cols, refill)
        keep = lambda new_value, old: jnp.where(  # noqa: E731
            moved.reshape((B,) + (1,) * (old.ndim - 1)), new_value, old
        )
        return LookaheadState(
            window=keep(window, ps.window),
            filled=keep(jnp.minimum(ps.filled + 1, n), ps.filled),
            tail=keep(tail, ps.tail),
            pool_key=keep(pool_key, ps.pool_key),
            pool_gram=keep(pool_gram, ps.pool_gram),
            pool_stamp=keep(pool_stamp, ps.pool_stamp),
            clock=keep(clock, ps.clock),
        )
