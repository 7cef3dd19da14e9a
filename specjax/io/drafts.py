"""Draft heads on disk: `load_draft(path)` detects the layout, `save_draft(heads, dir, layout)`.

Layouts (Medusa; EAGLE heads join the same two functions):

- ``specjax``: `specjax_draft.json` ({"format", "method", "config"}) + `draft.safetensors`
  holding the module's own arrays. What a head-training workdir exports to `<workdir>/heads`,
  so `load_draft(workdir)` loads a finished run.
- ``vllm``: what vLLM's `speculative_config={"method": "medusa", "model": dir}` loads:
  config.json (`model_type` "medusa", `architectures` ["MedusaModel"], hidden_size,
  vocab_size, num_heads, num_hidden_layers, truncated_vocab_size, medusa_fc_bias) and
  model.safetensors with `blocks.{h}.layers.{l}.{weight,bias}` ([out, in] like torch) and
  `lm_heads.{h}.weight` [V, D]. vLLM drops tensors its config did not announce without a word,
  so `medusa_fc_bias` is written true whenever the blocks have biases.
- ``fasterdecoding``: FasterDecoding/Medusa's config.json (`medusa_num_heads`,
  `medusa_num_layers`, `base_model_name_or_path`) and `medusa_lm_head.safetensors` with
  `{h}.{l}.linear.{weight,bias}` and `{h}.{L}.weight`. The reference builds `[ResBlock] * L`,
  one block shared by all L layers: import ties them, and exporting independent blocks with
  L > 1 to this layout is refused.

Every refusal names the file, tensor or field and both values.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from specjax.heads import HEAD_TYPES, MedusaConfig, MedusaHeads, check_heads_fit
from specjax.io.hf import read_safetensors

LAYOUTS = ("specjax", "vllm", "fasterdecoding")
SPECJAX_CONFIG, SPECJAX_WEIGHTS = "specjax_draft.json", "draft.safetensors"
VLLM_WEIGHTS = "model.safetensors"
FD_WEIGHTS = "medusa_lm_head.safetensors"
HEADS_DIR = "heads"  # where a head-training workdir exports its heads (specjax layout)


# ------------------------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def _tensors(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    tensors = read_safetensors([path])
    for name, array in tensors.items():
        values = np.asarray(array, np.float32) if array.dtype.kind == "V" else array
        if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
            bad = int(values.size - np.count_nonzero(np.isfinite(values)))
            raise ValueError(f"{path}: tensor {name!r} holds {bad} non-finite values (NaN/inf)")
    return {k: np.asarray(v, np.float32) for k, v in tensors.items()}


def _take(tensors: dict, name: str, shape: tuple, where: Path) -> np.ndarray:
    if name not in tensors:
        raise ValueError(f"{where}: tensor {name!r} is missing")
    array = tensors.pop(name)
    if tuple(array.shape) != tuple(shape):
        raise ValueError(
            f"{where}: tensor {name!r} has shape {tuple(array.shape)}, expected {tuple(shape)}"
        )
    return array


def _check_consumed(tensors: dict, where: Path) -> None:
    if tensors:
        raise ValueError(f"{where}: unexpected tensors {sorted(tensors)[:8]}")


def _medusa_from_arrays(config: MedusaConfig, w, b, lm_head) -> MedusaHeads:
    """Heads holding exactly these arrays: w [K, Lb, D, D], b [K, Lb, D] | None, lm_head [K, D, V]."""
    heads = MedusaHeads(config, lm_head=np.zeros((config.hidden_size, config.vocab_size)))
    heads.w.set_value(jnp.asarray(w, config.dtype))
    if b is not None:
        heads.b.set_value(jnp.asarray(b, config.dtype))
    heads.lm_head.set_value(jnp.asarray(lm_head, config.dtype))
    return heads


def medusa_arrays(heads: MedusaHeads) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(w [K, Lb, D, D], b [K, Lb, D] or None, lm_head [K, D, V]) as float32 numpy."""
    get = lambda p: np.asarray(p[...], np.float32)  # noqa: E731
    return get(heads.w), None if heads.b is None else get(heads.b), get(heads.lm_head)


# --------------------------------------------------------------------------------- specjax


def _save_specjax(heads, out: Path) -> None:
    config = heads.config
    meta = {"format": "specjax-draft", "version": 1, "method": config.method,
            "config": dataclasses.asdict(config)}  # fmt: skip
    w, b, lm_head = medusa_arrays(heads)
    tensors = {"w": w, "lm_head": lm_head, **({} if b is None else {"b": b})}
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(out / SPECJAX_WEIGHTS))
    (out / SPECJAX_CONFIG).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _load_specjax(directory: Path):
    meta = _read_json(directory / SPECJAX_CONFIG)
    method = meta.get("method")
    if method not in HEAD_TYPES:
        raise ValueError(
            f"{directory / SPECJAX_CONFIG}: method={method!r} is not one of {sorted(HEAD_TYPES)}"
        )
    try:
        config = MedusaConfig(**meta.get("config", {}))
    except TypeError as e:
        raise ValueError(f"{directory / SPECJAX_CONFIG}: bad config fields ({e})") from e
    where = directory / SPECJAX_WEIGHTS
    tensors = _tensors(where)
    K, Lb, D, V = config.num_heads, config.stored_blocks, config.hidden_size, config.vocab_size
    w = _take(tensors, "w", (K, Lb, D, D), where)
    b = _take(tensors, "b", (K, Lb, D), where) if config.bias else None
    lm_head = _take(tensors, "lm_head", (K, D, V), where)
    _check_consumed(tensors, where)
    return _medusa_from_arrays(config, w, b, lm_head)


# ------------------------------------------------------------------------------------ vLLM


def _save_vllm(heads, out: Path) -> None:
    c = heads.config
    w, b, lm_head = medusa_arrays(heads)
    tensors = {}
    for h in range(c.num_heads):
        for layer in range(c.num_layers):
            blk = 0 if c.shared_blocks else layer
            tensors[f"blocks.{h}.layers.{layer}.weight"] = w[h, blk].T  # [out, in]
            if b is not None:
                tensors[f"blocks.{h}.layers.{layer}.bias"] = b[h, blk]
        tensors[f"lm_heads.{h}.weight"] = lm_head[h].T  # [V, D]
    config = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "truncated_vocab_size": c.vocab_size,
        "medusa_fc_bias": c.bias,
        "torch_dtype": "float32",
    }
    if c.base_model:
        config["base_model_name_or_path"] = c.base_model
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(out / VLLM_WEIGHTS))
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _int_field(config: dict, key: str, where: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where}: field {key!r}={value!r} must be an integer >= 1")
    return value


def _load_vllm(directory: Path):
    where = directory / "config.json"
    config = _read_json(where)
    D, V = _int_field(config, "hidden_size", where), _int_field(config, "vocab_size", where)
    K, L = _int_field(config, "num_heads", where), _int_field(config, "num_hidden_layers", where)
    truncated = config.get("truncated_vocab_size") or V
    if truncated != V:
        raise ValueError(
            f"{where}: truncated_vocab_size={truncated} differs from vocab_size={V}; heads over "
            "a truncated vocabulary are not supported"
        )
    bias = bool(config.get("medusa_fc_bias", False))
    tensors = _tensors(directory / VLLM_WEIGHTS)
    wfile = directory / VLLM_WEIGHTS
    w = np.zeros((K, L, D, D), np.float32)
    b = np.zeros((K, L, D), np.float32) if bias else None
    lm_head = np.zeros((K, D, V), np.float32)
    for h in range(K):
        for layer in range(L):
            w[h, layer] = _take(tensors, f"blocks.{h}.layers.{layer}.weight", (D, D), wfile).T
            if bias:
                b[h, layer] = _take(tensors, f"blocks.{h}.layers.{layer}.bias", (D,), wfile)
        lm_head[h] = _take(tensors, f"lm_heads.{h}.weight", (V, D), wfile).T
    stray_bias = sorted(n for n in tensors if n.endswith(".bias"))
    if stray_bias:
        raise ValueError(
            f"{wfile}: holds block biases ({stray_bias[0]}, ...) but {where} does not set "
            "medusa_fc_bias: true (vLLM would drop them silently and draft differently)"
        )
    _check_consumed(tensors, wfile)
    mc = MedusaConfig(D, V, K, L, bias=bias, base_model=config.get("base_model_name_or_path", ""))
    return _medusa_from_arrays(mc, w, b, lm_head)


# -------------------------------------------------------------------------- FasterDecoding


def _save_fasterdecoding(heads, out: Path) -> None:
    c = heads.config
    if c.num_layers > 1 and not c.shared_blocks:
        raise ValueError(
            f"layout='fasterdecoding' shares one residual block across the {c.num_layers} layers "
            "of a head ([ResBlock] * L), but these heads have independent blocks "
            "(shared_blocks=False): export with layout='vllm' or 'specjax'"
        )
    if not c.bias:
        raise ValueError(
            "layout='fasterdecoding' residual blocks always have a bias; these heads have none "
            "(bias=False): export with layout='vllm' or 'specjax'"
        )
    w, b, lm_head = medusa_arrays(heads)
    tensors = {}
    for h in range(c.num_heads):
        for layer in range(c.num_layers):
            tensors[f"{h}.{layer}.linear.weight"] = w[h, 0].T  # [out, in]
            tensors[f"{h}.{layer}.linear.bias"] = b[h, 0]
        tensors[f"{h}.{c.num_layers}.weight"] = lm_head[h].T  # [V, D]
    config = {
        "medusa_num_heads": c.num_heads,
        "medusa_num_layers": c.num_layers,
        "base_model_name_or_path": c.base_model,
    }
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(out / FD_WEIGHTS))
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _load_fasterdecoding(directory: Path):
    where = directory / "config.json"
    config = _read_json(where)
    K, L = (
        _int_field(config, "medusa_num_heads", where),
        _int_field(config, "medusa_num_layers", where),
    )
    wfile = directory / FD_WEIGHTS
    tensors = _tensors(wfile)
    head0 = f"0.{L}.weight"
    if head0 not in tensors:
        raise ValueError(f"{wfile}: tensor {head0!r} is missing (medusa_num_layers={L})")
    V, D = tensors[head0].shape
    w = np.zeros((K, 1, D, D), np.float32)
    b = np.zeros((K, 1, D), np.float32)
    lm_head = np.zeros((K, D, V), np.float32)
    for h in range(K):
        # One block shared by the L layers; a file may list it once or under every index.
        w[h, 0] = _take(tensors, f"{h}.0.linear.weight", (D, D), wfile).T
        b[h, 0] = _take(tensors, f"{h}.0.linear.bias", (D,), wfile)
        for layer in range(1, L):
            for part, ref in (("weight", w[h, 0].T), ("bias", b[h, 0])):
                name = f"{h}.{layer}.linear.{part}"
                if name in tensors and not np.array_equal(tensors.pop(name), ref):
                    raise ValueError(
                        f"{wfile}: {name!r} differs from {h}.0.linear.{part}, but the "
                        "FasterDecoding layout shares one block across a head's layers"
                    )
        lm_head[h] = _take(tensors, f"{h}.{L}.weight", (V, D), wfile).T
    _check_consumed(tensors, wfile)
    mc = MedusaConfig(D, V, K, L, shared_blocks=True, bias=True,
                      base_model=config.get("base_model_name_or_path") or "")  # fmt: skip
    return _medusa_from_arrays(mc, w, b, lm_head)


# ---------------------------------------------------------------------------------- public

_SAVERS = {"specjax": _save_specjax, "vllm": _save_vllm, "fasterdecoding": _save_fasterdecoding}
_LOADERS = {"specjax": _load_specjax, "vllm": _load_vllm, "fasterdecoding": _load_fasterdecoding}


def detect_layout(directory) -> str:
    """The layout of a heads directory: "specjax", "vllm" or "fasterdecoding".

    Raises:
      FileNotFoundError when the directory holds none of them (naming what was looked for).
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"draft directory {d} does not exist")
    if (d / SPECJAX_CONFIG).is_file():
        return "specjax"
    if (d / "config.json").is_file():
        config = _read_json(d / "config.json")
        if config.get("model_type") == "medusa":
            return "vllm"
        if "medusa_num_heads" in config or (d / FD_WEIGHTS).is_file():
            return "fasterdecoding"
        raise ValueError(
            f"{d / 'config.json'} describes no draft heads (model_type="
            f"{config.get('model_type')!r}); a draft LM loads with sj.load_model"
        )
    raise FileNotFoundError(
        f"no draft heads in {d}: expected {SPECJAX_CONFIG} (specjax), or config.json with "
        f"model_type 'medusa' (vLLM) or medusa_num_heads (FasterDecoding)"
    )


def load_draft(path, *, target=None):
    """Load draft heads from a directory in any supported layout (detected).

    Args:
      path: a heads directory (specjax, vLLM or FasterDecoding layout), or a head-training
        workdir (its exported `heads/`).
      target: optional Model/Decoder; when given, a hidden size or vocabulary that differs
        from the target's is refused here rather than at `generate`.
    Returns:
      The heads module (`specjax.heads.MedusaHeads`), its `config.method` naming the
      speculative method it serves.
    """
    directory = Path(path)
    if (directory / HEADS_DIR).is_dir() and not (directory / "config.json").is_file():
        directory = directory / HEADS_DIR  # a training workdir
    heads = _LOADERS[detect_layout(directory)](directory)
    if target is not None:
        check_heads_fit(heads, target)
    return heads


def save_draft(heads, out_dir, layout: str = "specjax") -> Path:
    """Write draft heads to `out_dir` in `layout` ("specjax", "vllm", "fasterdecoding").

    The vLLM layout loads in vLLM with speculative_config={"method": "medusa", "model":
    out_dir} beside the target written by `sj.save_hf`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    if not isinstance(heads, tuple(HEAD_TYPES.values())):
        raise ValueError(
            f"save_draft needs draft heads (e.g. MedusaHeads), got {type(heads).__name__}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _SAVERS[layout](heads, out)
    return out
