"""EAGLE heads (EagleHead, `method` "eagle" or "eagle3") as arrays, and the specjax layout.

An EagleHead's arrays go by their NNX path ("fc.kernel", "mlp.gate_proj.kernel", "d2t", ...);
checkpoints name them as vLLM's loaders do: `fc`, `<layer>self_attn.{q,k,v,o}_proj`,
`<layer>mlp.*`, `<layer>{post_attention_layernorm,input_layernorm,hidden_norm}`, `norm`,
`lm_head`, `d2t`, `t2d`, where <layer> is `layers.0.` (EAGLE-1; speculators' EAGLE-3) or
`midlayer.` (the reference's and vLLM's EAGLE-3 name; vLLM maps it to layers.0.). Kernels are
NNX's [in, out]; checkpoints hold torch's [out, in]. `eagle_hf` reads and writes those.

``specjax`` layout: `specjax_draft.json` ({"format", "method", "config"}, the EagleConfig with
its layer's ModelConfig nested) + `draft.safetensors`, the module's own arrays by NNX path
(`fc.kernel` [in, out], `d2t`, `t2d`, ...).
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.heads import check_heads_fit
from specjax.heads.eagle import EagleConfig, EagleHead
from specjax.io.drafts.common import (
    SPECJAX_CONFIG,
    SPECJAX_WEIGHTS,
    Files,
    check_consumed,
    read_tensors,
    specjax_files,
    take,
)
from specjax.models.config import ModelConfig


def variables_by_path(head) -> dict[str, nnx.Variable]:
    """The head's variables by dotted NNX path ("fc.kernel", "d2t", ...)."""
    return {".".join(map(str, p)): v for p, v in nnx.to_flat_state(nnx.state(head))}


def eagle_arrays(head: EagleHead) -> dict[str, np.ndarray]:
    """Every array of an EagleHead by dotted NNX path: floats as float32, d2t int, t2d bool."""
    out = {}
    for name, var in variables_by_path(head).items():
        value = np.asarray(var.get_value())
        out[name] = value.astype(np.float32) if jnp.issubdtype(value.dtype, jnp.floating) else value
    return out


def _abstract_head(config: EagleConfig) -> EagleHead:
    return nnx.eval_shape(lambda: EagleHead(config, nnx.Rngs(0)))  # no random init


def from_arrays(
    config: EagleConfig, arrays: dict[str, np.ndarray], target, where: Path, embedding=None
) -> EagleHead:
    """A head holding exactly `arrays` (every NNX path present, shapes already checked);
    refused first unless it fits `target` (`embedding`: the checkpoint's own table)."""
    check_heads_fit(config, target, where, embedding)
    head = _abstract_head(config)
    for name, var in variables_by_path(head).items():
        var.set_value(jnp.asarray(arrays[name], var.get_value().dtype))
    return head


def eagle_shapes(config: EagleConfig) -> dict[str, tuple[tuple, np.dtype]]:
    """(shape, dtype) of every array of a head with `config`, by NNX path."""
    head = _abstract_head(config)
    return {
        n: (tuple(v.get_value().shape), v.get_value().dtype)
        for n, v in variables_by_path(head).items()
    }


def checkpoint_names(config: EagleConfig, layer: str) -> list[tuple[str, str, bool]]:
    """(NNX path, checkpoint name, transposed) of every float tensor; `layer` the layer prefix."""
    rows = [("fc.kernel", "fc.weight", True)]
    if config.fc_bias:
        rows.append(("fc.bias", "fc.bias", False))
    for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
        rows.append((f"{p}.kernel", f"{layer}self_attn.{p}.weight", True))
        if config.layer.attention_bias:
            rows.append((f"{p}.bias", f"{layer}self_attn.{p}.bias", False))
    for p in ("gate_proj", "up_proj", "down_proj"):
        rows.append((f"mlp.{p}.kernel", f"{layer}mlp.{p}.weight", True))
    norms = ["post_attention_layernorm"]
    if config.method == "eagle3":
        norms += ["input_layernorm", "hidden_norm"]
    rows += [(f"{n}.weight", f"{layer}{n}.weight", False) for n in norms]
    if config.method == "eagle3":
        rows += [("norm.weight", "norm.weight", False), ("lm_head.kernel", "lm_head.weight", True)]
    return rows


def check_d2t(d2t, t2d, V: int, wfile: Path) -> tuple[np.ndarray, np.ndarray]:
    """d2t [Vd] int, t2d [V] bool or None (rebuilt from d2t): distinct target ids in range,
    t2d marking exactly them."""
    if d2t.dtype.kind not in "iu":
        raise ValueError(f"{wfile}: tensor 'd2t' has dtype {d2t.dtype}, expected an integer type")
    if d2t.shape[0] == V and np.any(d2t):
        raise ValueError(
            f"{wfile}: tensor 'd2t' is not all zeros, but draft_vocab_size = vocab_size = {V}: "
            "vLLM (no draft_id_to_target_id then) and specjax's drafter read draft id i as "
            "target id i"
        )
    ids = np.arange(d2t.shape[0]) + d2t.astype(np.int64)  # target id of each draft id
    if ids.min(initial=0) < 0 or ids.max(initial=0) >= V or len(np.unique(ids)) != len(ids):
        raise ValueError(
            f"{wfile}: tensor 'd2t' maps draft ids to target ids outside [0, {V}) or to one "
            "target id twice (target id = i + d2t[i])"
        )
    mask = np.zeros(V, bool)
    mask[ids] = True
    if t2d is not None:
        if t2d.dtype != np.bool_:
            raise ValueError(f"{wfile}: tensor 't2d' has dtype {t2d.dtype}, expected bool")
        if not np.array_equal(t2d, mask):
            raise ValueError(
                f"{wfile}: tensor 't2d' marks {int(t2d.sum())} target ids, not the "
                f"{len(ids)} that d2t maps to (t2d[i + d2t[i]] must be the only true entries)"
            )
    return d2t.astype(np.int32), mask


# --------------------------------------------------------------------------------- specjax


def specjax_layout(head: EagleHead) -> Files:
    return specjax_files(head.config, eagle_arrays(head))


def _config_from_json(d: dict, where: Path) -> EagleConfig:
    """EagleConfig from `config_json`'s dict (the specjax layout), refusing bad fields by name."""
    try:
        d = dict(d)
        layer = dict(d.pop("layer"))
        if layer.get("rope_scaling") is not None:
            layer["rope_scaling"] = tuple(tuple(kv) for kv in layer["rope_scaling"])
        layer["eos_token_ids"] = tuple(layer.get("eos_token_ids") or ())
        return EagleConfig(layer=ModelConfig(**layer), **{**d, "tap_layers": tuple(d.get("tap_layers", ()))})  # fmt: skip
    except (TypeError, ValueError, KeyError, NotImplementedError) as e:
        raise ValueError(f"{where}: bad EAGLE config ({type(e).__name__}: {e})") from e


def load_specjax(directory: Path, meta: dict, target=None) -> EagleHead:
    where = directory / SPECJAX_CONFIG
    config = _config_from_json(meta.get("config") or {}, where)
    if config.method != meta.get("method"):
        raise ValueError(
            f"{where}: method={meta.get('method')!r} but config.method={config.method!r}"
        )
    wfile = directory / SPECJAX_WEIGHTS
    tensors = read_tensors([wfile])
    c = config
    why = (f" ({where.name}: method={c.method!r}, hidden_size={c.hidden_size}, vocab_size="
           f"{c.vocab_size}, draft_vocab_size={c.draft_vocab_size}, fc input {c.fc_in}, "
           f"fc_bias={c.fc_bias}, attention_bias={c.layer.attention_bias})")  # fmt: skip
    arrays = {}
    for name, (shape, dtype) in eagle_shapes(config).items():
        array = take(tensors, name, shape, wfile, why)
        kind = "f" if jnp.issubdtype(dtype, jnp.floating) else np.dtype(dtype).kind
        if kind != array.dtype.kind and not (kind in "iu" and array.dtype.kind in "iu"):
            raise ValueError(
                f"{wfile}: tensor {name!r} has dtype {array.dtype}, expected {np.dtype(dtype)}"
            )
        arrays[name] = array
    if config.method == "eagle3":
        arrays["d2t"], arrays["t2d"] = check_d2t(arrays["d2t"], arrays["t2d"], c.vocab_size, wfile)
    check_consumed(tensors, wfile, why)
    return from_arrays(config, arrays, target, directory)
