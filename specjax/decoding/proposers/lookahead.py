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
the extra tokens accepted, so every guess keeps its absolute position). The guesses are argmax
at every temperature (the reference's `TEMP_FOR_GUESS = 0`): they only choose what is verified.

**The pool** is the reference's dict from key token to its last G n-grams, in static shapes
per row: K key slots (K = the vocabulary up to MAX_POOL_KEYS, so a vocabulary that small never
loses a key), a [V] map from token to its slot (-1 = none), and per slot its G n-grams with
last-use stamps. Inserting an n-gram its key already holds refreshes it, otherwise it replaces
that key's least recently used n-gram (the reference's per-key LRU list of G). A key not in
the pool takes the least recently used key slot, empty ones first; when all K are held (the
reference's dict has no bound), that evicts the key inserted or refreshed longest ago, with
all its n-grams (LRU over keys: a doubly linked list through the slots, O(1) per insert;
looking a key up is not a use, as in the reference). Seeded, when `seed_pool_from_prompt`,
from the prompt's n-grams and then from every committed token's (the reference's
`POOL_FROM_PROMPT`). The window starts as tokens drawn from the prompt. A frozen row's inserts
are masked, so a step touches O(1) entries per insert, never the whole map.
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

MAX_POOL_KEYS = 8192


@struct.dataclass
class NgramPool:
    """The n-gram pool of every row (leading axis B); `insert` updates one row's.

    Key slot order for the LRU over keys is a circular doubly linked list through the K slots
    and a sentinel K: `newer[K]` is the least recently used slot, `older[K]` the most recent.
    It starts as 0 (least recent) .. K-1, so empty slots are taken in order before any key is
    evicted.
    """

    slot_of: jax.Array  # [B, V] int32 key slot holding each token's n-grams (-1 = none)
    slot_key: jax.Array  # [B, K] int32 token each key slot holds (-1 = empty)
    newer: jax.Array  # [B, K+1] int32 next more recently used slot (K = sentinel)
    older: jax.Array  # [B, K+1] int32 next less recently used slot (K = sentinel)
    grams: jax.Array  # [B, K, G, n] int32 each key's continuations
    stamp: jax.Array  # [B, K, G] int32 each continuation's last use (-1 = empty; LRU smallest)
    clock: jax.Array  # [B] int32 insertion counter

    @classmethod
    def empty(cls, B: int, V: int, K: int, G: int, n: int) -> NgramPool:
        ring = jnp.arange(K + 1, dtype=jnp.int32)  # [K+1]
        return cls(
            slot_of=jnp.full((B, V), -1, jnp.int32),
            slot_key=jnp.full((B, K), -1, jnp.int32),
            newer=jnp.broadcast_to(jnp.mod(ring + 1, K + 1), (B, K + 1)),
            older=jnp.broadcast_to(jnp.mod(ring - 1, K + 1), (B, K + 1)),
            grams=jnp.zeros((B, K, G, n), jnp.int32),
            stamp=jnp.full((B, K, G), -1, jnp.int32),
            clock=jnp.zeros((B,), jnp.int32),
        )

    def lookup(self, keys):
        """[B] key tokens -> ([B, G, n] continuations, most recent first; [B, G] present)."""
        rows = jnp.arange(keys.shape[0])
        slot = self.slot_of[rows, keys]  # [B]
        held = jnp.maximum(slot, 0)
        stamps = self.stamp[rows, held]  # [B, G]
        found = (slot >= 0)[:, None] & (stamps >= 0)  # [B, G]
        order = jnp.argsort(-jnp.where(found, stamps, -2), axis=1)  # most recent first
        grams = jnp.take_along_axis(self.grams[rows, held], order[:, :, None], axis=1)
        return grams, jnp.take_along_axis(found, order, axis=1)

    def insert(self, key, gram, ok) -> NgramPool:
        return pool_insert(self, key, gram, ok)


@struct.dataclass
class LookaheadState:
    window: jax.Array  # [B, n, W] int32 guessed tokens, level 0 oldest
    filled: jax.Array  # [B] int32 steps taken (capped at n): levels made by Jacobi updates
    tail: jax.Array  # [B, n] int32 the last n committed tokens (-1 where there are fewer)
    pool: NgramPool


def _masked_set(x, i, value, ok):
    """x with x[i] = value where ok; elsewhere the write goes out of bounds and is dropped, so
    a masked insert neither reads nor selects x (XLA updates it in place)."""
    i = i if isinstance(i, tuple) else (i,)
    i = tuple(jnp.where(ok, j, x.shape[d]) for d, j in enumerate(i))  # out of bounds unless ok
    return x.at[i].set(value, mode="drop")


def _touch(newer, older, s, ok):
    """Move key slot s to the most recent end of the list (O(1): three reads, six writes)."""
    end = newer.shape[0] - 1  # the sentinel
    a, b, mru = older[s], newer[s], older[end]
    m = jnp.where(mru == s, a, mru)  # the most recent slot once s is unlinked
    newer = _masked_set(newer, a, b, ok)  # unlink s: a <-> b
    older = _masked_set(older, b, a, ok)
    newer = _masked_set(newer, m, s, ok)  # relink it after m
    older = _masked_set(older, s, m, ok)
    newer = _masked_set(newer, s, end, ok)
    older = _masked_set(older, end, s, ok)
    return newer, older


def pool_insert(pool: NgramPool, key, gram, ok) -> NgramPool:
    """One row's pool (no leading B) with `key -> gram` inserted where `ok` (`NgramPool.insert`).

    The key's n-gram is refreshed if present, else it replaces the key's least recently used
    one; a key not in the pool takes the least recently used key slot (evicting its key).
    Either way the key becomes the most recently used.
    """
    ok = ok & (key >= 0) & jnp.all(gram >= 0)
    k = jnp.maximum(key, 0)
    end = pool.newer.shape[0] - 1
    held = pool.slot_of[k]
    absent = held < 0
    s = jnp.where(absent, pool.newer[end], held)  # its slot, or the least recently used
    gone = pool.slot_key[s]  # the key evicted when absent (-1: the slot was empty)
    slot_of = _masked_set(pool.slot_of, jnp.maximum(gone, 0), -1, ok & absent & (gone >= 0))
    slot_of = _masked_set(slot_of, k, s, ok)
    stamps = jnp.where(absent, -1, pool.stamp[s])  # [G] a new key starts with none
    grams = pool.grams[s]  # [G, n]
    hit = (stamps >= 0) & jnp.all(grams == gram[None, :], axis=1)  # [G]
    j = jnp.where(jnp.any(hit), jnp.argmax(hit), jnp.argmin(stamps))
    newer, older = _touch(pool.newer, pool.older, s, ok)
    return NgramPool(
        slot_of=slot_of,
        slot_key=_masked_set(pool.slot_key, s, key, ok),
        newer=newer,
        older=older,
        grams=_masked_set(pool.grams, (s, j), gram, ok),
        stamp=_masked_set(pool.stamp, s, stamps.at[j].set(pool.clock), ok),
        clock=pool.clock + ok.astype(jnp.int32),
    )


def _insert_many(pool: NgramPool, keys, grams, ok) -> NgramPool:
    """One row: insert [I] keys with [I, n] grams in order (later ones are more recent)."""

    def body(i, carry):
        return carry.insert(keys[i], grams[i], ok[i])

    return jax.lax.fori_loop(0, keys.shape[0], body, pool)


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
    POOL = NgramPool  # the pool's static-shape implementation: empty, lookup, insert

    window: int  # W
    ngram_size: int  # N (candidates and window columns hold n = N - 1 tokens after the key)
    max_candidates: int  # G
    seed_pool: bool
    vocab: int  # V: the token -> key slot map's size
    key_slots: int  # K: keys the pool holds per row
    advance: str = "level"  # "level" (the reference) or "accepted" (see `commit`)
    max_positions: int | None = None
    tap_layers: tuple[int, ...] = ()

    @classmethod
    def build(cls, cfg, target, draft):
        V = target.config.vocab_size
        return cls(
            cfg.lookahead_window,
            cfg.ngram_size,
            cfg.max_candidates,
            cfg.seed_pool_from_prompt,
            V,
            min(V, MAX_POOL_KEYS),
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
        n, W, G = self.n, self.window, self.max_candidates
        # The initial guesses: tokens drawn from each row's prompt (the reference's copy_from).
        pick = jax.random.randint(jax.random.key(0), (B, n, W), 0, 1 << 30)
        idx = jnp.mod(pick, jnp.maximum(prompt_len, 1)[:, None, None])
        window = jnp.take_along_axis(prompt, idx.reshape(B, n * W), axis=1).reshape(B, n, W)
        t = jnp.arange(n, dtype=jnp.int32)
        at = prompt_len[:, None] - n + t[None, :]  # [B, n] the last n prompt positions
        tail = jnp.where(at >= 0, jnp.take_along_axis(prompt, jnp.maximum(at, 0), axis=1), -1)
        pool = self.POOL.empty(B, self.vocab, self.key_slots, G, n)
        if self.seed_pool:
            # Every prompt n-gram (prompt[s], prompt[s + 1 .. s + n]), in prompt order.
            s = jnp.arange(Tp, dtype=jnp.int32)
            cols = jnp.minimum(s[:, None] + 1 + t[None, :], Tp - 1)  # [Tp, n]
            grams = prompt[:, cols]  # [B, Tp, n]
            ok = (s[None, :] + n) < prompt_len[:, None]  # [B, Tp] the n-gram lies in the prompt
            pool = jax.vmap(_insert_many)(pool, prompt, grams, ok)
        return LookaheadState(
            window=window.astype(jnp.int32),
            filled=jnp.zeros((B,), jnp.int32),
            tail=tail.astype(jnp.int32),
            pool=pool,
        )

    # --------------------------------------------------------------------------- propose

    def propose(self, ctx: Context, target, params, step: StepInput, key):
        ps: LookaheadState = step.pstate
        n, W = self.n, self.window
        B = step.root.shape[0]
        grams, found = ps.pool.lookup(step.root)  # [B, G, n], [B, G] most recent first
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
        # A frozen row (nothing committed) inserts nothing: masked, not selected afterwards.
        moved = n_commit > 0  # [B]
        ready = ((ps.filled >= n - 1) & moved)[:, None] & jnp.ones((B, W), bool)  # [B, W]
        pool = jax.vmap(_insert_many)(ps.pool, col_keys, col_grams, ready)
        # Committed this step: the root and the accepted drafts (the bonus is the next root).
        M = result.tokens.shape[1]
        seq = jnp.concatenate([ps.tail, step.root[:, None], result.tokens[:, :-1]], axis=1)
        tail = jax.vmap(lambda s, c: jax.lax.dynamic_slice(s, (c,), (n,)))(seq, n_commit)
        if self.seed_pool:  # the n-grams that end at each newly committed token
            p = jnp.arange(M, dtype=jnp.int32)  # new token p sits at seq index n + p
            t = jnp.arange(n, dtype=jnp.int32)
            gram_keys = seq[:, p]  # [B, M] seq[n + p - n]
            grams = seq[:, p[:, None] + 1 + t[None, :]]  # [B, M, n]
            ok = p[None, :] < n_commit[:, None]  # [B, M] (none where nothing was committed)
            pool = jax.vmap(_insert_many)(pool, gram_keys, grams, ok)
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
            pool=pool,
        )
