"""Draft heads on disk: `load_draft(path)` detects the layout, `save_draft(heads, dir, layout)`.

Layouts (Medusa; EAGLE heads join the same two functions):

- ``specjax``: `specjax_draft.json` ({"format", "method", "config"}) + `draft.safetensors`
  (the module's own arrays). A head-training workdir exports it to `<workdir>/heads`, so
  `load_draft(workdir)` loads a finished run.
- ``vllm`` (vLLM 0.32 `model_executor/models/medusa.py`, `transformers_utils/configs/medusa.py`):
  config.json (`model_type` "medusa", `architectures` ["MedusaModel"], hidden_size,
  vocab_size, num_heads, num_hidden_layers, truncated_vocab_size, medusa_fc_bias) and
  model.safetensors: `blocks.{h}.layers.{l}.{weight,bias}` (torch's [out, in]; L independent
  `x + SiLU(Linear(x))` blocks) and `lm_heads.{h}.weight` [V, D]. vLLM builds the block
  biases only when `medusa_fc_bias` is true and drops tensors it has no parameter for without
  a word: the export writes `medusa_fc_bias: true` whenever the blocks have biases, the
  import refuses any tensor vLLM would drop. The import reads what vLLM reads: every
  `*.safetensors`, `medusa_heads.` prefixes and FasterDecoding names, config keys holding
  "num" and "heads"/"layers", `original_lm_head` (one LM head for all), `logit_scale`
  (folded into the LM heads). A truncated vocabulary (`token_map`, -inf logits outside it) is
  refused: a linear head cannot express it.
- ``fasterdecoding`` (FasterDecoding/Medusa `medusa/model/medusa_model.py`): config.json
  (`medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`) and
  `medusa_lm_head.safetensors`, the heads' `state_dict()`: `{h}.{l}.linear.{weight,bias}`,
  `{h}.{L}.weight`. `nn.Sequential(*([ResBlock] * L), Linear)` shares one block across the L
  layers and `state_dict()` lists it under every l < L (safetensors' `save_model` keeps l = 0
  only): the import ties them, refusing copies that differ; exporting independent blocks with
  L > 1 is refused; heads without bias export zero biases (ResBlock always has one: the same
  function). "Version 2" heads (train_legacy since 2024-04) have no `{h}.{L}.weight` and use
  the base model's LM head: their import needs `target=`. The export adds hidden_size,
  vocab_size and `medusa_fc_bias: true`, which FasterDecoding ignores and vLLM needs to load
  this directory (else hidden_size 4096 and the biases dropped).

Every refusal names the file, tensor or field and both values.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from specjax.heads import HEAD_TYPES, MedusaConfig, MedusaHeads
from specjax.heads.medusa import target_lm_head
from specjax.io.hf import read_safetensors
from specjax.models import as_model
from specjax.validate import check_int

LAYOUTS = ("specjax", "vllm", "fasterdecoding")
SPECJAX_CONFIG, SPECJAX_WEIGHTS = "specjax_draft.json", "draft.safetensors"
VLLM_WEIGHTS = "model.safetensors"
FD_WEIGHTS = "medusa_lm_head.safetensors"
FD_PICKLE = "medusa_lm_head.pt"
HEADS_DIR = "heads"  # where a head-training workdir exports its heads (specjax layout)
VLLM_ARCH = "MedusaModel"


# ------------------------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds a {type(config).__name__}, expected a JSON object")
    return config


def _tensors(files: list[Path]) -> dict[str, np.ndarray]:
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


def _take(tensors: dict, name: str, shape: tuple, where, why: str = "") -> np.ndarray:
    """Pop tensor `name`, checking its shape. `why` says which config fields ask for it."""
    if name not in tensors:
        raise ValueError(f"{where}: tensor {name!r} is missing{why}")
    array = tensors.pop(name)
    if tuple(array.shape) != tuple(shape):
        raise ValueError(
            f"{where}: tensor {name!r} has shape {tuple(array.shape)}, expected {tuple(shape)}{why}"
        )
    return array


def _check_consumed(tensors: dict, where, why: str) -> None:
    if tensors:
        names = sorted(tensors)
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        raise ValueError(f"{where}: unexpected tensors {names[:8]}{more}{why}")


def _int_field(config: dict, key: str, where: Path) -> int:
    return check_int(f"{where}: field {key!r}", config.get(key), 1)


def _bool_field(config: dict, key: str, where: Path, default: bool) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: field {key!r}={value!r} must be true or false")
    return value


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


def _write(tensors: dict, path: Path) -> None:
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))


def _write_json(config: dict, path: Path) -> None:
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------- specjax


def _save_specjax(heads, out: Path) -> None:
    config = heads.config
    meta = {"format": "specjax-draft", "version": 1, "method": config.method,
            "config": dataclasses.asdict(config)}  # fmt: skip
    w, b, lm_head = medusa_arrays(heads)
    _write({"w": w, "lm_head": lm_head, **({} if b is None else {"b": b})}, out / SPECJAX_WEIGHTS)
    _write_json(meta, out / SPECJAX_CONFIG)


def _load_specjax(directory: Path, target=None):
    where = directory / SPECJAX_CONFIG
    meta = _read_json(where)
    method = meta.get("method")
    if method not in HEAD_TYPES:
        raise ValueError(f"{where}: method={method!r} is not one of {sorted(HEAD_TYPES)}")
    try:
        config = MedusaConfig(**meta.get("config", {}))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: bad config ({e})") from e
    wfile = directory / SPECJAX_WEIGHTS
    tensors = _tensors([wfile])
    K, Lb, D, V = config.num_heads, config.stored_blocks, config.hidden_size, config.vocab_size
    why = f" ({where.name}: num_heads={K}, stored blocks={Lb}, hidden_size={D}, vocab_size={V})"
    w = _take(tensors, "w", (K, Lb, D, D), wfile, why)
    b = _take(tensors, "b", (K, Lb, D), wfile, why) if config.bias else None
    lm_head = _take(tensors, "lm_head", (K, D, V), wfile, why)
    _check_consumed(tensors, wfile, f" ({where.name}: bias={config.bias})")
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
                tensors[f"blocks.{h}.layers.{layer}.bias"] = b[h, blk]  # [D]
        tensors[f"lm_heads.{h}.weight"] = lm_head[h].T  # [V, D]
    config = {
        "model_type": "medusa",
        "architectures": [VLLM_ARCH],
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "truncated_vocab_size": c.vocab_size,
        "medusa_fc_bias": b is not None,  # vLLM drops the biases silently without it
        "torch_dtype": "float32",  # the tensors' dtype; vLLM casts them to the target's
    }
    if c.base_model:
        config["base_model_name_or_path"] = c.base_model
    _write(tensors, out / VLLM_WEIGHTS)
    _write_json(config, out / "config.json")


def _vllm_config(config: dict) -> dict:
    """vLLM's MedusaConfig.from_pretrained renaming: any key holding "num" and "heads" is
    num_heads, any holding "num" and "layers" is num_hidden_layers (so FasterDecoding's
    medusa_num_heads / medusa_num_layers read too)."""
    config = dict(config)
    for key in list(config):
        if "num" in key and "heads" in key:
            config["num_heads"] = config.pop(key)
        elif "num" in key and "layers" in key:
            config["num_hidden_layers"] = config.pop(key)
    return config


def _vllm_name(name: str) -> str:
    """vLLM's tensor renaming (Medusa.load_weights): strip `medusa_heads.`, map the
    FasterDecoding names `{h}.{l}.linear.*` -> blocks.{h}.layers.{l}.*, `{h}.{n}.*` -> lm_heads.{h}.*."""
    name = name.replace("medusa_heads.", "")
    parts = name.split(".")
    if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
        head, layer, rest = parts[0], parts[1], parts[2:]
        if "linear" in rest:
            return f"blocks.{head}.layers.{layer}." + ".".join(rest[rest.index("linear") + 1 :])
        return f"lm_heads.{head}." + ".".join(rest)
    return name


def _vllm_tensors(directory: Path) -> tuple[dict, Path]:
    """Every `*.safetensors` of the directory (as vLLM's loader globs them), renamed as
    Medusa.load_weights renames them; and the path to name in messages."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt"))
        extra = (f"; it holds only PyTorch pickles {pickles}, which specjax never unpickles "
                 "(convert them with safetensors.torch.save_file)") if pickles else ""  # fmt: skip
        raise FileNotFoundError(f"{directory / VLLM_WEIGHTS} is missing (no *.safetensors){extra}")
    where = files[0] if len(files) == 1 else directory
    tensors = {}
    for name, array in _tensors(files).items():
        new = _vllm_name(name)
        if new in tensors:
            raise ValueError(f"{where}: tensor {name!r} and another both read as {new!r}")
        tensors[new] = array
    return tensors, where


def _vllm_sizes(config: dict, tensors: dict, where: Path) -> tuple[int, int, int, int]:
    """(D, V, K, L) from config.json; a missing vocab_size is read off the first LM head
    (vLLM would default it to 32001, then to the target's)."""
    D = _int_field(config, "hidden_size", where)
    K, L = _int_field(config, "num_heads", where), _int_field(config, "num_hidden_layers", where)
    V = config.get("vocab_size")
    first = tensors.get("lm_heads.0.weight", tensors.get("lm_head.weight"))
    if V is None and first is not None and first.ndim == 2:
        V = first.shape[0]
    V = _int_field({"vocab_size": V}, "vocab_size", where)
    truncated = config.get("truncated_vocab_size")
    if truncated is not None and truncated != V:
        raise ValueError(
            f"{where}: truncated_vocab_size={truncated} differs from vocab_size={V}: heads over "
            "a truncated vocabulary (vLLM's token_map, -inf logits outside it) are not supported"
        )
    return D, V, K, L


def _load_vllm(directory: Path, target=None):
    where = directory / "config.json"
    config = _vllm_config(_read_json(where))
    arch = config.get("architectures")
    if arch is not None and arch != [VLLM_ARCH]:
        raise ValueError(
            f"{where}: field 'architectures'={arch!r}, vLLM's Medusa is ['{VLLM_ARCH}']"
        )
    tensors, wfile = _vllm_tensors(directory)
    D, V, K, L = _vllm_sizes(config, tensors, where)
    bias = _bool_field(config, "medusa_fc_bias", where, False)
    original = _bool_field(config, "original_lm_head", where, False)
    scale = config.get("logit_scale", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not np.isfinite(scale):
        raise ValueError(f"{where}: field 'logit_scale'={scale!r} must be a finite number")
    why = (f" ({where.name}: num_heads={K}, num_hidden_layers={L}, hidden_size={D}, "
           f"vocab_size={V}, medusa_fc_bias={bias})")  # fmt: skip
    w = np.zeros((K, L, D, D), np.float32)  # [K, L, D_in, D_out]
    b = np.zeros((K, L, D), np.float32) if bias else None
    for h in range(K):
        for layer in range(L):
            w[h, layer] = _take(tensors, f"blocks.{h}.layers.{layer}.weight", (D, D), wfile, why).T
            if bias:
                b[h, layer] = _take(tensors, f"blocks.{h}.layers.{layer}.bias", (D,), wfile, why)
    if original:  # one LM head for every head: lm_head.weight, else lm_heads.0.weight
        if "lm_head.weight" in tensors and "lm_heads.0.weight" in tensors:
            raise ValueError(f"{wfile}: both 'lm_head.weight' and 'lm_heads.0.weight' with "
                             "original_lm_head: true (vLLM keeps whichever comes last)")  # fmt: skip
        name = "lm_head.weight" if "lm_head.weight" in tensors else "lm_heads.0.weight"
        lm_head = np.broadcast_to(_take(tensors, name, (V, D), wfile, why).T, (K, D, V))
    else:
        lm_head = np.stack([_take(tensors, f"lm_heads.{h}.weight", (V, D), wfile, why).T
                            for h in range(K)])  # fmt: skip  # [K, D, V]
    stray = sorted(n for n in tensors if n.startswith("blocks.") and n.endswith(".bias"))
    if stray and not bias:
        raise ValueError(
            f"{wfile}: holds block biases ({stray[0]}, ...) but {where.name} has "
            f"medusa_fc_bias={config.get('medusa_fc_bias')!r}, not true: vLLM would drop them "
            "without a word and draft differently"
        )
    _check_consumed(tensors, wfile, f"{why}: vLLM would ignore them")
    if scale != 1.0:  # vLLM scales the logits; folded in, equal up to rounding
        lm_head = lm_head * np.float32(scale)
    base = str(config.get("base_model_name_or_path") or "")
    return _medusa_from_arrays(MedusaConfig(D, V, K, L, bias=bias, base_model=base), w, b, lm_head)


# -------------------------------------------------------------------------- FasterDecoding


def _save_fasterdecoding(heads, out: Path) -> None:
    c = heads.config
    if c.num_layers > 1 and not c.shared_blocks:
        raise ValueError(
            f"layout='fasterdecoding' shares one residual block across the num_layers="
            f"{c.num_layers} layers of a head ([ResBlock] * L), but these heads have "
            f"{c.num_layers} independent blocks (shared_blocks=False): export with "
            "layout='vllm' or 'specjax'"
        )
    w, b, lm_head = medusa_arrays(heads)
    if b is None:  # FasterDecoding's ResBlock always has a bias; zero is the same function
        b = np.zeros(w.shape[:-1], np.float32)
    tensors = {}
    for h in range(c.num_heads):
        for layer in range(c.num_layers):  # state_dict() lists the shared block at every index
            tensors[f"{h}.{layer}.linear.weight"] = w[h, 0].T  # [out, in]
            tensors[f"{h}.{layer}.linear.bias"] = b[h, 0]
        tensors[f"{h}.{c.num_layers}.weight"] = lm_head[h].T  # [V, D]
    config = {
        "medusa_num_heads": c.num_heads,
        "medusa_num_layers": c.num_layers,
        "base_model_name_or_path": c.base_model,
        # Not read by FasterDecoding; what vLLM needs to load this directory as it is.
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "medusa_fc_bias": True,
    }
    _write(tensors, out / FD_WEIGHTS)
    _write_json(config, out / "config.json")


def _load_fasterdecoding(directory: Path, target=None):
    where = directory / "config.json"
    config = _read_json(where)
    K = _int_field(config, "medusa_num_heads", where)
    L = _int_field(config, "medusa_num_layers", where)
    wfile = directory / FD_WEIGHTS
    if not wfile.is_file() and (directory / FD_PICKLE).is_file():
        raise FileNotFoundError(
            f"{wfile} is missing; {FD_PICKLE} is a PyTorch pickle, which specjax never "
            "unpickles (convert it: safetensors.torch.save_file({k: v.contiguous().clone() "
            "for k, v in torch.load(path).items()}, ...))"
        )
    tensors = _tensors([wfile])
    block0, head0 = tensors.get("0.0.linear.weight"), tensors.get(f"0.{L}.weight")
    if block0 is None:
        raise ValueError(f"{wfile}: tensor '0.0.linear.weight' is missing")
    D = config.get("hidden_size", block0.shape[-1])
    shared_lm = not any(f"{h}.{L}.weight" in tensors for h in range(K))
    if shared_lm:  # Medusa "version 2": every head projects with the base model's LM head
        if target is None:
            raise ValueError(
                f"{wfile}: no LM-head tensors {{h}}.{L}.weight (medusa_num_layers={L}, "
                f"version={config.get('version')!r}): these heads use the base model's LM "
                "head; pass target= to load_draft"
            )
        _check_fit({"hidden_size": D}, target, where)
        V = as_model(target).config.vocab_size
    else:
        if str(config.get("version")) == "2":
            raise ValueError(
                f"{where}: version='2' heads use the base model's LM head, but {wfile.name} "
                f"holds LM-head tensors ({0}.{L}.weight, ...): which one is meant is ambiguous"
            )
        V = config.get("vocab_size", None if head0 is None else head0.shape[0])
    D = _int_field({"hidden_size": D}, "hidden_size", where)
    V = _int_field({"vocab_size": V}, "vocab_size", where)
    why = f" ({where.name}: medusa_num_heads={K}, medusa_num_layers={L}, hidden_size={D}, vocab_size={V})"
    w = np.zeros((K, 1, D, D), np.float32)  # [K, 1, D_in, D_out]
    b = np.zeros((K, 1, D), np.float32)
    for h in range(K):
        # One block shared by the L layers; a file lists it once or under every index.
        w[h, 0] = _take(tensors, f"{h}.0.linear.weight", (D, D), wfile, why).T
        b[h, 0] = _take(tensors, f"{h}.0.linear.bias", (D,), wfile, why)
        for layer in range(1, L):
            for part, ref in (("weight", w[h, 0].T), ("bias", b[h, 0])):
                name = f"{h}.{layer}.linear.{part}"
                if name in tensors and not np.array_equal(tensors.pop(name), ref):
                    raise ValueError(
                        f"{wfile}: tensor {name!r} differs from {h}.0.linear.{part}, but "
                        f"FasterDecoding's [ResBlock] * {L} shares one block across a head's layers"
                    )
    if not shared_lm:
        lm_head = np.stack([_take(tensors, f"{h}.{L}.weight", (V, D), wfile, why).T
                            for h in range(K)])  # fmt: skip  # [K, D, V]
    else:
        lm_head = np.broadcast_to(
            np.asarray(target_lm_head(as_model(target).module), np.float32), (K, D, V)
        )
    _check_consumed(tensors, wfile, why)
    mc = MedusaConfig(D, V, K, L, shared_blocks=True, bias=True,
                      base_model=str(config.get("base_model_name_or_path") or ""))  # fmt: skip
    return _medusa_from_arrays(mc, w, b, lm_head)


# ---------------------------------------------------------------------------------- public

_SAVERS = {"specjax": _save_specjax, "vllm": _save_vllm, "fasterdecoding": _save_fasterdecoding}
_LOADERS = {"specjax": _load_specjax, "vllm": _load_vllm, "fasterdecoding": _load_fasterdecoding}


def _layout_of(d: Path) -> str | None:
    """The layout of directory `d`, None when it holds no draft heads at all."""
    if (d / SPECJAX_CONFIG).is_file():
        return "specjax"
    if not (d / "config.json").is_file():
        return None
    config = _read_json(d / "config.json")
    if config.get("model_type") == "medusa" or config.get("architectures") == [VLLM_ARCH]:
        return "vllm"
    if "medusa_num_heads" in config or (d / FD_WEIGHTS).is_file() or (d / FD_PICKLE).is_file():
        return "fasterdecoding"
    raise ValueError(
        f"{d / 'config.json'} describes no draft heads (model_type="
        f"{config.get('model_type')!r}); a draft LM loads with sj.load_model"
    )


def detect_layout(directory) -> str:
    """The layout of a heads directory: "specjax", "vllm" or "fasterdecoding".

    Raises:
      FileNotFoundError when the directory holds none of them (naming what was looked for);
      ValueError when its config.json describes something else (a language model).
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"draft directory {d} does not exist")
    layout = _layout_of(d)
    if layout is None:
        raise FileNotFoundError(
            f"no draft heads in {d}: expected {SPECJAX_CONFIG} (specjax), or config.json with "
            f"model_type 'medusa' (vLLM) or medusa_num_heads (FasterDecoding)"
        )
    return layout


def _check_fit(sizes: dict, target, where: Path) -> None:
    """Refuse heads whose hidden_size or vocab_size (`sizes`) differs from `target`'s."""
    tc = as_model(target).config
    for field, value in sizes.items():
        if value != getattr(tc, field):
            raise ValueError(
                f"{where}: draft heads have {field}={value}, the target's is {getattr(tc, field)}"
            )


def load_draft(path, *, target=None):
    """Load draft heads from a directory in any supported layout (detected).

    Args:
      path: a heads directory (specjax, vLLM or FasterDecoding layout), or a head-training
        workdir (its exported `heads/`).
      target: optional Model/Decoder; when given, a hidden size or vocabulary that differs
        from the target's is refused here rather than at `generate`. FasterDecoding's
        version-2 heads (no LM-head tensors: they share the base model's) need it.
    Returns:
      The heads module (`specjax.heads.MedusaHeads`), its `config.method` naming the
      speculative method it serves.
    Raises:
      FileNotFoundError for a missing directory or file; ValueError for a config field, a
      missing, unexpected, misshapen or non-finite tensor, or a mismatch with `target`,
      naming the field or tensor and both values.
    """
    directory = Path(path)
    if directory.is_dir() and _layout_of(directory) is None and (directory / HEADS_DIR).is_dir():
        directory = directory / HEADS_DIR  # a training workdir
    layout = detect_layout(directory)
    heads = _LOADERS[layout](directory, target)
    if target is not None:
        c = heads.config
        _check_fit({"hidden_size": c.hidden_size, "vocab_size": c.vocab_size}, target, directory)
    return heads


def _check_out_dir(out: Path, layout: str) -> None:
    """Refuse to write vLLM/FasterDecoding heads over a model or beside other weights."""
    if layout == "specjax" or not out.is_dir():
        return
    if (out / "config.json").is_file():
        config = _read_json(out / "config.json")
        if config.get("model_type") not in (None, "medusa") and "medusa_num_heads" not in config:
            raise ValueError(
                f"{out / 'config.json'} describes a model (model_type="
                f"{config.get('model_type')!r}); layout={layout!r} would overwrite it: "
                "choose an empty directory"
            )
    ours = VLLM_WEIGHTS if layout == "vllm" else FD_WEIGHTS
    others = sorted(p.name for p in out.glob("*.safetensors") if p.name != ours)
    if others:
        raise ValueError(
            f"{out} already holds {others}; vLLM loads every *.safetensors of a draft "
            f"directory, so layout={layout!r} needs one without them"
        )


def save_draft(heads, out_dir, layout: str = "specjax") -> Path:
    """Write draft heads to `out_dir` in `layout` ("specjax", "vllm", "fasterdecoding").

    The vLLM layout loads in vLLM with speculative_config={"method": "medusa", "model":
    out_dir} beside the target written by `sj.save_hf`. `base_model_name_or_path` is
    written from `heads.config.base_model` when set.

    Raises:
      ValueError for an unknown layout, something that is not draft heads, non-finite
      parameters, independent blocks with num_layers > 1 to "fasterdecoding", or a
      directory holding a model or other weights (vllm / fasterdecoding).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    if not isinstance(heads, tuple(HEAD_TYPES.values())):
        raise ValueError(
            f"save_draft needs draft heads (e.g. MedusaHeads), got {type(heads).__name__}"
        )
    for name, array in zip(("w", "b", "lm_head"), medusa_arrays(heads), strict=True):
        if array is not None and not np.all(np.isfinite(array)):
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise ValueError(f"heads parameter {name!r} holds {bad} non-finite values (NaN/inf)")
    out = Path(out_dir)
    _check_out_dir(out, layout)
    out.mkdir(parents=True, exist_ok=True)
    _SAVERS[layout](heads, out)
    return out
