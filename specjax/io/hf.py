"""Hugging Face checkpoint import/export: config.json + safetensors (+ tokenizer.json).

`load_model(dir)` reads a transformers directory (single `model.safetensors` or a sharded
`model.safetensors.index.json`), matches tensor names strictly (a diff of missing/unexpected
names on mismatch), refuses non-finite weights naming the tensor, and never unpickles a `.bin`.
`save_hf(model, dir)` writes a directory that `transformers.AutoModelForCausalLM` loads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import save_file

from specjax import parallel
from specjax.io import gguf_file
from specjax.io.tokenizer import Tokenizer
from specjax.models import (
    Decoder,
    Model,
    as_model,
    config_from_hf,
    config_to_hf,
    export_state,
    hf_param_names,
)

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


# ----------------------------------------------------------------------------------- reading


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def _weight_files(directory: Path) -> list[Path]:
    if (directory / SINGLE).is_file():
        return [directory / SINGLE]
    if (directory / INDEX).is_file():
        index = _read_json(directory / INDEX)
        files = sorted(set(index.get("weight_map", {}).values()))
        if not files:
            raise ValueError(f"{directory / INDEX} has an empty weight_map")
        for name in files:
            if not (directory / name).is_file():
                raise FileNotFoundError(f"shard {name} listed in {directory / INDEX} is missing")
        return [directory / name for name in files]
    pickles = sorted(p.name for p in directory.glob("*.bin")) + sorted(
        p.name for p in directory.glob("*.pt*")
    )
    if pickles:
        raise ValueError(
            f"{directory} holds only PyTorch pickle weights ({', '.join(pickles)}); specjax never "
            "unpickles. Convert them to safetensors first (e.g. transformers' save_pretrained "
            "with safe_serialization=True)."
        )
    raise FileNotFoundError(f"no weights in {directory}: expected {SINGLE} or {INDEX}")


def read_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
    """All tensors of `files` as numpy arrays (bf16 kept as ml_dtypes.bfloat16)."""
    tensors: dict[str, np.ndarray] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="numpy") as f:
                for name in f.keys():
                    tensors[name] = f.get_tensor(name)
        except Exception as e:  # safetensors raises its own error types for truncation/corruption
            if isinstance(e, (FileNotFoundError, ValueError)) and "safetensors" in str(e).lower():
                raise
            raise ValueError(f"cannot read safetensors file {path}: {e}") from e
    return tensors


def _check_finite(name: str, array: np.ndarray) -> None:
    values = array.astype(np.float32) if array.dtype == ml_dtypes.bfloat16 else array
    if np.issubdtype(values.dtype, np.floating) and not np.all(np.isfinite(values)):
        bad = int(np.size(values) - np.count_nonzero(np.isfinite(values)))
        raise ValueError(
            f"tensor {name!r} holds {bad} non-finite values (NaN/inf); refusing to load"
        )


def load_state(module: Decoder, tensors: dict[str, np.ndarray], layout=None) -> None:
    """Copy HF-named tensors into `module` in place; strict names, shapes and finiteness.

    With a `specjax.parallel.Layout`, each tensor goes straight onto its sharding (every device
    receives only its slice; no device ever holds the whole model first)."""
    config = module.config
    names = hf_param_names(config)
    # Tied checkpoints sometimes still ship lm_head.weight; it must equal the embedding.
    extra = dict(tensors)
    if config.tie_word_embeddings:
        extra.pop("lm_head.weight", None)
    missing = sorted(set(names) - set(extra))
    unexpected = sorted(set(extra) - set(names))
    if missing or unexpected:
        raise ValueError(
            "checkpoint tensor names do not match the model:\n"
            + "".join(f"  - missing: {n}\n" for n in missing[:20])
            + "".join(f"  + unexpected: {n}\n" for n in unexpected[:20])
            + (
                f"  ({len(missing)} missing, {len(unexpected)} unexpected in all)"
                if len(missing) + len(unexpected) > 40
                else ""
            )
        )
    state = nnx.state(module, nnx.Param)
    flat = dict(nnx.to_flat_state(state))
    dtype = jnp.dtype(config.dtype)
    for name, (path, transpose) in names.items():
        array = tensors[name]
        _check_finite(name, array)
        if transpose:
            array = array.T
        target = flat[path]
        if tuple(array.shape) != tuple(target.shape):
            raise ValueError(
                f"tensor {name!r} has shape {tuple(array.shape)}, the model expects {tuple(target.shape)}"
            )
        host = (
            array.astype(np.float32)
            if array.dtype == ml_dtypes.bfloat16 and dtype != jnp.bfloat16
            else array
        )
        if layout is None:
            target.set_value(jnp.asarray(host, dtype))
        else:
            logical = parallel.param_logical_axes(path, host.ndim)
            label = f"parameter {'.'.join(map(str, path))}"
            sharding = layout.sharding(logical, host.shape, label, config.head_dim)
            target.set_value(parallel.place(np.asarray(host, dtype), sharding))
    nnx.update(module, state)


def load_model(path, *, dtype: str | None = None, load_tokenizer: bool = True, mesh=None) -> Model:
    """Load a transformers checkpoint directory, a GGUF file, or a specjax training workdir.

    Args:
      path: directory with config.json, model.safetensors (or a sharded index) and
        tokenizer.json; a `.gguf` file (or a directory holding one and no config.json), whose
        weights are dequantized to `dtype` (`specjax.io.gguf_file`); or a specjax workdir (its
        latest exported `hf/` directory is used).
      dtype: parameter dtype ("float32", "bfloat16"); default float32.
      load_tokenizer: read the tokenizer (required when True).
      mesh: a ("data", "model") `jax.sharding.Mesh`: the weights are placed sharded by
        `specjax.parallel`'s rules as they load (None: the default device).
    """
    layout = parallel.layout_of(mesh)
    directory = Path(path)
    if not directory.exists():
        raise FileNotFoundError(f"model path {directory} does not exist")
    gguf_path = gguf_file.find_gguf(directory)
    if gguf_path is not None:
        return _load_gguf(gguf_path, dtype, load_tokenizer, layout)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"{directory} is not a directory or a .gguf file (a transformers checkpoint "
            "directory, a GGUF file or a specjax workdir)"
        )
    if not (directory / "config.json").is_file() and (directory / "hf" / "config.json").is_file():
        directory = directory / "hf"  # a specjax workdir: its exported HF model
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"config.json is missing in {directory}")
    config = config_from_hf(_read_json(directory / "config.json"))
    config = dataclasses.replace(config, dtype=dtype or "float32")
    files = _weight_files(directory)
    tokenizer = None
    if load_tokenizer:
        if not (directory / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"tokenizer.json is missing in {directory} (pass load_tokenizer=False to skip it)"
            )
        tokenizer = Tokenizer.from_dir(directory)
        if not config.eos_token_ids and tokenizer.eos_token_ids:
            config = dataclasses.replace(config, eos_token_ids=tuple(tokenizer.eos_token_ids))
    module = nnx.eval_shape(lambda: Decoder(config, nnx.Rngs(0)))
    load_state(module, read_safetensors(files), layout)
    return Model(module, tokenizer, str(directory))


def _load_gguf(path: Path, dtype, load_tokenizer: bool, layout) -> Model:
    contents = gguf_file.read_gguf(path, load_tokenizer=load_tokenizer)
    config = dataclasses.replace(config_from_hf(contents.config), dtype=dtype or "float32")
    tokenizer = contents.tokenizer
    if load_tokenizer and tokenizer is None:
        raise ValueError(
            f"GGUF file {path} carries no tokenizer (tokenizer.ggml.*); pass load_tokenizer=False"
        )
    if tokenizer is not None and not config.eos_token_ids and tokenizer.eos_token_ids:
        config = dataclasses.replace(config, eos_token_ids=tuple(tokenizer.eos_token_ids))
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"GGUF file {path}: the tokenizer has {tokenizer.vocab_size} tokens, the model's "
            f"embedding {config.vocab_size} rows"
        )
    module = nnx.eval_shape(lambda: Decoder(config, nnx.Rngs(0)))
    load_state(module, contents.tensors, layout)
    return Model(module, tokenizer, str(path))


# ----------------------------------------------------------------------------------- writing


def save_hf(model, out_dir) -> Path:
    """Write config.json, model.safetensors and (if present) the tokenizer, in HF layout."""
    model = as_model(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = config_to_hf(model.config)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    save_file(export_state(model.module), str(out / SINGLE), metadata={"format": "pt"})
    gen = {"bos_token_id": config.get("bos_token_id"), "eos_token_id": config.get("eos_token_id")}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    if model.tokenizer is not None:
        model.tokenizer.save(out)
    return out
