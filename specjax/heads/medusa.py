"""Medusa heads (Cai et al. 2024): K small heads that read the target's last hidden state.

Head k (k = 0..K-1) predicts the token at t + k + 2 from `last_hidden[t]` (the target's own LM
head predicts t + 1). A head is L residual blocks `x + SiLU(x W + b)` followed by a projection
to the vocabulary:

    x_0 = h_t                         [D]   the target's last hidden state (after its final norm)
    x_l = x_{l-1} + silu(x_{l-1} W_l + b_l)
    logits_k = x_L U_k                [V]

W and b start at zero, so a new head is the identity and its first logits are the target's
own next-token logits; U starts as a copy of the target's LM head (the transposed embedding
when the target ties them). With `shared_lm_head=True` every head projects with that one copy,
held frozen (a `TargetWeight`, not an `nnx.Param`: no gradient, no optimizer moments), as
vLLM's `original_lm_head: true` and Medusa's "version 2" heads do. On a large vocabulary that
is most of the training cost: four 49,152 x 576 heads are 113M trained parameters against
1.3M in the blocks. FasterDecoding's reference builds `[ResBlock] * L`, one block
shared by all L layers: `shared_blocks=True` keeps that (one block per head, applied L times).

All K heads are stored stacked ([K, ...] leading axis) so a forward is one batched product
per layer and one for the vocabulary projection, whatever K is.

A draft vocabulary (`draft_vocab_size` Vd < V; vLLM's `truncated_vocab_size` and `token_map`)
projects onto Vd target ids only, the most frequent ones of the training rows: `token_map`
[Vd] holds them in increasing order, the LM head(s) are [D, Vd], and every other id gets a
-inf logit (never drafted). On SmolLM2's 49,152 words the vocabulary projection is most of a
head's training step and a fifth of the target's weights read again per drafting step; 8,192
ids cut both by six.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax import kernels
from specjax.models import Decoder, as_model
from specjax.validate import check_int

METHOD = "medusa"


def _positive(name: str, value) -> int:
    return check_int(f"MedusaConfig.{name}", value, 1)


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
    """Shapes and options of a set of Medusa heads (hashable).

    Attributes:
      hidden_size: D, the target's hidden size.
      vocab_size: V, the target's vocabulary.
      num_heads: K heads (head k predicts t + k + 2).
      num_layers: L residual blocks per head.
      shared_blocks: one block per head applied L times (FasterDecoding's layout).
      bias: the residual blocks have a bias (vLLM: `medusa_fc_bias`).
      shared_lm_head: one frozen [D, V] LM head for every head, the target's (vLLM:
        `original_lm_head`), instead of K trained copies.
      draft_vocab_size: Vd, the target ids the heads can draft (vLLM: `truncated_vocab_size`);
        0 (default) or V: the whole vocabulary.
      dtype: parameter dtype.
      base_model: the target the heads were trained on (`base_model_name_or_path`).
    """

    hidden_size: int
    vocab_size: int
    num_heads: int = 4
    num_layers: int = 1
    shared_blocks: bool = False
    bias: bool = True
    shared_lm_head: bool = False
    dtype: str = "float32"
    base_model: str = ""
    draft_vocab_size: int = 0

    method = METHOD

    def __post_init__(self):
        for name in ("hidden_size", "vocab_size", "num_heads", "num_layers"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        for name in ("shared_blocks", "bias", "shared_lm_head"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"MedusaConfig.{name}={getattr(self, name)!r} must be a bool")
        vd = check_int("MedusaConfig.draft_vocab_size", self.draft_vocab_size, 0)
        if vd > self.vocab_size:
            raise ValueError(
                f"MedusaConfig.draft_vocab_size={vd} exceeds vocab_size={self.vocab_size}"
            )
        object.__setattr__(self, "draft_vocab_size", vd or self.vocab_size)

    @property
    def truncated(self) -> bool:
        """The heads draft from a draft vocabulary smaller than the target's."""
        return self.draft_vocab_size < self.vocab_size

    @property
    def stored_blocks(self) -> int:
        """Blocks stored per head: 1 when shared, else num_layers."""
        return 1 if self.shared_blocks else self.num_layers

    def num_params(self) -> int:
        D, V, K, B = self.hidden_size, self.draft_vocab_size, self.num_heads, self.stored_blocks
        heads = 1 if self.shared_lm_head else K
        return K * B * (D * D + (D if self.bias else 0)) + heads * D * V


class TargetWeight(nnx.Variable):
    """A weight copied from the target that the heads read and never train (the shared LM
    head): not an `nnx.Param`, so gradients and optimizers (`wrt=nnx.Param`) pass it by."""


class MedusaHeads(nnx.Module):
    """K Medusa heads. `heads(h)` maps last hidden states [..., D] to logits [..., K, V]."""

    def __init__(
        self, config: MedusaConfig, rngs: nnx.Rngs | None = None, *, lm_head=None, token_map=None
    ):
        """Args:
        config: the heads' shapes.
        rngs: only used when `lm_head` is None (random vocabulary projections).
        lm_head: [D, Vd] initial vocabulary projection for every head (the target's LM head at
          the draft ids); with `config.shared_lm_head`, the one frozen projection all heads use.
        token_map: [Vd] the target id of each draft id, strictly increasing (a truncated
          config only; default the first Vd ids).
        """
        K, Lb, D = config.num_heads, config.stored_blocks, config.hidden_size
        V = config.draft_vocab_size
        dt = jnp.dtype(config.dtype)
        self.config = config
        self.w = nnx.Param(jnp.zeros((K, Lb, D, D), dt))  # [K, L, D_in, D_out], zero: identity
        self.b = nnx.Param(jnp.zeros((K, Lb, D), dt)) if config.bias else None  # [K, L, D]
        if config.truncated:
            ids = np.arange(V) if token_map is None else check_token_map(token_map, config)
            self.token_map = nnx.Variable(jnp.asarray(ids, jnp.int32))  # [Vd], never trained
        elif token_map is not None:
            raise ValueError(f"token_map given, but draft_vocab_size={V} is the whole vocabulary")
        if lm_head is None:
            rngs = rngs if rngs is not None else nnx.Rngs(0)
            lm_head = nnx.initializers.normal(0.02)(rngs.params(), (D, V), dt)
        lm_head = jnp.asarray(lm_head, dt)
        if lm_head.shape != (D, V):
            raise ValueError(f"lm_head has shape {lm_head.shape}, expected (D, Vd) = {(D, V)}")
        if config.shared_lm_head:
            # [D, V], frozen; its own buffer (a train step donates the heads' state, and the
            # target keeps the array it was copied from)
            self.lm_head = TargetWeight(jnp.array(lm_head, copy=True))
        else:
            self.lm_head = nnx.Param(jnp.broadcast_to(lm_head, (K, D, V)))  # [K, D, V]

    @classmethod
    def for_target(cls, target, num_heads: int = 4, num_layers: int = 1, **options):
        """New heads for `target` (a Model or Decoder): identity blocks, the target's LM head.

        Args:
          target: the frozen model the heads will read.
          num_heads, num_layers: K and L.
          **options: other MedusaConfig fields (shared_blocks, bias, shared_lm_head, dtype,
            base_model), and `token_map` ([Vd] target ids, strictly increasing: a draft
            vocabulary, e.g. `specjax.heads.eagle.draft_vocabulary`'s; sets draft_vocab_size).
        """
        model = as_model(target)
        c = model.config
        token_map = options.pop("token_map", None)
        defaults = {"dtype": c.dtype, "base_model": model.source}
        if token_map is not None:
            defaults["draft_vocab_size"] = len(token_map)
        config = MedusaConfig(c.hidden_size, c.vocab_size, num_heads, num_layers,
                              **{**defaults, **options})  # fmt: skip
        module: Decoder = model.module
        lm_head = target_lm_head(module)  # [D, V]
        if config.truncated:
            ids = np.arange(config.draft_vocab_size) if token_map is None else token_map
            token_map = check_token_map(ids, config)
            lm_head = jnp.take(lm_head, jnp.asarray(token_map), axis=1)  # [D, Vd]
        return cls(config, lm_head=lm_head, token_map=token_map)

    def packed_params(self) -> dict:
        return {("w",): kernels.pack_layers, ("lm_head",): kernels.pack}

    def __call__(self, h, num_heads: int | None = None):
        """h: [..., D] the target's last hidden state -> [..., K, V] float32 logits over the
        target's vocabulary (-inf outside a draft vocabulary).

        num_heads: keep only the first num_heads heads' logits (static); default all. With
        packed weights (decoding on the CPU kernel) only those heads are computed: the kernel
        reads the first n matrices of the stack in place. With plain arrays every stored head
        is computed and the output sliced: on XLA:CPU slicing the stacked weights first copies
        them on every call (measured: 0.85 vs 0.31 ms for 1 of 4 heads of the quickstart's,
        D=384, V=2048), while one batched product over all heads costs about what one does.
        """
        logits = self.draft_logits(h, num_heads)  # [..., K, Vd]
        if not self.config.truncated:
            return logits
        full = jnp.full((*logits.shape[:-1], self.config.vocab_size), -jnp.inf, jnp.float32)
        return full.at[..., self.token_map[...]].set(logits)  # [..., K, V]

    def draft_logits(self, h, num_heads: int | None = None):
        """h: [..., D] -> [..., K, Vd] float32 logits over the draft vocabulary (draft id i is
        target id `token_map[i]`; the whole vocabulary when not truncated)."""
        c = self.config
        w = self.w[...]  # [K, Lb, D, D] (or its packed layers)
        b = None if self.b is None else self.b[...]  # [K, Lb, D]
        K = c.num_heads
        if num_heads is not None and isinstance(w, kernels.PackedLayers):
            K = num_heads  # the kernel reads the first K heads' weights in place
            b = None if b is None else b[:K]
        dt = jnp.dtype(c.dtype)
        x = jnp.broadcast_to(h[..., None, :], (*h.shape[:-1], K, h.shape[-1])).astype(dt)
        for layer in range(c.num_layers):
            blk = 0 if c.shared_blocks else layer
            y = kernels.per_group_matmul(x, kernels.layer(w, blk))  # [..., K, D]
            if b is not None:
                y = y + b[:, blk]
            x = x + jax.nn.silu(y)  # [..., K, D]
        if c.shared_lm_head:
            logits = kernels.matmul(x, self.lm_head[...])  # [..., K, Vd]: one head for all
        else:
            logits = kernels.per_group_matmul(x, self.lm_head[...])  # [..., K, Vd]
        if num_heads is not None:
            logits = logits[..., :num_heads, :]
        return logits.astype(jnp.float32)


def check_token_map(token_map, config: MedusaConfig) -> np.ndarray:
    """A draft vocabulary's map as int64 [Vd], refused unless it has Vd = draft_vocab_size
    distinct target ids in increasing order (the order vLLM's `token_map` and the loss use)."""
    ids = np.asarray(token_map)
    Vd, V = config.draft_vocab_size, config.vocab_size
    if ids.shape != (Vd,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"token_map has shape {ids.shape} and dtype {ids.dtype}; expected {Vd} integer "
            f"target ids (draft_vocab_size={Vd})"
        )
    if Vd and (ids.min() < 0 or ids.max() >= V or np.any(np.diff(ids) <= 0)):
        raise ValueError(
            f"token_map must hold distinct target ids in increasing order within [0, {V}); "
            f"got min {ids.min()}, max {ids.max()}"
        )
    return ids.astype(np.int64)


def target_lm_head(module: Decoder) -> jax.Array:
    """The target's LM head as a [D, V] matrix (the transposed embedding when tied)."""
    if module.config.tie_word_embeddings:
        return module.embedder.embedding[...].T  # [D, V]
    return module.lm_head.kernel[...]  # [D, V]
