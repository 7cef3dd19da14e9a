"""Weights laid out once for decoding: `split_for_decode` is `nnx.split` with packed weights.

A module in the graph declares which of its weights the kernel reads with a
`packed_params()` method: {path relative to the module: packer}. `Dense` declares its
kernel, a tied `Decoder` its embedding table, `MedusaHeads` its stacked blocks and heads.
The packed state is cached per module while the module's arrays stay the same objects (a
training step or a reload makes new ones, and the next call packs again), so repeated
`generate` calls pack once. The module itself keeps the standard layout: training, `save_hf`,
`save_draft` and checkpoints never see a panel.

Resident memory: the cache holds one packed copy of every packed weight (the standard copy
stays with the module), about the model's weight bytes again, plus padding of N up to a
multiple of 16 columns; `SPECJAX_CPU_KERNEL=0` holds none.
"""

from __future__ import annotations

import threading
import weakref

import jax
from flax import nnx

from specjax import kernels

_CACHE: dict[int, tuple] = {}  # id(module) -> (weakref, leaves, graphdef, packed state)
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


def lay_out(module, state):
    """`state` (of `nnx.split(module)`) with every declared weight packed."""
    targets = packed_paths(module)
    flat = []
    for path, var in nnx.to_flat_state(state):
        if path in targets:
            var = var.replace(targets[path](var[...]))
        flat.append((path, var))
    return nnx.from_flat_state(flat)


def split_for_decode(module, *, pack: bool | None = None):
    """(graphdef, state) like `nnx.split(module)`, weights packed when the kernel is available.

    pack: None = when `kernels.available()`; False = the standard layout (a mesh that shards
    the weights, an A/B run).
    """
    graphdef, state = nnx.split(module)
    if not (kernels.available() if pack is None else pack):
        return graphdef, state
    leaves = jax.tree.leaves(state)
    key = id(module)
    with _LOCK:  # a hit first: walking the graph for declared weights costs milliseconds
        hit = _CACHE.get(key)
        if hit is not None and hit[0]() is module and _same(hit[1], leaves):
            return hit[2], hit[3]
    if not packed_paths(module):
        return graphdef, state
    packed = jax.block_until_ready(lay_out(module, state))
    with _LOCK:
        _CACHE[key] = (
            weakref.ref(module, lambda _: _CACHE.pop(key, None)),
            leaves,
            graphdef,
            packed,
        )
    return graphdef, packed


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
