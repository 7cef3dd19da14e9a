"""What every draft layout shares: JSON and safetensors reading and writing, checked tensor
and field reads. Whether a draft fits its target is `specjax.heads.check_heads_fit`'s to say.

A layout's saver builds the files it writes as `{file name: tensors or JSON object}`
(`Files`); `save_draft` checks them and `write_files` writes them. Every refusal names the
file, tensor or field and both values.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from specjax.io.hf import read_safetensors
from specjax.validate import check_int

SPECJAX_CONFIG, SPECJAX_WEIGHTS = "specjax_draft.json", "draft.safetensors"
VLLM_WEIGHTS = "model.safetensors"
HF_CONFIG = "config.json"

Files = dict[str, dict]  # file name -> its tensors (*.safetensors) or its JSON object


# ----------------------------------------------------------------------------------- read


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a {type(config).__name__}, expected a JSON object")
    return config


def hf_config(directory: Path) -> dict | None:
    """The directory's config.json, None when it has none."""
    path = directory / HF_CONFIG
    return read_json(path) if path.is_file() else None


def read_tensors(files: list[Path]) -> dict[str, np.ndarray]:
    """Every tensor of `files`, floats as float32; refuses NaN/inf naming the tensor."""
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing")
    out = {}
    for name, array in read_safetensors(files).items():
        values = np.asarray(array, np.float32) if array.dtype.kind == "V" else np.asarray(array)
        if np.issubdtype(values.dtype, np.floating):
            bad = int(values.size - np.count_nonzero(np.isfinite(values)))
            if bad:
                raise ValueError(
                    f"{', '.join(map(str, files))}: tensor {name!r} holds {bad} non-finite "
                    f"values (NaN/inf) of {values.size}"
                )
            values = values.astype(np.float32)
        out[name] = values
    return out


def read_safetensors_dir(directory: Path) -> tuple[dict[str, np.ndarray], Path]:
    """Every `*.safetensors` of `directory` (as vLLM's loader globs them) and the path to name
    in messages; a directory of PyTorch pickles only is refused, saying how to convert them."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
        extra = (f"; it holds only PyTorch pickles {pickles}, which specjax never unpickles: "
                 "convert them first, e.g. safetensors.torch.save_file({k: v.contiguous() for "
                 "k, v in torch.load(path).items()}, 'model.safetensors')") if pickles else ""  # fmt: skip
        raise FileNotFoundError(f"{directory / VLLM_WEIGHTS} is missing (no *.safetensors){extra}")
    return read_tensors(files), (files[0] if len(files) == 1 else directory)


def safetensors_names(directory: Path) -> set[str]:
    """Tensor names of every *.safetensors in `directory` (headers only)."""
    names = set()
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="numpy") as f:
                names.update(f.keys())
        except Exception:  # an unreadable file is refused by the loader, naming it
            continue
    return names


def take(tensors: dict, name: str, shape: tuple, where, why: str = "") -> np.ndarray:
    """Pop tensor `name`, checking its shape. `why` says which config fields ask for it."""
    if name not in tensors:
        raise ValueError(f"{where}: tensor {name!r} is missing{why}")
    array = tensors.pop(name)
    if tuple(array.shape) != tuple(shape):
        raise ValueError(
            f"{where}: tensor {name!r} has shape {tuple(array.shape)}, expected {tuple(shape)}{why}"
        )
    return array


def check_consumed(tensors: dict, where, why: str) -> None:
    """Refuse the tensors no one took (`take`), naming the first eight."""
    if tensors:
        names = sorted(tensors)
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        raise ValueError(f"{where}: unexpected tensors {names[:8]}{more}{why}")


def int_field(config: dict, key: str, where: Path) -> int:
    return check_int(f"{where}: field {key!r}", config.get(key), 1)


def bool_field(config: dict, key: str, where: Path, default: bool) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: field {key!r}={value!r} must be true or false")
    return value


# ---------------------------------------------------------------------------------- write


def config_json(config) -> dict:
    """dataclasses.asdict, JSON-ready (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def specjax_files(config, arrays: dict[str, np.ndarray]) -> Files:
    """The specjax layout: the module's own arrays and {"format", "method", "config"}."""
    meta = {"format": "specjax-draft", "version": 1, "method": config.method,
            "config": config_json(config)}  # fmt: skip
    return {SPECJAX_WEIGHTS: arrays, SPECJAX_CONFIG: meta}


def write_files(files: Files, out: Path) -> None:
    """Write `files` into the directory `out`: tensors as safetensors, the rest as JSON."""
    for name, content in files.items():
        if name.endswith(".safetensors"):
            arrays = {k: np.ascontiguousarray(v) for k, v in content.items()}
            save_file(arrays, str(out / name))
        else:
            (out / name).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
