"""KVCache: a functional key/value cache, rolled back by index masking.

The cache is a pytree passed into every forward call and returned from it; nothing hides in
module state. Row b holds `lengths[b]` committed tokens in slots 0..lengths[b]-1. A forward call
writes its T-token block at slots lengths[b]..lengths[b]+T-1 without committing it; the caller
then commits what was accepted (`advance` for a chain, `commit_path` for a tree path). Rejected
slots are simply left behind: they are masked by index and overwritten by a later block.

Bounds are checked on the host (`check_room`) because XLA clamps an out-of-range
`dynamic_update_slice` start silently, which would overwrite the last slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class KVCache:
    """k, v: [L, B, K, S, H]; lengths: [B] int32 committed tokens per row; max_len = S (static).

    The buffers are head-major (each KV head's slots contiguous, the layout transformers' caches
    use): attention over any block size then reads a layer's [B, K, S, H] slice as stored, with
    K as a leading batch axis of both matmuls. Slot-major [L, B, S, K, H] made XLA:CPU copy a
    transposed K and V slice per layer for every block over 2 tokens (BENCHMARKS.md, "EAGLE").
    """

    k: jax.Array  # [L, B, K, S, H]
    v: jax.Array  # [L, B, K, S, H]
    lengths: jax.Array  # [B] int32
    max_len: int = struct.field(pytree_node=False, default=0)

    @classmethod
    def init(cls, num_layers, batch, max_len, num_kv_heads, head_dim, dtype=jnp.float32):
        """Zero-initialised buffers (stale slots must never hold garbage that leaks)."""
        shape = (num_layers, batch, num_kv_heads, max_len, head_dim)
        return cls(
            k=jnp.zeros(shape, dtype),
            v=jnp.zeros(shape, dtype),
            lengths=jnp.zeros((batch,), jnp.int32),
            max_len=max_len,
        )

    @classmethod
    def for_model(cls, config, batch, max_len):
        return cls.init(
            config.num_layers,
            batch,
            max_len,
            config.num_kv_heads,
            config.head_dim,
            jnp.dtype(config.dtype),
        )

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    def write_layer(self, layer: int, k_new, v_new, offset=None):
        """Write a block of T new keys/values for one layer at each row's offset (default lengths).

        Args:
          layer: static layer index.
          k_new, v_new: [B, T, K, H].
          offset: [B] int32 first slot of the block; None = lengths (the usual case).
        Returns:
          (cache with the block written, k_layer [B, K, S, H], v_layer [B, K, S, H]).
        """
        offset = self.lengths if offset is None else offset
        B, T = k_new.shape[:2]
        rows = jnp.arange(B, dtype=jnp.int32)[:, None]  # [B, 1]
        slots = offset[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]  # [B, T]
        # One scatter into the whole [L, B, K, S, H] buffer, which XLA updates in place inside the
        # decode loop. (A per-row dynamic_update_slice of the layer, then `.at[layer].set`, made
        # XLA copy a layer or the whole cache per layer per step.) Out-of-range slots are dropped,
        # never clamped onto the last slots; callers size caches (or `check_room`) so none occur.
        # Index (layer, rows, :, slots): the advanced indices broadcast to [B, T] and lead, so the
        # update is read as [B, T, K, H], the block's own layout.
        k = self.k.at[layer, rows, :, slots].set(k_new.astype(self.k.dtype), mode="drop")
        v = self.v.at[layer, rows, :, slots].set(v_new.astype(self.v.dtype), mode="drop")
        return self.replace(k=k, v=v), k[layer], v[layer]  # k[layer], v[layer]: [B, K, S, H]

    def attention_mask(self, block_mask):
        """Which cache slots each new query may see.

        Args:
          block_mask: [B, T, W] bool over the W slots after lengths[b] (the current block region):
            block_mask[b, t, j] = query t sees slot lengths[b] + j (itself or an ancestor; causal
            for a plain chain, where W = T).
        Returns:
          [B, T, S] bool: slot s visible iff s < lengths[b] or (s - lengths[b]) is visible in the block.
        """
        B, T, W = block_mask.shape
        S = self.max_len
        slots = jnp.arange(S, dtype=jnp.int32)  # [S]
        rel = slots[None, :] - self.lengths[:, None]  # [B, S]
        idx = jnp.where((rel >= 0) & (rel < W), rel, W)  # [B, S]; W points at a padded False column
        padded = jnp.pad(block_mask, ((0, 0), (0, 0), (0, 1)))  # [B, T, W+1]
        from_block = jnp.take_along_axis(
            padded, jnp.broadcast_to(idx[:, None, :], (B, T, S)), axis=2
        )  # [B, T, S]
        return (rel < 0)[:, None, :] | from_block  # [B, T, S]

    def advance(self, num_tokens):
        """Commit `num_tokens[b]` block entries that already sit contiguously after lengths[b]."""
        return self.replace(lengths=self.lengths + num_tokens.astype(jnp.int32))

    def rollback(self, new_lengths):
        """Forget everything at or after new_lengths[b] (slots are masked, no data moves)."""
        return self.replace(lengths=jnp.minimum(self.lengths, new_lengths.astype(jnp.int32)))

    def commit_path(self, path, num_tokens):
        """Gather a tree path's K/V into contiguous slots and commit it.

        Args:
          path: [B, M] int32 block indices (relative to lengths[b]) of the accepted nodes in order;
            entries at or after num_tokens[b] are ignored.
          num_tokens: [B] int32, number of path entries to commit.
        """
        M = path.shape[1]
        src = self.lengths[:, None] + jnp.maximum(path, 0)  # [B, M] absolute source slots
        dst = self.lengths[:, None] + jnp.arange(M, dtype=jnp.int32)[None, :]  # [B, M]
        keep = jnp.arange(M)[None, :] < num_tokens[:, None]  # [B, M]
        # Entries beyond num_tokens write back what is already at dst, so they change nothing.
        src = jnp.where(keep, src, dst)  # [B, M]
        rows = jnp.arange(self.batch)[:, None]  # [B, 1]

        def move(buf):  # [L, B, K, S, H]
            # Advanced indices (rows, slots) around a slice lead the result: [B, M, L, K, H].
            gathered = buf[:, rows, :, jnp.clip(src, 0, self.max_len - 1)]
            return buf.at[:, rows, :, jnp.clip(dst, 0, self.max_len - 1)].set(gathered)

        return self.replace(k=move(self.k), v=move(self.v), lengths=self.lengths + num_tokens)


def check_room(lengths, num_new: int, max_len: int, what: str = "cache") -> None:
    """Host-side bound check: writing num_new tokens after each row's length must fit."""
    worst = int(np.max(np.asarray(lengths))) + int(num_new)
    if worst > max_len:
        raise ValueError(
            f"{what}: writing {num_new} tokens after length {worst - num_new} needs {worst} slots, "
            f"but max_len={max_len}"
        )
