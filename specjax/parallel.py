"""Device meshes: logical axis rules, placement of parameters and batches, host gathering.

JAX is the distributed engine: a `jax.sharding.Mesh` with axes ("data", "model") inside a
host, `jax.distributed` across hosts, and XLA's sharding propagation inside every jit. This
module only says *where* arrays live; no collective is written by hand.

Logical axes. Every parameter of the decoders and the draft heads is named by the logical axes
of its dimensions (`param_logical_axes`, rules keyed by the module names, the legend of
`specjax/models/axes.py` in words), and `RULES` maps logical axes to mesh axes in this one
place:

    batch     -> data     rows of a generate call or a training batch
    heads     -> model    query heads (the N*H side of q_proj / o_proj): tensor parallelism
    kv_heads  -> model    key/value heads (k_proj, v_proj, the KV cache's K axis)
    mlp       -> model    the MLP's hidden axis F
    vocab     -> model    the embedding table's and the LM head's vocabulary axis
    embed     -> None     the residual axis D (-> data under FSDP: `fsdp=True`)

Where an axis does not divide. `kv_heads` and `vocab` replicate when the model axis does not
divide them (4 KV heads on a model axis of 8: every model shard keeps all 4 heads, as serving
engines do; a vocabulary of 50257 is kept whole); `heads` and `mlp` must divide, or the layout
is refused by name (tensor parallelism that cannot split the heads would only replicate).
The batch bucket of a generate call is padded to a multiple of the data axis (the padding rows
are inactive), and a training batch must divide by it.

One device. With `mesh=None` nothing here runs; a mesh of one device places every array on
that device and compiles the same program (tests check the compile count and the tokens).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.lax import with_sharding_constraint
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "model")

# logical axis -> mesh axis (None: replicated). The one place where the mapping lives.
RULES: Mapping[str, str | None] = {
    "batch": "data",
    "heads": "model",
    "kv_heads": "model",
    "mlp": "model",
    "vocab": "model",
    "embed": None,
}
FSDP_RULES: Mapping[str, str | None] = {**RULES, "embed": "data"}
# Logical axes that replicate where their mesh axis does not divide them; the others refuse.
REPLICATE_IF_UNEVEN = ("kv_heads", "vocab", "embed", "batch")

# Parameter rules by module name: (parent module, leaf) -> logical axes of the leaf's dims.
# nnx.Linear kernels are [in, out], biases [out]; embeddings [V, D]. Names not listed (norms,
# Medusa's residual blocks, EAGLE's fc) are replicated.
_LINEAR = {
    "q_proj": ("embed", "heads"),
    "k_proj": ("embed", "kv_heads"),
    "v_proj": ("embed", "kv_heads"),
    "o_proj": ("heads", "embed"),
    "gate_proj": ("embed", "mlp"),
    "up_proj": ("embed", "mlp"),
    "down_proj": ("mlp", "embed"),
    "c_attn": ("embed", "heads"),  # GPT-2: fused q, k, v (all N heads)
    "attn.c_proj": ("heads", "embed"),
    "mlp.c_fc": ("embed", "mlp"),
    "mlp.c_proj": ("mlp", "embed"),
    "lm_head": ("embed", "vocab"),
}
_EMBED = {"embed_tokens": ("vocab", "embed"), "wte": ("vocab", "embed"), "wpe": (None, "embed")}


def make_mesh(data: int = 1, model: int = 1, devices=None) -> Mesh:
    """A ("data", "model") mesh of data * model devices (the first ones, or `devices`).

    Raises:
      ValueError naming the sizes when they are not positive or more devices are asked for
      than exist.
    """
    for name, n in (("data", data), ("model", model)):
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ValueError(f"mesh axis {name!r} must be a positive int, got {n!r}")
    devices = list(jax.devices() if devices is None else devices)
    if data * model > len(devices):
        raise ValueError(
            f"a mesh of data={data} x model={model} needs {data * model} devices, "
            f"{len(devices)} exist ({jax.default_backend()})"
        )
    grid = np.asarray(devices[: data * model], dtype=object).reshape(data, model)
    return Mesh(grid, MESH_AXES)


def check_mesh(mesh) -> Mesh:
    """The mesh to run on, if its axes are named ("data", "model"); TypeError/ValueError
    otherwise.

    Any axis types are accepted: a mesh from `jax.make_mesh`, whose axes are `Explicit` by
    default, comes back as the same devices and names with `Auto` axes, which is what
    specjax's rules (NamedShardings that the compiler propagates) are written for; under
    `Explicit` axes every gather inside the jitted loop would need an `out_sharding`.
    """
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh (or None), got {type(mesh).__name__}")
    if tuple(mesh.axis_names) != MESH_AXES:
        raise ValueError(
            f"mesh axes must be named {MESH_AXES}, got {tuple(mesh.axis_names)}; "
            f"build one with specjax.parallel.make_mesh(data, model)"
        )
    axis_type = getattr(jax.sharding, "AxisType", None)
    types = getattr(mesh, "axis_types", None)
    if axis_type is not None and types is not None and any(t != axis_type.Auto for t in types):
        mesh = Mesh(mesh.devices, mesh.axis_names, axis_types=(axis_type.Auto,) * len(types))
    return mesh


@dataclasses.dataclass(frozen=True)
class Layout:
    """A mesh and its rules: hashable, so it can ride in a jit's static arguments."""

    mesh: Mesh
    fsdp: bool = False

    @property
    def data(self) -> int:
        return self.mesh.shape["data"]

    @property
    def model(self) -> int:
        return self.mesh.shape["model"]

    @property
    def rules(self) -> Mapping[str, str | None]:
        return FSDP_RULES if self.fsdp else RULES

    def spec(
        self, logical: tuple, shape: tuple, what: str = "array", head_dim: int | None = None
    ) -> P:
        """PartitionSpec of an array of `shape` whose dims carry `logical` axes.

        `head_dim`: a `heads` / `kv_heads` dim of size N*H (a fused projection) divides by
        whole heads, never inside one: 4 KV heads of 8 dims do not split over 8 devices.
        """
        out = []
        for name, size in zip(logical, shape, strict=True):
            axis = None if name is None else self.rules.get(name)
            if axis is None or self.mesh.shape[axis] == 1:
                out.append(None)
                continue
            n = self.mesh.shape[axis]
            units, unit_name = size, "size"
            if name in ("heads", "kv_heads") and head_dim and size % head_dim == 0:
                units, unit_name = size // head_dim, f"{head_dim}-dim heads, count"
            if units % n == 0:
                out.append(axis)
            elif name in REPLICATE_IF_UNEVEN:
                out.append(None)
            else:
                raise ValueError(
                    f"{what}: its {name!r} axis ({unit_name} {units}) does not divide over the "
                    f"mesh's {axis!r} axis of {n} devices; choose a {axis} axis that divides "
                    f"{units}"
                )
        return P(*out)

    def sharding(
        self, logical: tuple, shape: tuple, what: str = "array", head_dim: int | None = None
    ) -> NamedSharding:
        return NamedSharding(self.mesh, self.spec(logical, shape, what, head_dim))

    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, P())

    def batch_bucket(self, rows: int) -> int:
        """`rows` rounded up to a multiple of the data axis (padding rows are inactive)."""
        return -(-rows // self.data) * self.data


def layout_of(mesh, fsdp: bool = False) -> Layout | None:
    return None if mesh is None else Layout(check_mesh(mesh), fsdp)


# ------------------------------------------------------------------------- parameter rules


def _names(path) -> tuple:
    """Module names of a pytree path (DictKey / GetAttrKey / SequenceKey), `value` dropped."""
    out = []
    for k in path:
        name = getattr(k, "key", getattr(k, "name", getattr(k, "idx", None)))
        if name == "value" and k is path[-1]:
            continue
        out.append(name)
    return tuple(out)


def param_logical_axes(names: tuple, ndim: int) -> tuple:
    """The logical axes of the parameter at module path `names` (e.g. ('layers', 0,
    'self_attn', 'q_proj', 'kernel')); all None (replicated) for names without a rule.

    Leading stacked axes (Medusa's [K, ...] per-head stacks) are replicated.
    """
    leaf = names[-1] if names else None
    parent = names[-2] if len(names) >= 2 else None
    grand = names[-3] if len(names) >= 3 else None
    axes = None
    if leaf == "embedding" and parent in _EMBED:
        axes = _EMBED[parent]
    elif leaf in ("kernel", "bias") and isinstance(parent, str):
        rule = _LINEAR.get(f"{grand}.{parent}", _LINEAR.get(parent))
        if rule is not None:
            axes = rule if leaf == "kernel" else rule[1:]
    elif leaf == "lm_head" and ndim in (2, 3):  # Medusa heads: [K, D, V], or shared [D, V]
        axes = ("embed", "vocab")
    if axes is None:
        return (None,) * ndim
    if len(axes) > ndim:
        return (None,) * ndim
    return (None,) * (ndim - len(axes)) + tuple(axes)


def tree_shardings(tree, layout: Layout, what: str = "parameters", head_dim: int | None = None):
    """NamedShardings for every array leaf of a parameter tree (nnx.State, or tuples of them).

    `head_dim`: the model's head dimension, so fused head projections split by whole heads."""

    def one(path, x):
        if not hasattr(x, "shape") or np.ndim(x) == 0:
            return layout.replicated()
        names = _names(path)
        logical = param_logical_axes(names, np.ndim(x))
        label = f"{what} {'.'.join(str(n) for n in names)}"
        return layout.sharding(logical, np.shape(x), label, head_dim)

    return jax.tree_util.tree_map_with_path(one, tree)


def place(x, sharding: NamedSharding):
    """Put a host or device array onto `sharding`; works with several processes (each reads
    only the slices its devices hold, from the same global value)."""
    if isinstance(x, jax.Array) and (
        x.sharding == sharding or x.sharding.is_equivalent_to(sharding, x.ndim)
    ):
        return x  # already there (on a one-device mesh: any array on that device)
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        # Already a global array: let jit reshard it.
        return jax.jit(lambda a: a, out_shardings=sharding)(x)
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        # Key arrays have no numpy form: place their raw data (trailing axes replicated).
        raw = jax.random.key_data(x)
        spec = tuple(sharding.spec) + (None,) * (raw.ndim - len(sharding.spec))
        raw = place(raw, NamedSharding(sharding.mesh, P(*spec)))
        return jax.random.wrap_key_data(raw, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def place_tree(tree, shardings):
    return jax.tree.map(place, tree, shardings)


def shard_params(
    tree, layout: Layout | None, what: str = "parameters", head_dim: int | None = None
):
    """A parameter tree placed by the rules (unchanged when `layout` is None)."""
    if layout is None:
        return tree
    return place_tree(tree, tree_shardings(tree, layout, what, head_dim))


def batch_sharding(layout: Layout, ndim: int) -> NamedSharding:
    """Leading axis over `data`, the rest replicated."""
    return NamedSharding(layout.mesh, P("data", *([None] * (ndim - 1))))


def shard_batch(tree, layout: Layout | None):
    """Every array leaf of `tree` with its leading (batch) axis over `data`."""
    if layout is None:
        return tree
    return jax.tree.map(lambda x: place(x, batch_sharding(layout, np.ndim(x))), tree)


def process_local_batch(local, layout: Layout):
    """A global batch from each process's own rows (`jax.make_array_from_process_local_data`):
    the global batch is the processes' rows stacked in process order."""
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(
            batch_sharding(layout, np.ndim(x)), np.asarray(x)
        ),
        local,
    )


def constrain_batch(tree, layout: Layout | None, batch: int):
    """Inside a jit: every array whose leading axis is the batch rows sits over `data`; the
    KV caches' [L, B, K, S, H] buffers also put K over `model` (where it divides)."""
    if layout is None:
        return tree

    def one(x):
        if not hasattr(x, "ndim"):
            return x
        if x.ndim == 5 and x.shape[1] == batch:  # a KV buffer [L, B, K, S, H]
            spec = layout.spec((None, "batch", "kv_heads", None, None), x.shape, "KV cache")
        elif x.ndim >= 1 and x.shape[0] == batch and batch % layout.data == 0:
            spec = P("data", *([None] * (x.ndim - 1)))
        else:
            return x
        return with_sharding_constraint(x, NamedSharding(layout.mesh, spec))

    return jax.tree.map(one, tree)


# ------------------------------------------------------------------------------- the host


def barrier(name: str) -> None:
    """Wait here for every process (nothing with one process). Files under a shared workdir
    are written by process 0 and read by all: every process reads them after a barrier that
    follows the write. `name` must be the same string on every process."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def to_host(x) -> np.ndarray:
    """A numpy copy of a (possibly multi-process) array: gathered first where this process
    does not hold all of it."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids=None,
) -> bool:
    """`jax.distributed.initialize` from explicit values or the environment.

    With no arguments, JAX detects TPU pods, SLURM and Open MPI itself; the variables
    JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID are read here for any other
    cluster. Returns False (and does nothing) when there is nothing to join: no arguments, no
    variables and no detected cluster environment.
    """
    env = os.environ
    coordinator_address = coordinator_address or env.get("JAX_COORDINATOR_ADDRESS")
    if num_processes is None and env.get("JAX_NUM_PROCESSES"):
        num_processes = int(env["JAX_NUM_PROCESSES"])
    if process_id is None and env.get("JAX_PROCESS_ID"):
        process_id = int(env["JAX_PROCESS_ID"])
    detected = any(
        k in env for k in ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES", "OMPI_MCA_orte_hnp_uri")
    )
    if coordinator_address is None and not detected:
        return False
    if jax.config.jax_cpu_collectives_implementation in (None, "none"):
        # CPU collectives across processes (tests, CPU clusters); the option concerns the CPU
        # backend only. Not decided by jax.default_backend(): that starts the backend, and
        # jax.distributed.initialize must come before it.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
    )
    return True


def describe(tree, layout: Layout) -> dict[str, str]:
    """{parameter path: its PartitionSpec} (for logs and the README's table)."""
    out = {}
    flat = jax.tree_util.tree_flatten_with_path(tree_shardings(tree, layout))[0]
    for path, sh in flat:
        out[".".join(str(n) for n in _names(path))] = str(sh.spec)
    return out


def num_shards(x) -> int:
    """How many distinct pieces `x` is cut into across its devices."""
    spec = x.sharding.spec if isinstance(x.sharding, NamedSharding) else P()
    mesh = x.sharding.mesh if isinstance(x.sharding, NamedSharding) else None
    return math.prod(mesh.shape[a] for a in spec if a is not None) if mesh is not None else 1


__all__ = [
    "MESH_AXES",
    "RULES",
    "Layout",
    "batch_sharding",
    "check_mesh",
    "constrain_batch",
    "describe",
    "initialize_distributed",
    "layout_of",
    "make_mesh",
    "param_logical_axes",
    "place",
    "process_local_batch",
    "shard_batch",
    "shard_params",
    "to_host",
    "tree_shardings",
]
