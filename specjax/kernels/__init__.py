"""The one matmul function of the decode path, and the CPU kernel behind it.

Decoders and heads call `matmul` (and `embed_lookup` for tables); nothing else knows which
product runs. A weight is either a plain array (`[*G, K, N]`, the training and checkpoint
layout) or a `PackedWeight` (panels of 16 output columns, laid out once by `lay_out` before
decoding on the CPU). A packed weight with at most `MAX_KERNEL_ROWS` rows of activations goes
to the C++ kernel (`packed_matmul.cc`, an XLA FFI custom call on XLA's thread pool); more rows
(a long prefill) go to XLA's dot over the same panels. Unpacked weights always use XLA's dot:
GPU/TPU, training, a mesh that shards the weights.

A decoder laid out for decoding also sends query blocks of up to `MAX_ATTENTION_ROWS` tokens
to `cache_attention` (`attention.cc`), which reads only each row's visible cache slots, and a
bfloat16 packed table's rows to `table_rows` (`packed_matmul.cc`), which widens only the rows
it reads.

`SPECJAX_CPU_KERNEL=0` turns packing off (XLA's dot everywhere: A/B runs, a fallback); the
tokens are the same either way (float32 accumulation in both).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specjax.kernels import build

ENV = "SPECJAX_CPU_KERNEL"
ATTENTION_ENV = "SPECJAX_CPU_ATTENTION"  # "0": XLA's attention, the matmul kernel kept
LANES = 16  # output columns per panel (the kernel's `kLanes`)
# Activation rows up to which the kernel beats XLA's dot over the same (packed) weights; above
# it XLA's GEMM over the panels as stored. Measured on an AVX2-only AMD EPYC (BENCHMARKS.md
# "Few-row kernel"): the kernel is ahead up to about 256 rows (a batch-8 verify block of 17
# nodes is 136) and behind from about 300. 64 before the AVX2 tiles were fixed.
MAX_KERNEL_ROWS = 256
# Rows up to which the matmul kernel uses its wider tiles (3-4 panels in flight on AVX-512, 2
# on AVX2; narrower above); None: the build's own default (`kWideRows` in `packed_matmul.cc`:
# every row count on AVX-512, 2 rows on AVX2). Read when a program is traced and passed to
# the kernel as an attribute, so experiments A/B tilings in one process
# (`experiments/kernel_variants.py`).
WIDE_ROWS: int | None = None


def _tiling() -> dict:
    return {"wide_rows": np.int64(-1 if WIDE_ROWS is None else WIDE_ROWS)}


@struct.dataclass
class PackedWeight:
    """A weight laid out for the kernel: panels [*G, NB, K, 16] with NB = ceil(N / 16).

    panels[..., nb, k, c] = W[..., k, 16 * nb + c] (zero past N). `n` is N; `table` marks a
    [N, K] table (a tied embedding) packed as its transpose, whose rows `embed_lookup` reads
    from the panels, so no second copy of the table is kept.

    bfloat16 panels hold each pair of k-rows interleaved (`pair_rows`): in memory, k = 2i and
    2i + 1 of a column share one 32-bit word, so the kernel widens two weights with a shift and
    a mask (no shuffle); an odd K's last row stays as it is. Read them through `unpack`.
    """

    panels: jax.Array
    n: int = struct.field(pytree_node=False)
    table: bool = struct.field(pytree_node=False, default=False)

    def __getitem__(self, index):  # `variable[...]` on an NNX Param holding a packed weight
        if index is not Ellipsis:
            raise TypeError("a PackedWeight is read whole (`param[...]`), not indexed")
        return self

    @property
    def k(self) -> int:
        return self.panels.shape[-2]

    @property
    def dtype(self):
        return self.panels.dtype

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self.panels.shape[:-3]


@struct.dataclass
class PackedLayers:
    """Per-layer packed weights of a stack [G, L, K, N] (Medusa's blocks): one PackedWeight
    [G, ...] per layer, so a layer is read without slicing (and copying) the stack."""

    layers: tuple

    def __getitem__(self, index):
        if index is not Ellipsis:
            raise TypeError("a PackedLayers is read whole (`param[...]`); use `kernels.layer`")
        return self


def pack_layers(w) -> PackedLayers:
    """w [G, L, K, N] -> PackedLayers of L PackedWeights batched over G."""
    return PackedLayers(tuple(pack(w[:, i]) for i in range(w.shape[1])))


def layer(w, i: int):
    """Layer i of a stack: w[:, i] for an array [G, L, K, N], the i-th PackedWeight otherwise."""
    return w.layers[i] if isinstance(w, PackedLayers) else w[:, i]


def pack(w, *, table: bool = False) -> PackedWeight:
    """Lay out w [*G, K, N] (or a table [N, K] with table=True) as panels [*G, NB, K, 16]."""
    w = jnp.asarray(w)
    if table:
        w = w.T  # [K, N]
    *G, K, N = w.shape
    NB = -(-N // LANES)
    w = jnp.pad(w, [(0, 0)] * len(G) + [(0, 0), (0, NB * LANES - N)])  # [*G, K, NB*16]
    panels = jnp.moveaxis(w.reshape(*G, K, NB, LANES), -2, -3)  # [*G, NB, K, 16]
    return PackedWeight(pair_rows(panels) if panels.dtype == jnp.bfloat16 else panels, N, table)


def pair_rows(panels):
    """Panels [..., K, 16] with each pair of rows (2i, 2i + 1) interleaved column by column:
    the pair's 32 values in memory are w[2i, 0], w[2i + 1, 0], w[2i, 1], ... (the layout of
    bfloat16 panels; an odd K's last row unchanged). `unpair_rows` undoes it."""
    return _swap_pairs(panels, (2, panels.shape[-1]))


def unpair_rows(panels):
    """`pair_rows` undone: [..., K, 16] with panels[..., k, c] = W[k, c]."""
    return _swap_pairs(panels, (panels.shape[-1], 2))


def _swap_pairs(panels, pair_shape):
    """Each pair of rows viewed as `pair_shape` and transposed (an odd K's last row kept)."""
    *lead, K, C = panels.shape
    even = K - K % 2
    pairs = panels[..., :even, :].reshape(*lead, even // 2, *pair_shape)
    pairs = jnp.swapaxes(pairs, -1, -2).reshape(*lead, even, C)
    return jnp.concatenate([pairs, panels[..., even:, :]], axis=-2) if K % 2 else pairs


def _rows(w: PackedWeight):
    """The panels with panels[..., nb, k, c] = W[..., k, 16 * nb + c], in their dtype."""
    return unpair_rows(w.panels) if w.dtype == jnp.bfloat16 else w.panels


# What decoding may read the declared weights in (`split_for_decode(weight_dtype=...)`):
# None = as stored; "bfloat16" = rounded to bfloat16 (half the bytes a token when packed),
# activations and accumulation staying float32.
WEIGHT_DTYPES = (None, "bfloat16")


def check_weight_dtype(name: str, value) -> str | None:
    """`value` if it is one of WEIGHT_DTYPES, else a ValueError naming `name` and the choices."""
    if value is not None and not (isinstance(value, str) and value in WEIGHT_DTYPES):
        raise ValueError(
            f"{name}={value!r} is not one of {WEIGHT_DTYPES} (None: the weights as stored; "
            "'bfloat16': rounded to bfloat16, activations and accumulation float32)"
        )
    return value


def round_weight(w, dtype: str | None):
    """A declared weight read in `dtype`: a packed weight's panels stored in it (the kernel reads
    bfloat16 panels as such), a plain float32 array rounded to it and kept float32 (XLA's dot
    then computes what the kernel does: the same rounded weights, float32 arithmetic)."""
    if dtype is None:
        return w
    dt = jnp.dtype(dtype)
    if isinstance(w, PackedLayers):
        return PackedLayers(tuple(round_weight(x, dtype) for x in w.layers))
    if isinstance(w, PackedWeight):
        if w.dtype == dt:
            return w
        rows = _rows(w).astype(dt)
        return PackedWeight(pair_rows(rows) if dt == jnp.bfloat16 else rows, w.n, w.table)
    w = jnp.asarray(w)
    if w.dtype != jnp.float32:
        return w  # already narrower (a bfloat16 model): read as stored
    return w.astype(dt).astype(w.dtype)


def unpack(w) -> jax.Array:
    """The standard layout back: [*G, K, N] (the [N, K] table for a packed table; [G, L, K, N]
    for PackedLayers)."""
    if isinstance(w, PackedLayers):
        return jnp.stack([unpack(x) for x in w.layers], axis=1)
    *G, NB, K, _ = w.panels.shape
    full = jnp.moveaxis(_rows(w), -3, -2).reshape(*G, K, NB * LANES)[..., : w.n]  # [*G, K, N]
    return full.T if w.table else full


def _off(env: str) -> bool:
    return os.environ.get(env, "1").strip().lower() in ("0", "false", "off", "no")


def available() -> bool:
    """The kernel is switched on, the backend is the CPU, and the library is built."""
    if _off(ENV):
        return False
    if jax.default_backend() != "cpu":
        return False
    return build.load() is not None


def _kernel(x, w: PackedWeight, march: str = "native"):
    """x [G, T, K] float32 -> [G, T, N] float32 through the FFI custom call; w may hold more
    than G matrices (the kernel reads the first G: no slice of the stack is copied)."""
    G, T, _ = x.shape
    name = build.ffi_name("bfloat16" if w.dtype == jnp.bfloat16 else "float32", march)
    out = jax.ShapeDtypeStruct((G, T, w.n), jnp.float32)
    panels = w.panels.reshape(-1, *w.panels.shape[-3:])
    return jax.ffi.ffi_call(name, out, vmap_method="sequential")(x, panels, **_tiling())


def _xla(x, w: PackedWeight):
    """x [G, T, K] -> [G, T, N] with XLA's dot over the panels as stored (the first G)."""
    G, T, _ = x.shape
    panels = _rows(w).reshape(-1, *w.panels.shape[-3:])[:G]  # [G, NB, K, 16]
    y = jnp.einsum("gtk,gbkc->gtbc", x, panels.astype(x.dtype), preferred_element_type=x.dtype)
    return y.reshape(G, T, -1)[..., : w.n]


def _kernel_takes(rows: int, dtype) -> bool:
    """Whether the matmul kernel takes a product of `rows` activation rows of `dtype`."""
    return rows <= MAX_KERNEL_ROWS and dtype in (jnp.float32, jnp.bfloat16) and available()


def _packed_product(x, w: PackedWeight):
    """x [G, T, K] (any float dtype) -> [G, T, N] in x's dtype."""
    if _kernel_takes(x.shape[1], x.dtype):
        return _kernel(x.astype(jnp.float32), w).astype(x.dtype)
    return _xla(x, w)


def matmul(x, w):
    """x [..., K] @ w -> [..., N]: w is a [K, N] array or an unbatched PackedWeight.

    A packed table ([N, K] tied embedding) gives x @ table.T. Output in x's dtype.
    """
    if not isinstance(w, PackedWeight):
        return x @ w.astype(x.dtype)
    if w.batch_shape:
        raise ValueError(f"matmul takes an unbatched weight; got batch {w.batch_shape}")
    lead = x.shape[:-1]
    y = _packed_product(x.reshape(1, math.prod(lead), x.shape[-1]), w)  # [1, R, N]
    return y.reshape(*lead, w.n)


# Most products one `matmul_many` call takes (the kernel's kMaxMany).
MAX_MANY = 8


def matmul_many(x, ws) -> list:
    """[matmul(x, w) for w in ws], in one kernel call where it can: every w an unbatched
    PackedWeight of one dtype and the kernel taking x (float, few rows, available). The
    products then share one split of their work over the threads (q/k/v, gate/up), which on
    the CPU saves a thread wake-up per product. Otherwise one product each, as `matmul`."""
    ws = list(ws)
    packed = all(isinstance(w, PackedWeight) and not w.batch_shape for w in ws)
    if not packed or len({w.dtype for w in ws}) != 1 or not 1 <= len(ws) <= MAX_MANY:
        return [matmul(x, w) for w in ws]
    lead, K = x.shape[:-1], x.shape[-1]
    R = math.prod(lead)
    if not _kernel_takes(R, x.dtype):
        return [matmul(x, w) for w in ws]
    dtype = "bfloat16" if ws[0].dtype == jnp.bfloat16 else "float32"
    outs = [jax.ShapeDtypeStruct((1, R, w.n), jnp.float32) for w in ws]
    panels = [w.panels.reshape(1, *w.panels.shape[-3:]) for w in ws]
    ys = jax.ffi.ffi_call(build.many_ffi_name(dtype), outs, vmap_method="sequential")(
        x.reshape(1, R, K).astype(jnp.float32), *panels, **_tiling()
    )
    return [y.reshape(*lead, w.n).astype(x.dtype) for y, w in zip(ys, ws, strict=True)]


def per_group_matmul(x, w):
    """x [..., G, K] with w [G, K, N] (array) or a PackedWeight batched over G -> [..., G, N].

    Group g's rows (every leading index) multiply w[g]: Medusa's K heads, each its own weights.
    A PackedWeight may hold more groups than x: x's G groups multiply its first G (the kernel
    reads them in place; Medusa's first n heads).
    """
    if not isinstance(w, PackedWeight):
        return jnp.einsum("...gk,gkn->...gn", x, w.astype(x.dtype))
    G, K = x.shape[-2:]
    if len(w.batch_shape) != 1 or w.batch_shape[0] < G:
        raise ValueError(f"per_group_matmul: x has {G} groups, the weight {w.batch_shape}")
    lead = x.shape[:-2]
    xg = jnp.moveaxis(x.reshape(-1, G, K), 1, 0)  # [G, R, K]
    y = _packed_product(xg, w)  # [G, R, N]
    return jnp.moveaxis(y, 0, 1).reshape(*lead, G, w.n)


# Query rows per block up to which the attention kernel runs (a decode step, a verify block,
# a tree level); longer blocks (a prefill) go to XLA's batched dots, which are ahead there.
MAX_ATTENTION_ROWS = 16


def attention_applies(q, cache_k) -> bool:
    """Whether `cache_attention` takes this block: float32, few rows, the kernel available,
    and not switched off by `SPECJAX_CPU_ATTENTION=0` (A/B runs; the matmul kernel stays)."""
    return (
        q.shape[1] <= MAX_ATTENTION_ROWS
        and not _off(ATTENTION_ENV)
        and q.dtype == jnp.float32
        and cache_k.dtype == jnp.float32
        and available()
    )


def cache_attention(q, cache_k, cache_v, layer: int, mask, scale: float, march: str = "native"):
    """Attention of a block of queries over one layer of the KV cache, through the C++ kernel.

    Each query row reads only the slots its mask shows (`attention.cc`), so invisible slots
    (stale, NaN) never leak, and a row's output does not depend on the block's size.

    Args:
      q: [B, T, N, H] float32. cache_k, cache_v: [L, B, KH, S, H] float32, the whole cache
        (the layer is an attribute: no slice is copied). layer: static layer index.
      mask: [B, T, S] bool, the slots each query sees. scale: the score scale (1/sqrt(H)).
    Returns:
      [B, T, N, H] float32; zero for a row that sees no slot.
    """
    if build.load(march) is None:
        raise RuntimeError("cache_attention: the CPU kernel library is not available")
    out = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    call = jax.ffi.ffi_call(build.attention_ffi_name(march), out, vmap_method="sequential")
    return call(q, cache_k, cache_v, mask, layer=int(layer), scale=np.float32(scale))


def embed_lookup(table, tokens):
    """Rows of an embedding table [V, D] (array or packed table) at tokens [...] -> [..., D].

    A bfloat16 packed table is read by the kernel (`table_rows`), which widens the rows it
    reads to float32: XLA:CPU gathers bfloat16 in float32, converting the whole table first,
    and in a decode loop that conversion is hoisted out of the loop, once a call (SmolLM2's
    tied table: 28M values, a float32 copy of 113 MB and ~15-20 ms). Other tables are gathered
    by XLA. (The kernel clamps tokens to [0, V); no valid token is outside it.)
    """
    if not isinstance(table, PackedWeight):
        return jnp.take(table, tokens, axis=0)
    if not table.table:
        raise ValueError("embed_lookup needs a table packed with table=True")
    if table.dtype == jnp.bfloat16 and available():
        return table_rows(table, jnp.clip(jnp.asarray(tokens), 0, table.n - 1).astype(jnp.int32))
    return gather_rows(table, tokens)


def gather_rows(table: PackedWeight, tokens):
    """A packed table's rows at tokens [...] by XLA's gather from the panels, in their dtype
    (`embed_lookup` without the kernel; on bfloat16 XLA:CPU converts the whole table)."""
    block, lane = tokens // LANES, tokens % LANES
    if table.dtype != jnp.bfloat16:
        return table.panels[block, :, lane]  # [..., D]
    # Paired rows (`pair_rows`): (k, c) sits at row 2 (k // 2) + c // 8, column 2 (c % 8) + k % 2
    # of its panel for k below the last pair, where it is; gathered so, not unpaired (a copy).
    K = table.k
    d = jnp.arange(K)
    paired = d < K - K % 2
    lane, block = lane[..., None], block[..., None]
    row = jnp.where(paired, (d // 2) * 2 + lane // (LANES // 2), d)
    col = jnp.where(paired, (lane % (LANES // 2)) * 2 + d % 2, lane)
    return table.panels[block, row, col]  # [..., D]


def table_rows(table: PackedWeight, tokens, march: str = "native"):
    """A bfloat16 packed table's rows at tokens [...] (in [0, V)) as float32 [..., D]
    (the panels' row pairs interleaved, as `pack` lays bfloat16 out)."""
    if build.load(march) is None:
        raise RuntimeError("table_rows: the CPU kernel library is not available")
    D = table.panels.shape[-2]
    out = jax.ShapeDtypeStruct((*tokens.shape, D), jnp.float32)
    call = jax.ffi.ffi_call(build.table_rows_ffi_name(march), out, vmap_method="sequential")
    return call(table.panels, tokens)


__all__ = [
    "ATTENTION_ENV",
    "ENV",
    "MAX_ATTENTION_ROWS",
    "MAX_KERNEL_ROWS",
    "PackedLayers",
    "PackedWeight",
    "WEIGHT_DTYPES",
    "attention_applies",
    "available",
    "cache_attention",
    "check_weight_dtype",
    "clear_cache",
    "embed_lookup",
    "gather_rows",
    "layer",
    "matmul",
    "pack",
    "pack_layers",
    "pair_rows",
    "per_group_matmul",
    "round_weight",
    "split_for_decode",
    "standard_layout",
    "table_rows",
    "unpack",
    "unpair_rows",
]


from specjax.kernels.layout import clear_cache, split_for_decode, standard_layout  # noqa: E402
