"""One NNX decoder for the Llama family (Llama, Qwen2, Qwen3, Mistral) and GPT-2.

Module attribute names mirror the Hugging Face parameter names (`embed_tokens`, `layers`,
`self_attn.q_proj`, ... for Llama; `wte`, `h`, `attn.c_attn`, ... for GPT-2), so checkpoint
import/export is a mechanical rename (`hf_param_names`).

The forward pass is a pure function of (tokens, positions, cache, block mask): the KVCache is
passed in and returned. The block of T new tokens is written at each row's committed length;
attention masks cache slots by index (see `specjax/models/axes.py`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax import kernels
from specjax.cache import KVCache
from specjax.models.config import ModelConfig, rope_inv_freq

MASKED = -1e30  # finite large negative: a fully masked row stays NaN-free


class ForwardOutput(NamedTuple):
    """What one forward returns; proposers read the features they were built for from it."""

    logits: jax.Array  # [B, T, V] float32 (or [B, R, V] at `logit_index`)
    # [B, T, D] the last hidden state *after* the final norm: the LM head's input, HF's
    # `last_hidden_state`, what Medusa heads and EAGLE-1 drafters read.
    last_hidden: jax.Array
    taps: tuple  # each [B, T, D]: the residual stream entering each layer in `tap_layers`
    cache: KVCache


class Dense(nnx.Module):
    """y = x @ kernel + bias, the product through `specjax.kernels.matmul`.

    The parameters are `nnx.Linear`'s (`kernel` [in, out], `bias` [out]) under the same names,
    so checkpoints, HF names and sharding rules are unchanged; before decoding on the CPU the
    kernel is laid out once for the few-row kernel (`packed_params`).
    """

    def __init__(self, d_in: int, d_out: int, *, use_bias: bool, dtype, rngs: nnx.Rngs):
        self.kernel = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (d_in, d_out), dtype))
        if use_bias:
            rngs.params()  # the key nnx.Linear draws for its bias: the same init stream
        self.bias = nnx.Param(jnp.zeros((d_out,), dtype)) if use_bias else None
        self.dtype = dtype

    def packed_params(self) -> dict:
        return {("kernel",): kernels.pack}

    def __call__(self, x):  # [..., in] -> [..., out] in the layer's dtype
        y = kernels.matmul(x.astype(self.dtype), self.kernel[...])
        if self.bias is not None:
            y = y + self.bias[...]
        return y


def dense_many(x, layers) -> list:
    """[layer(x) for layer in layers] (Dense layers of one dtype), their products in one kernel
    call where the weights are laid out for it (`kernels.matmul_many`): q/k/v, gate/up."""
    ys = kernels.matmul_many(x.astype(layers[0].dtype), [layer.kernel[...] for layer in layers])
    return [y if d.bias is None else y + d.bias[...] for y, d in zip(ys, layers, strict=True)]


def _dense(rngs, d_in, d_out, bias, dtype):
    return Dense(d_in, d_out, use_bias=bias, dtype=dtype, rngs=rngs)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, dtype):
        self.weight = nnx.Param(jnp.ones((dim,), dtype))
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * normed.astype(x.dtype)


class LayerNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, dtype):
        self.weight = nnx.Param(jnp.ones((dim,), dtype))
        self.bias = nnx.Param(jnp.zeros((dim,), dtype))
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
        normed = (x32 - mean) * jax.lax.rsqrt(var + self.eps)
        return (normed * self.weight[...] + self.bias[...]).astype(x.dtype)


def rope_at(table, positions):
    """(cos, sin) [B, T, H/2] from a `Decoder.rope_table` [2, P, H/2] at `positions` [B, T];
    positions outside 0..P-1 read NaN."""
    rows = jnp.take(table, positions, axis=1, mode="fill", fill_value=jnp.nan)  # [2, B, T, H/2]
    return rows[0], rows[1]


def apply_rope(x, cos, sin):
    """Rotate-half RoPE (the HF Llama convention). x: [B, T, N, H]; cos, sin: [B, T, H/2]."""
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)  # [B, T, N, H/2] each
    c, s = cos[:, :, None, :], sin[:, :, None, :]  # [B, T, 1, H/2]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


def _visible_values(v, mask):
    """v [B, K, S, H] with every slot no query may see (mask [B, T, S]) zeroed: such a slot can
    hold anything (stale, poisoned, NaN), and a zero attention weight times NaN is still NaN."""
    visible = jnp.any(mask, axis=1)  # [B, S]
    return jnp.where(visible[:, None, :, None], v, jnp.zeros((), v.dtype))


def attend(q, k, v, mask, scale):
    """Grouped-query attention over all cache slots, masked by index.

    The cache is read as stored: with k, v head-major, KV head is a leading batch axis of both
    matmuls (scores [B, K, G*T, S], output [B, K, G*T, H]), so only the small query block and
    its output are transposed, never a cache slice. One path for every block size (decode
    steps, verify blocks, tree levels, prefill).

    Args:
      q: [B, T, N, H]; k, v: [B, K, S, H]; mask: [B, T, S] bool.
    Returns:
      [B, T, N, H].
    """
    B, T, N, H = q.shape
    K = k.shape[1]
    G = N // K
    qh = q.reshape(B, T, K, G, H).transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, H)
    # Scores and softmax in float32 whatever the activation dtype.
    scores = jnp.einsum("bkmh,bksh->bkms", qh, k, preferred_element_type=jnp.float32) * scale
    scores = scores.reshape(B, K, G, T, -1)  # [B, K, G, T, S]
    scores = jnp.where(mask[:, None, None], scores, MASKED)
    probs = jax.nn.softmax(scores, axis=-1).reshape(B, K, G * T, -1)  # [B, K, G*T, S]
    out = jnp.einsum("bkms,bksh->bkmh", probs.astype(v.dtype), _visible_values(v, mask))
    return out.reshape(B, K, G, T, H).transpose(0, 3, 1, 2, 4).reshape(B, T, N, H)


def attend_cache(q, cache: KVCache, layer: int, k_all, v_all, mask, scale, laid_out: bool):
    """Attention of a query block over one layer of the cache, as decoding runs it: the CPU
    kernel (`kernels.cache_attention`, only the visible slots read) when the weights are laid
    out for decoding and the block is one it takes, else `attend` over k_all / v_all (the
    layer as stored, [B, K, S, H]). The target's layers and an EAGLE drafter both use it.

    Returns:
      [B, T, N, H].
    """
    if laid_out and kernels.attention_applies(q, cache.k):
        return kernels.cache_attention(q, cache.k, cache.v, layer, mask, scale)
    return attend(q, k_all, v_all, mask, scale)


def is_laid_out(dense) -> bool:
    """Whether a dense layer's weight is packed for decoding on the CPU
    (`kernels.split_for_decode`): never in training, never under a mesh."""
    return isinstance(dense.kernel[...], kernels.PackedWeight)


class Attention(nnx.Module):
    """Self-attention; Llama names (q/k/v/o_proj, q/k_norm) or GPT-2 names (c_attn, c_proj)."""

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
        D, N, K, H = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
        dt = jnp.dtype(config.dtype)
        self.config = config
        if config.is_llama:
            bias = config.attention_bias
            self.q_proj = _dense(rngs, D, N * H, bias, dt)
            self.k_proj = _dense(rngs, D, K * H, bias, dt)
            self.v_proj = _dense(rngs, D, K * H, bias, dt)
            # attention_bias covers o_proj too (Llama, Qwen3), except Qwen2: biased q/k/v only.
            self.o_proj = _dense(rngs, N * H, D, bias and config.model_type != "qwen2", dt)
            if config.qk_norm:
                self.q_norm = RMSNorm(H, config.norm_eps, dt)
                self.k_norm = RMSNorm(H, config.norm_eps, dt)
        else:
            self.c_attn = _dense(rngs, D, 3 * D, True, dt)
            self.c_proj = _dense(rngs, D, D, True, dt)

    def laid_out(self) -> bool:
        """Weights packed for decoding on the CPU (`kernels.split_for_decode`): the block may
        use the attention kernel too (never in training, never under a mesh)."""
        return is_laid_out(self.o_proj if self.config.is_llama else self.c_proj)

    def qkv(self, x):
        """x: [B, T, D] -> q [B, T, N, H], k, v [B, T, K, H]."""
        c = self.config
        B, T, _ = x.shape
        if not c.is_llama:
            q, k, v = jnp.split(self.c_attn(x), 3, axis=-1)  # [B, T, D] each
            return (
                q.reshape(B, T, c.num_heads, c.head_dim),
                k.reshape(B, T, c.num_heads, c.head_dim),
                v.reshape(B, T, c.num_heads, c.head_dim),
            )
        q, k, v = dense_many(x, [self.q_proj, self.k_proj, self.v_proj])
        q = q.reshape(B, T, c.num_heads, c.head_dim)  # [B, T, N, H]
        k = k.reshape(B, T, c.num_kv_heads, c.head_dim)  # [B, T, K, H]
        v = v.reshape(B, T, c.num_kv_heads, c.head_dim)  # [B, T, K, H]
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def __call__(self, x, rope, cache: KVCache, layer: int, mask, offset):
        """x: [B, T, D]; rope: (cos, sin) [B, T, H/2] or None; mask: [B, T, S]; offset: [B]."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        cache, k_all, v_all = cache.write_layer(layer, k, v, offset)  # [B, K, S, H] each
        scale = 1.0 / math.sqrt(self.config.head_dim)
        out = attend_cache(q, cache, layer, k_all, v_all, mask, scale, self.laid_out())
        out = out.reshape(B, T, -1)  # [B, T, N*H]
        return (self.o_proj(out) if self.config.is_llama else self.c_proj(out)), cache


class MLP(nnx.Module):
    """SwiGLU (gate/up/down_proj) for Llama; GELU (c_fc, c_proj) for GPT-2."""

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
        D, F, dt = config.hidden_size, config.intermediate_size, jnp.dtype(config.dtype)
        self.is_llama = config.is_llama
        self.exact_gelu = config.hidden_act == "gelu"
        if self.is_llama:
            self.gate_proj = _dense(rngs, D, F, False, dt)
            self.up_proj = _dense(rngs, D, F, False, dt)
            self.down_proj = _dense(rngs, F, D, False, dt)
        else:
            self.c_fc = _dense(rngs, D, F, True, dt)
            self.c_proj = _dense(rngs, F, D, True, dt)

    def __call__(self, x):  # [B, T, D] -> [B, T, D]
        if self.is_llama:
            gate, up = dense_many(x, [self.gate_proj, self.up_proj])
            return self.down_proj(jax.nn.silu(gate) * up)
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=not self.exact_gelu))


class Block(nnx.Module):
    def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
        dt = jnp.dtype(config.dtype)
        Norm = RMSNorm if config.is_llama else LayerNorm
        if config.is_llama:
            self.input_layernorm = Norm(config.hidden_size, config.norm_eps, dt)
            self.self_attn = Attention(config, rngs)
            self.post_attention_layernorm = Norm(config.hidden_size, config.norm_eps, dt)
        else:
            self.ln_1 = Norm(config.hidden_size, config.norm_eps, dt)
            self.attn = Attention(config, rngs)
            self.ln_2 = Norm(config.hidden_size, config.norm_eps, dt)
        self.mlp = MLP(config, rngs)
        self.is_llama = config.is_llama

    def __call__(self, x, rope, cache, layer, mask, offset):
        if self.is_llama:
            norm1, attn, norm2 = self.input_layernorm, self.self_attn, self.post_attention_layernorm
        else:
            norm1, attn, norm2 = self.ln_1, self.attn, self.ln_2
        with jax.named_scope("attention"):
            a, cache = attn(norm1(x), rope, cache, layer, mask, offset)
        x = x + a  # [B, T, D]
        with jax.named_scope("mlp"):
            x = x + self.mlp(norm2(x))  # [B, T, D]
        return x, cache


class Decoder(nnx.Module):
    """A causal LM. `config.model_type` picks Llama-family or GPT-2 modules."""

    def __init__(self, config: ModelConfig, rngs: nnx.Rngs | None = None, *, seed: int = 0):
        rngs = rngs if rngs is not None else nnx.Rngs(seed)
        self.config = config
        D, V, dt = config.hidden_size, config.vocab_size, jnp.dtype(config.dtype)
        embed = lambda n: nnx.Embed(
            n, D, dtype=dt, param_dtype=dt, rngs=rngs, embedding_init=nnx.initializers.normal(0.02)
        )
        blocks = nnx.List([Block(config, rngs) for _ in range(config.num_layers)])
        if config.is_llama:
            self.embed_tokens = embed(V)
            self.layers = blocks
            self.norm = RMSNorm(D, config.norm_eps, dt)
        else:
            self.wte = embed(V)
            self.wpe = embed(config.max_position_embeddings)
            self.h = blocks
            self.ln_f = LayerNorm(D, config.norm_eps, dt)
        if not config.tie_word_embeddings:
            self.lm_head = _dense(rngs, D, V, False, dt)

    @property
    def blocks(self):
        return self.layers if self.config.is_llama else self.h

    @property
    def embedder(self) -> nnx.Embed:
        return self.embed_tokens if self.config.is_llama else self.wte

    def packed_params(self) -> dict:
        """A tied table is packed for the LM head; token rows are read from its panels."""
        if not self.config.tie_word_embeddings:
            return {}
        name = "embed_tokens" if self.config.is_llama else "wte"
        return {(name, "embedding"): lambda w: kernels.pack(w, table=True)}

    def lookup(self, tokens):
        """The token embeddings alone: tokens [...] -> [..., D] (no position embedding), in the
        model's dtype (a tied table packed in bfloat16 panels is read from them, then widened)."""
        rows = kernels.embed_lookup(self.embedder.embedding[...], tokens)
        return rows.astype(jnp.dtype(self.config.dtype))

    def embed(self, tokens, positions):
        """tokens, positions: [B, T] -> [B, T, D]."""
        x = self.lookup(tokens)
        if not self.config.is_llama:
            x = x + self.wpe(positions)
        return x

    def final_norm(self, h):
        return self.norm(h) if self.config.is_llama else self.ln_f(h)

    def unembed(self, x):
        """The LM head alone. x: [..., D] post-norm hidden state -> [..., V] float32 logits.

        Draft heads that read the target's `last_hidden` share this head (never a copy).
        """
        if self.config.tie_word_embeddings:
            E = self.embedder.embedding[...]
            if isinstance(E, kernels.PackedWeight):
                return kernels.matmul(x, E).astype(jnp.float32)
            # Contract with the [V, D] table as stored. `nnx.Embed.attend` writes `x @ E.T`, and
            # XLA:CPU fuses that transpose into a strided loop (2x slower per decode step).
            logits = jax.lax.dot_general(x, E.astype(x.dtype), (((x.ndim - 1,), (1,)), ((), ())))
        else:
            logits = self.lm_head(x)
        return logits.astype(jnp.float32)

    def unembed_at(self, x, ids):
        """The LM head at some vocabulary ids only: x [..., D], ids [M] int32 -> [..., M]
        float32, equal to `unembed(x)[..., ids]` without computing the other V - M columns
        (a drafter's reduced vocabulary: 8,192 of 49,152 is a sixth of the product)."""
        if self.config.tie_word_embeddings:
            rows = kernels.embed_lookup(self.embedder.embedding[...], ids)  # [M, D]
        else:
            w = self.lm_head.kernel[...]
            w = kernels.unpack(w) if isinstance(w, kernels.PackedWeight) else w  # [D, V]
            rows = jnp.take(w, ids, axis=1).T  # [M, D]
        logits = jax.lax.dot_general(x, rows.astype(x.dtype), (((x.ndim - 1,), (1,)), ((), ())))
        return logits.astype(jnp.float32)

    def rope(self, positions):
        if not self.config.is_llama:
            return None
        inv_freq = jnp.asarray(
            rope_inv_freq(self.config), jnp.float32
        )  # [H/2], a compile-time constant
        angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
        return jnp.cos(angles), jnp.sin(angles)

    def rope_table(self, size: int):
        """[2, size, H/2] float32: cos and sin of positions 0..size-1 (None without RoPE).

        A decode loop computes it once, before its `while_loop`, and hands each step's rows to
        `__call__` (`rope_at`): inside a step XLA fuses cos and sin into every layer's rotation
        and evaluates them per head and element, which at a 5-token block cost a sixth of the
        step's time outside the matmuls on SmolLM2's 30 layers.
        """
        positions = jnp.arange(min(size, self.config.max_position_embeddings), dtype=jnp.int32)
        rope = self.rope(positions[None])
        return None if rope is None else jnp.stack(rope)[:, 0]

    def attention_mask(self, cache: KVCache, positions, block_mask, offset):
        """[B, T, S] bool: committed slots, visible block slots, and the sliding window."""
        B, T = positions.shape
        if block_mask is None:
            block_mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
        elif block_mask.ndim == 2:
            block_mask = jnp.broadcast_to(block_mask, (B, *block_mask.shape))
        mask = cache.attention_mask(block_mask)  # [B, T, S]
        window = self.config.sliding_window
        if window is not None and window < cache.max_len:
            # Key positions: committed slot s holds position s; a block slot holds its node's position.
            slots = jnp.arange(cache.max_len, dtype=jnp.int32)  # [S]
            rel = slots[None, :] - offset[:, None]  # [B, S]
            in_block = (rel >= 0) & (rel < T)
            block_pos = jnp.take_along_axis(positions, jnp.clip(rel, 0, T - 1), axis=1)  # [B, S]
            key_pos = jnp.where(in_block, block_pos, slots[None, :])  # [B, S]
            mask &= positions[:, :, None] - key_pos[:, None, :] < window  # [B, T, S]
        return mask

    def __call__(
        self,
        tokens,
        positions,
        cache: KVCache,
        block_mask=None,
        *,
        offset=None,
        tap_layers: tuple[int, ...] = (),
        logit_index=None,
        rope_table=None,
    ) -> ForwardOutput:
        """Run T new tokens per row through the decoder, writing their K/V at lengths[b]...

        Args:
          tokens: [B, T] int32. positions: [B, T] int32 (committed length + depth in the block).
          cache: KVCache; the block is written but not committed (lengths unchanged).
          block_mask: [B, T, W] or [T, W] bool: query t sees slot lengths[b] + j; None = causal
            (W = T). A tree's nodes see their ancestors through it.
          offset: [B] int32 slot where the T tokens are written; None = lengths. A drafter that
            fills a tree level by level writes each level after lengths[b] at its node indices.
          tap_layers: static layer ids (0..L-1) whose incoming residual stream to return in
            `taps`, in the order given (EAGLE-3's feature taps).
          logit_index: optional [B, R] int32 block indices; logits only there ([B, R, V]).
          rope_table: optional `rope_table(size)`, read at `positions` instead of computing
            cos and sin here (a position past its end reads NaN: never a silent clip).
        Returns:
          ForwardOutput(logits, last_hidden (post-norm, every position), taps, cache).
        """
        x = self.embed(tokens, positions)  # [B, T, D]
        rope = self.rope(positions) if rope_table is None else rope_at(rope_table, positions)
        offset = cache.lengths if offset is None else offset  # [B]
        mask = self.attention_mask(cache, positions, block_mask, offset)  # [B, T, S]
        bad = [i for i in tap_layers if not 0 <= i < self.config.num_layers]
        if bad:
            raise ValueError(
                f"tap_layers={tuple(tap_layers)}: layer ids must be in [0, "
                f"{self.config.num_layers - 1}], got {bad}"
            )
        entering = {}
        for i, block in enumerate(self.blocks):
            entering[i] = x  # [B, T, D] the residual stream entering layer i
            with jax.named_scope(f"layer_{i}"):
                x, cache = block(x, rope, cache, i, mask, offset)
        last_hidden = self.final_norm(x)  # [B, T, D]
        h = last_hidden
        if logit_index is not None:
            h = jnp.take_along_axis(h, logit_index[:, :, None], axis=1)  # [B, R, D]
        taps = tuple(entering[i] for i in tap_layers)
        return ForwardOutput(self.unembed(h), last_hidden, taps, cache)


def hf_param_names(config: ModelConfig) -> dict[str, tuple[tuple, bool]]:
    """Map each HF tensor name to (nnx state path, transpose?) for `config`.

    HF nn.Linear stores [out, in] (transpose into an NNX kernel [in, out]); GPT-2's Conv1D already
    stores [in, out].
    """
    names: dict[str, tuple[tuple, bool]] = {}
    if config.is_llama:
        names["model.embed_tokens.weight"] = (("embed_tokens", "embedding"), False)
        names["model.norm.weight"] = (("norm", "weight"), False)
        for i in range(config.num_layers):
            pre, path = f"model.layers.{i}.", ("layers", i)
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                names[f"{pre}self_attn.{proj}.weight"] = (
                    (*path, "self_attn", proj, "kernel"),
                    True,
                )
                bias = config.attention_bias and (proj != "o_proj" or config.model_type != "qwen2")
                if bias:
                    names[f"{pre}self_attn.{proj}.bias"] = (
                        (*path, "self_attn", proj, "bias"),
                        False,
                    )
            if config.qk_norm:
                for norm in ("q_norm", "k_norm"):
                    names[f"{pre}self_attn.{norm}.weight"] = (
                        (*path, "self_attn", norm, "weight"),
                        False,
                    )
            for proj in ("gate_proj", "up_proj", "down_proj"):
                names[f"{pre}mlp.{proj}.weight"] = ((*path, "mlp", proj, "kernel"), True)
            for norm in ("input_layernorm", "post_attention_layernorm"):
                names[f"{pre}{norm}.weight"] = ((*path, norm, "weight"), False)
        if not config.tie_word_embeddings:
            names["lm_head.weight"] = (("lm_head", "kernel"), True)
        return names
    names["transformer.wte.weight"] = (("wte", "embedding"), False)
    names["transformer.wpe.weight"] = (("wpe", "embedding"), False)
    for part in ("weight", "bias"):
        names[f"transformer.ln_f.{part}"] = (("ln_f", part), False)
    for i in range(config.num_layers):
        pre, path = f"transformer.h.{i}.", ("h", i)
        for mod, sub in (
            ("attn", "c_attn"),
            ("attn", "c_proj"),
            ("mlp", "c_fc"),
            ("mlp", "c_proj"),
        ):
            names[f"{pre}{mod}.{sub}.weight"] = ((*path, mod, sub, "kernel"), False)
            names[f"{pre}{mod}.{sub}.bias"] = ((*path, mod, sub, "bias"), False)
        for norm in ("ln_1", "ln_2"):
            for part in ("weight", "bias"):
                names[f"{pre}{norm}.{part}"] = ((*path, norm, part), False)
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = (("lm_head", "kernel"), True)
    return names


def export_state(module: Decoder) -> dict[str, np.ndarray]:
    """HF-named numpy tensors of `module` (contiguous, ready for safetensors or GGUF)."""
    flat = dict(nnx.to_flat_state(nnx.state(module, nnx.Param)))
    out = {}
    for name, (path, transpose) in hf_param_names(module.config).items():
        array = np.asarray(flat[path].get_value())
        out[name] = np.ascontiguousarray(array.T if transpose else array)
    return out
