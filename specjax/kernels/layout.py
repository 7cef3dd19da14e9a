"""Weights laid out once for decoding: `split_for_decode` is `nnx.split` with packed weights.

A module in the graph declares which of its weights the kernel reads with a
`packed_params()` method: {path relative to the module: packer}. `Dense` declares its
kernel, a tied `Decoder` its embedding table, `MedusaHeads` its stacked blocks and heads.
The split (packed or not) is cached per module while the module's structure stays equal and
its arrays the same objects (a training step or a reload makes new ones, and the next call
splits and packs again), so repeated `generate` calls pack once and skip the graph walk. The
cache keeps the arrays it was made from until the module is dropped or the next call
replaces the entry. The module itself keeps the standard layout: training, `save_hf`,
`save_draft` and checkpoints never see a panel.

Resident memory: the cache holds one packed copy of every packed weight (the standard copy
stays with the module), about the model's weight bytes again (half of them with
`weight_dtype="bfloat16"`), plus padding of N up to a multiple of 16 columns;
`SPECJAX_CPU_KERNEL=0` holds none unless a `weight_dtype` asks for rounded weights.

`weight_dtype="bfloat16"` reads the declared weights rounded to bfloat16: packed, the panels
are stored in it and the kernel reads half the bytes a token (activations and accumulation
stay float32); unpacked (XLA's dot: the kernel off, a mesh), the same rounded values are kept
as float32, so both paths compute the same products. Norms, biases and an untied embedding
table keep their dtype.
"""

from __future__ import annotations

import threading
import weakref

import jax
from flax import nnx

from specjax import kernels

# (id(module), packed, weight_dtype) -> (weakref, treedef, leaves, graphdef, laid-out state)
_CACHE: dict[tuple, tuple] = {}
_LOCK = threading.Lock()


def packed_paths(module) -> dict[tuple, object]:
    """{state path: packer} for every weight that a module in `module`'s graph declares."""
    out = {}
    for path, node in nnx.iter_graph(module):
        declare = getattr(node, "packed_params", None)
        if isinstance(node, nnx.Module) and callable(declare):
            for rel, packer in declare().items():
                out[(*path, *rel)] = packer
    return out


def lay_out(module, state, weight_dtype: str | None = None, *, pack: bool = True):
    """`state` (of `nnx.split(module)`) with every declared weight packed (`pack`) and read in
    `weight_dtype` (`kernels.round_weight`)."""
    targets = packed_paths(module)
    flat = []
    for path, var in nnx.to_flat_state(state):
        if path in targets:
            value = targets[path](var[...]) if pack else var[...]
            var = var.replace(kernels.round_weight(value, weight_dtype))
        flat.append((path, var))
    return nnx.from_flat_state(flat)


def split_for_decode(module, *, pack: bool | None = None, weight_dtype: str | None = None):
    """(graphdef, state) like `nnx.split(module)`, weights packed when the kernel is available.

    pack: None = when `kernels.available()`; False = the standard layout (a mesh that shards
      the weights, an A/B run).
    weight_dtype: None = the weights as stored; "bfloat16" = the declared weights rounded to
      it (`kernels.WEIGHT_DTYPES`; see the module docstring).

    A repeated call on an unchanged module returns the cached pair without walking the graph:
    the module's pytree structure (its node types and static attributes, as
    `jax.tree.flatten` sees them) must be equal and its arrays the same objects. That check
    costs about a tenth of `nnx.split` (SmolLM2's 30 layers: about 10 ms), which every
    `generate` call paid once per module before any device work.
    """
    kernels.check_weight_dtype("weight_dtype", weight_dtype)
    packing = kernels.available() if pack is None else bool(pack)
    leaves, treedef = jax.tree.flatten(module)
    key = (id(module), packing, weight_dtype)
    with _LOCK:
        hit = _CACHE.get(key)
        # The same arrays and the same structure: a static attribute changed in place (the
        # arrays untouched) makes another treedef, and another graphdef, whose program must
        # not be the cached one's.
        if hit is not None and hit[0]() is module and hit[1] == treedef and _same(hit[2], leaves):
            return hit[3], hit[4]
    graphdef, state = nnx.split(module)
    if (packing or weight_dtype is not None) and packed_paths(module):
        state = jax.block_until_ready(lay_out(module, state, weight_dtype, pack=packing))
    with _LOCK:
        _CACHE[key] = (
            weakref.ref(module, lambda _: _CACHE.pop(key, None)),
            treedef,
            leaves,
            graphdef,
            state,
        )
    return graphdef, state


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def standard_layout(state):
    """`state` with every packed weight back in the standard layout (for a mesh)."""
    is_packed = lambda x: isinstance(x, kernels.PackedWeight | kernels.PackedLayers)
    if not isinstance(state, nnx.State):  # () for autoregressive decoding: nothing to unpack
        return state
    flat = []
    for path, var in nnx.to_flat_state(state):
        value = var[...] if isinstance(var, nnx.Variable) else var
        if is_packed(value):
            var = var.replace(kernels.unpack(value))
        flat.append((path, var))
    return nnx.from_flat_state(flat)


def clear_cache() -> None:
    """Drop every cached packed state (tests; freeing memory)."""
    with _LOCK:
        _CACHE.clear()
