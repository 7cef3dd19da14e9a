"""EAGLE drafters (Li et al. 2024, 2025): one decoder layer that reads the target's features.

A drafter entry at position t consumes the token x_{t+1} and a feature of position t and
predicts the feature (EAGLE-1) or hidden state (EAGLE-3) of position t + 1, whose logits give
x_{t+2}. The target's embedding and LM head are shared and frozen (never copied).

EAGLE-1 (`method="eagle"`):

    f_t = the target's last hidden state after its final norm (its LM head's input)
    x   = fc(cat(emb(x_{t+1}), f_t))                 2H -> H (bias: a config choice)
    h   = x + attn(x);  h = h + mlp(post_norm(h))    one Llama layer, no input norm
    logits = target LM head(h),  h is f_hat_{t+1}    no final norm

EAGLE-3 (`method="eagle3"`):

    g_t = fc(cat(taps_t))                            3H -> H, no bias; taps = the residual
                                                     stream entering `tap_layers` of the target
    a   = cat(input_norm(emb(x_{t+1})), hidden_norm(g_t))      2H into q/k/v
    h   = g_t + attn(a);  h = h + mlp(post_norm(h))  h: the pre-norm hidden fed to the next step
    logits = lm_head(norm(h))                        over the draft vocabulary (Vd ids);
                                                     target id of draft id i = i + d2t[i]

When drafting several steps ahead the drafter's own `h` replaces the target feature (EAGLE-1:
f_hat; EAGLE-3: the pre-norm hidden, vLLM's `hidden_prenorm`). Parameter names follow vLLM's
loaders (`fc`, `self_attn.{q,k,v,o}_proj`, `mlp.*`, `post_attention_layernorm`, EAGLE-3's
`input_layernorm`, `hidden_norm`, `norm`, `lm_head`, `d2t`, `t2d`), so `specjax.io.drafts`
renames nothing but the prefix.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.cache import KVCache
from specjax.models import Decoder, as_model
from specjax.models.config import ModelConfig, rope_inv_freq
from specjax.models.decoder import (
    MLP,
    RMSNorm,
    _dense,
    apply_rope,
    attend,
    attend_cache,
    dense_many,
    is_laid_out,
)
from specjax.validate import check_int

METHODS = ("eagle", "eagle3")


def default_tap_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's feature layers for a target of `num_layers` layers.

    vLLM's and the reference's choice (2, L//2, L-3) where those are three distinct layers
    inside the model; otherwise (a small target: L = 6 gives 2, 3, 3) three distinct layers
    spread over the depth (L//4, L//2, 3L//4, moved apart where they collide). A target of
    fewer than 3 layers cannot give three distinct layers: its taps repeat the last one.
    """
    L = check_int("num_layers", num_layers, 1)
    ref = (2, L // 2, L - 3)
    if len(set(ref)) == 3 and all(0 <= i < L for i in ref):
        return ref
    if L < 3:
        return tuple(min(i, L - 1) for i in (0, 1, 2))
    taps: list[int] = []
    for want in (L // 4, L // 2, (3 * L) // 4):
        i = max(want, taps[-1] + 1 if taps else 0)
        taps.append(i)
    while taps[-1] > L - 1:  # pushed past the end: shift down, keeping them distinct
        taps = [t - 1 for t in taps] if taps[0] > 0 else taps[:-1] + [L - 1]
    return tuple(taps)


@dataclasses.dataclass(frozen=True)
class EagleConfig:
    """Shapes and options of an EAGLE drafter (hashable).

    Attributes:
      method: "eagle" (EAGLE-1) or "eagle3".
      layer: the drafter's one Llama layer (a ModelConfig with num_layers=1; its hidden size H,
        heads, MLP width and RoPE settings; `vocab_size` is the target's vocabulary).
      fc_bias: EAGLE-1's fc has a bias (the reference has one, vLLM's loader none).
      tap_layers: EAGLE-3 only: the target layers whose incoming residual stream is read.
      draft_vocab_size: EAGLE-3 only: Vd, the LM head's vocabulary (<= the target's).
      target_hidden_size: EAGLE-3 only: the target's hidden size when it differs from H.
      base_model: the target the drafter was trained on.
    """

    method: str
    layer: ModelConfig
    fc_bias: bool = False
    tap_layers: tuple[int, ...] = ()
    draft_vocab_size: int = 0
    target_hidden_size: int = 0
    base_model: str = ""

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"EagleConfig.method={self.method!r}: must be one of {METHODS}")
        if not isinstance(self.layer, ModelConfig) or self.layer.num_layers != 1:
            raise ValueError("EagleConfig.layer must be a ModelConfig with num_layers=1")
        if not self.layer.is_llama:
            raise ValueError(
                f"EagleConfig.layer.model_type={self.layer.model_type!r}: the drafter layer is "
                "Llama-shaped (any target family may use it)"
            )
        if not isinstance(self.fc_bias, bool):
            raise ValueError(f"EagleConfig.fc_bias={self.fc_bias!r} must be a bool")
        taps = tuple(int(i) for i in self.tap_layers)
        object.__setattr__(self, "tap_layers", taps)
        V = self.layer.vocab_size
        if self.method == "eagle":
            if (
                taps
                or self.draft_vocab_size not in (0, V)
                or self.target_hidden_size
                not in (
                    0,
                    self.layer.hidden_size,
                )
            ):
                raise ValueError(
                    "EagleConfig: tap_layers, draft_vocab_size and target_hidden_size are "
                    "EAGLE-3 options; method='eagle' reads the last hidden state over the full "
                    "vocabulary"
                )
            object.__setattr__(self, "draft_vocab_size", V)
            object.__setattr__(self, "target_hidden_size", self.layer.hidden_size)
            return
        if self.fc_bias:
            raise ValueError("EagleConfig.fc_bias=True: EAGLE-3's fc has no bias")
        if len(taps) != 3 or min(taps) < 0:
            raise ValueError(
                f"EagleConfig.tap_layers={taps}: EAGLE-3 reads three target layers (ids >= 0)"
            )
        vd = self.draft_vocab_size or V
        check_int("EagleConfig.draft_vocab_size", vd, 1)
        if vd > V:
            raise ValueError(
                f"EagleConfig.draft_vocab_size={vd} exceeds the target's vocab_size={V}"
            )
        object.__setattr__(self, "draft_vocab_size", vd)
        th = self.target_hidden_size or self.layer.hidden_size
        object.__setattr__(
            self, "target_hidden_size", check_int("EagleConfig.target_hidden_size", th, 1)
        )

    @property
    def hidden_size(self) -> int:
        return self.layer.hidden_size

    @property
    def vocab_size(self) -> int:
        return self.layer.vocab_size

    @property
    def dtype(self) -> str:
        return self.layer.dtype

    @property
    def fc_in(self) -> int:
        """The fc's input width: 2H (EAGLE-1) or 3 x the target's hidden size (EAGLE-3)."""
        if self.method == "eagle":
            return 2 * self.hidden_size
        return len(self.tap_layers) * self.target_hidden_size

    @property
    def qkv_in(self) -> int:
        """q/k/v projections' input width: H (EAGLE-1) or 2H (EAGLE-3)."""
        return self.hidden_size * (1 if self.method == "eagle" else 2)

    def num_params(self) -> int:
        c = self.layer
        D, F, N, K, H = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim
        n = self.fc_in * D + (D if self.fc_bias else 0)
        n += self.qkv_in * (N + 2 * K) * H + N * H * D + 3 * D * F + D  # attn, mlp, post norm
        if self.method == "eagle3":
            n += 3 * D + D * self.draft_vocab_size  # input/hidden/final norms, LM head
        return n


def layer_config_for(target_config: ModelConfig, **overrides) -> ModelConfig:
    """The drafter layer's config for a target: its widths, heads and RoPE, one layer."""
    c = target_config
    base = dict(
        model_type="llama",
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        num_layers=1,
        num_heads=c.num_heads,
        num_kv_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        intermediate_size=c.intermediate_size,
        max_position_embeddings=c.max_position_embeddings,
        norm_eps=c.norm_eps,
        rope_theta=c.rope_theta if c.is_llama else 10000.0,
        rope_scaling=c.rope_scaling if c.is_llama else None,
        dtype=c.dtype,
        bos_token_id=c.bos_token_id,
        eos_token_ids=c.eos_token_ids,
        pad_token_id=c.pad_token_id,
    )
    return ModelConfig(**{**base, **overrides})


class EagleHead(nnx.Module):
    """One EAGLE drafter. See the module docstring for the computation."""

    def __init__(self, config: EagleConfig, rngs: nnx.Rngs | None = None):
        rngs = rngs if rngs is not None else nnx.Rngs(0)
        c = config.layer
        D, N, K, H = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        dt = jnp.dtype(c.dtype)
        self.config = config
        self.fc = _dense(rngs, config.fc_in, D, config.fc_bias, dt)
        self.q_proj = _dense(rngs, config.qkv_in, N * H, c.attention_bias, dt)
        self.k_proj = _dense(rngs, config.qkv_in, K * H, c.attention_bias, dt)
        self.v_proj = _dense(rngs, config.qkv_in, K * H, c.attention_bias, dt)
        self.o_proj = _dense(rngs, N * H, D, c.attention_bias, dt)
        self.mlp = MLP(c, rngs)
        self.post_attention_layernorm = RMSNorm(D, c.norm_eps, dt)
        if config.method == "eagle3":
            Vd, V = config.draft_vocab_size, config.vocab_size
            self.input_layernorm = RMSNorm(D, c.norm_eps, dt)
            self.hidden_norm = RMSNorm(D, c.norm_eps, dt)
            self.norm = RMSNorm(D, c.norm_eps, dt)
            self.lm_head = _dense(rngs, D, Vd, False, dt)
            # Draft id i is target id i + d2t[i]; t2d marks the target ids in the draft vocab.
            self.d2t = nnx.Variable(jnp.zeros((Vd,), jnp.int32))
            self.t2d = nnx.Variable(jnp.arange(V) < Vd)

    @classmethod
    def for_target(cls, target, method: str = "eagle3", *, seed: int = 0, **options):
        """A new drafter for `target` (Model or Decoder) with its widths and RoPE.

        Args:
          target: the frozen model the drafter reads.
          method: "eagle" or "eagle3".
          seed: initialisation seed.
          **options: fc_bias, tap_layers (EAGLE-3 default `default_tap_layers`),
            draft_vocab_size, base_model, and `layer` overrides as a dict (e.g.
            layer={"intermediate_size": 512}).
        """
        model = as_model(target)
        c = model.config
        layer = layer_config_for(c, **options.pop("layer", {}))
        if method == "eagle3":
            options.setdefault("tap_layers", default_tap_layers(c.num_layers))
            options.setdefault("target_hidden_size", c.hidden_size)
        options.setdefault("base_model", model.source)
        return cls(EagleConfig(method, layer, **options), nnx.Rngs(seed))

    # ---------------------------------------------------------------- pieces (training uses them)

    def target_feature(self, last_hidden, taps) -> jax.Array:
        """The per-position feature the drafter reads from a target forward: [B, T, H].

        EAGLE-1: the post-norm last hidden state; EAGLE-3: fc(cat(taps)).
        """
        if self.config.method == "eagle":
            return last_hidden
        if len(taps) != len(self.config.tap_layers):
            raise ValueError(
                f"EAGLE-3 drafter reads {len(self.config.tap_layers)} target taps, got {len(taps)}"
            )
        return self.fc(jnp.concatenate(taps, axis=-1).astype(self.fc.dtype))

    def layer_input(self, target: Decoder, tokens, feature):
        """(qkv input [B, T, H or 2H], residual [B, T, H]) for tokens [B, T], feature [B, T, H]."""
        emb = target.lookup(tokens).astype(feature.dtype)  # [B, T, H] the target's table
        if self.config.method == "eagle":
            x = self.fc(jnp.concatenate([emb, feature], axis=-1))  # [B, T, H]
            return x, x
        a = jnp.concatenate([self.input_layernorm(emb), self.hidden_norm(feature)], axis=-1)
        return a, feature

    def rope(self, positions):
        inv_freq = jnp.asarray(rope_inv_freq(self.config.layer), jnp.float32)  # [H/2]
        angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, H/2]
        return jnp.cos(angles), jnp.sin(angles)

    def qkv(self, a, positions):
        """a [B, T, qkv_in] -> q [B, T, N, Hd], k, v [B, T, K, Hd], RoPE at `positions`."""
        c = self.config.layer
        B, T, _ = a.shape
        q, k, v = dense_many(a, [self.q_proj, self.k_proj, self.v_proj])
        q = q.reshape(B, T, c.num_heads, c.head_dim)
        k = k.reshape(B, T, c.num_kv_heads, c.head_dim)
        v = v.reshape(B, T, c.num_kv_heads, c.head_dim)
        cos, sin = self.rope(positions)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attend(self, q, k, v, mask):
        """Attention of q [B, T, N, Hd] over head-major k, v [B, K, S, Hd] with mask [B, T, S]."""
        return attend(q, k, v, mask, 1.0 / math.sqrt(self.config.layer.head_dim))

    def layer_output(self, residual, attn):
        """The layer's output h (pre-norm) from the residual [B, T, H] and attn [B, T, N, Hd]."""
        B, T = attn.shape[:2]
        h = residual + self.o_proj(attn.reshape(B, T, -1))
        return h + self.mlp(self.post_attention_layernorm(h))

    def draft_logits(self, target: Decoder, h) -> jax.Array:
        """Logits over the drafter's own vocabulary: [..., Vd] float32 (EAGLE-1: Vd = V)."""
        if self.config.method == "eagle":
            return target.unembed(h)
        return self.lm_head(self.norm(h)).astype(jnp.float32)

    def draft_to_target_ids(self) -> jax.Array:
        """[Vd] int32 target id of each draft id."""
        Vd = self.config.draft_vocab_size
        if self.config.method == "eagle":
            return jnp.arange(Vd, dtype=jnp.int32)
        return jnp.arange(Vd, dtype=jnp.int32) + self.d2t[...].astype(jnp.int32)

    def logits(self, target: Decoder, h) -> jax.Array:
        """Logits over the target's vocabulary [..., V] float32; ids outside the draft
        vocabulary get -inf (never drafted)."""
        d = self.draft_logits(target, h)  # [..., Vd]
        c = self.config
        if c.draft_vocab_size == c.vocab_size:  # the full vocabulary: d2t is all zeros
            return d
        full = jnp.full((*d.shape[:-1], c.vocab_size), -jnp.inf, jnp.float32)  # [..., V]
        return full.at[..., self.draft_to_target_ids()].set(d)

    # ------------------------------------------------------------------------ cached forward

    def __call__(
        self, target: Decoder, tokens, feature, positions, cache: KVCache, block_mask, offset=None
    ):
        """One drafter call over T entries, writing their K/V into its one-layer cache.

        Args:
          target: the target's module (embedding and LM head shared).
          tokens: [B, T] int32 x_{t+1} of each entry; feature: [B, T, H] its feature.
          positions: [B, T] int32 RoPE positions (entry t sits at position t).
          cache: the drafter's KVCache (one layer).
          block_mask: [B, T, W] bool over the slots lengths[b] .. lengths[b] + W - 1.
          offset: [B] int32 slot of the first entry; None = lengths.
        Returns:
          (h [B, T, H] pre-norm hidden, logits [B, T, V] over target ids, cache).
        """
        a, residual = self.layer_input(target, tokens, feature)
        q, k, v = self.qkv(a, positions)
        cache, k_all, v_all = cache.write_layer(0, k, v, offset)
        mask = cache.attention_mask(block_mask)  # [B, T, S]
        # Decoding on the CPU: the target's attention kernel over the drafter's one-layer
        # cache (XLA's small batched dots cost tens of microseconds each here, BENCHMARKS.md
        # "A Zen 4 EPYC"); training calls `attend` directly.
        scale = 1.0 / math.sqrt(self.config.layer.head_dim)
        attn = attend_cache(q, cache, 0, k_all, v_all, mask, scale, self.laid_out())
        h = self.layer_output(residual, attn)
        return h, self.logits(target, h), cache

    def laid_out(self) -> bool:
        """Weights packed for decoding on the CPU (`kernels.split_for_decode`): the cached
        forward may use the attention kernel too (never in training)."""
        return is_laid_out(self.o_proj)

    def init_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.for_model(self.config.layer, batch, max_len)


def draft_vocabulary(token_counts, draft_vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-3's reduced vocabulary: the `draft_vocab_size` most frequent target ids.

    Args:
      token_counts: [V] counts of each target id in the training data.
      draft_vocab_size: Vd (<= V).
    Returns:
      (d2t [Vd] int64: target id of draft id i minus i, t2d [V] bool: in the draft vocab).
      Draft ids are the kept target ids in increasing order (ties in frequency go to the
      lower id), as the reference's and vLLM's mapping expects.
    """
    counts = np.asarray(token_counts)
    V = counts.shape[0]
    Vd = check_int("draft_vocab_size", draft_vocab_size, 1)
    if Vd > V:
        raise ValueError(f"draft_vocab_size={Vd} exceeds the vocabulary ({V} ids)")
    order = np.lexsort((np.arange(V), -counts))  # most frequent first, lower id on ties
    kept = np.sort(order[:Vd])
    t2d = np.zeros(V, bool)
    t2d[kept] = True
    return (kept - np.arange(Vd)).astype(np.int64), t2d
