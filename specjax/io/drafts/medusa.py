"""Medusa heads (MedusaHeads) on disk: the specjax, vLLM and FasterDecoding layouts.

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
  (folded into the LM heads). A truncated vocabulary: `truncated_vocab_size` Vd < vocab_size
  with a `token_map` tensor [Vd] (the target id of each draft id; -inf logits outside it) and
  one LM head of Vd rows (vLLM also takes V rows and keeps those at token_map; so does the
  import). vLLM builds it only with `original_lm_head: true`: its per-head LM heads always
  have V rows, and its loader asserts a checkpoint's rows equal V after cutting them to the
  map, so per-head LM heads over a draft vocabulary are refused both ways. vLLM 0.32 loads a
  truncated head only with `model_loader_extra_config={"enable_weights_track": False}`: its
  `Medusa.load_weights` reads `token_map` without reporting it loaded, so the default strict
  check refuses it ("weights were not initialized from checkpoint: {'token_map'}"); no layout
  avoids that, the map being read under that name only (experiments/vllm_medusa_check.py).
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
  this directory (else hidden_size 4096 and the biases dropped). FasterDecoding has no draft
  vocabulary: truncated heads export as ``vllm`` or ``specjax``.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specjax.heads import MedusaConfig, MedusaHeads, check_heads_fit
from specjax.heads.medusa import check_token_map, target_lm_head
from specjax.io.drafts.common import (
    HF_CONFIG,
    SPECJAX_CONFIG,
    SPECJAX_WEIGHTS,
    VLLM_WEIGHTS,
    Files,
    bool_field,
    check_consumed,
    int_field,
    read_json,
    read_safetensors_dir,
    read_tensors,
    specjax_files,
    take,
)
from specjax.models import as_model

VLLM_ARCH = "MedusaModel"
FD_WEIGHTS = "medusa_lm_head.safetensors"
FD_PICKLE = "medusa_lm_head.pt"


def medusa_arrays(heads: MedusaHeads) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(w [K, Lb, D, D], b [K, Lb, D] or None, lm_head [K, D, Vd]) as float32 numpy; a shared
    LM head comes back as a read-only [K, D, Vd] view of its one [D, Vd] copy."""
    get = lambda p: np.asarray(p[...], np.float32)  # noqa: E731
    lm_head = get(heads.lm_head)
    if heads.config.shared_lm_head:
        lm_head = np.broadcast_to(lm_head, (heads.config.num_heads, *lm_head.shape))
    return get(heads.w), None if heads.b is None else get(heads.b), lm_head


def medusa_dict(heads: MedusaHeads) -> dict[str, np.ndarray]:
    """The heads' arrays by name: w, b (when biased), lm_head [K, D, Vd] and, for a draft
    vocabulary, token_map [Vd] int64."""
    w, b, lm_head = medusa_arrays(heads)
    arrays = {"w": w, "lm_head": lm_head, **({} if b is None else {"b": b})}
    if heads.config.truncated:
        arrays["token_map"] = np.asarray(heads.token_map[...], np.int64)
    return arrays


def _from_arrays(
    config: MedusaConfig, w, b, lm_head, target, where: Path, token_map=None
) -> MedusaHeads:
    """Heads holding exactly these arrays: w [K, Lb, D, D], b [K, Lb, D] | None, lm_head
    [K, D, Vd] ([D, Vd] with `config.shared_lm_head`), token_map [Vd] for a draft vocabulary;
    refused first unless they fit `target`."""
    check_heads_fit(config, target, where)
    if config.truncated:
        try:
            token_map = check_token_map(token_map, config)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
    zeros = np.zeros((config.hidden_size, config.draft_vocab_size))
    heads = MedusaHeads(config, lm_head=zeros, token_map=token_map)
    heads.w.set_value(jnp.asarray(w, config.dtype))
    if b is not None:
        heads.b.set_value(jnp.asarray(b, config.dtype))
    heads.lm_head.set_value(jnp.asarray(lm_head, config.dtype))
    return heads


def is_vllm_medusa(config: dict | None) -> bool:
    """Whether a config.json (None: none) describes vLLM's Medusa."""
    return config is not None and (
        config.get("model_type") == "medusa" or config.get("architectures") == [VLLM_ARCH]
    )


# --------------------------------------------------------------------------------- specjax


def specjax_layout(heads: MedusaHeads) -> Files:
    arrays = medusa_dict(heads)
    if heads.config.shared_lm_head:
        arrays["lm_head"] = arrays["lm_head"][0]  # [D, V]: written once
    return specjax_files(heads.config, arrays)


def load_specjax(directory: Path, meta: dict, target=None) -> MedusaHeads:
    where = directory / SPECJAX_CONFIG
    try:
        config = MedusaConfig(**meta.get("config", {}))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: bad config ({e})") from e
    wfile = directory / SPECJAX_WEIGHTS
    tensors = read_tensors([wfile])
    K, Lb, D = config.num_heads, config.stored_blocks, config.hidden_size
    V = config.draft_vocab_size
    why = (f" ({where.name}: num_heads={K}, stored blocks={Lb}, hidden_size={D}, "
           f"draft_vocab_size={V}, shared_lm_head={config.shared_lm_head})")  # fmt: skip
    w = take(tensors, "w", (K, Lb, D, D), wfile, why)
    b = take(tensors, "b", (K, Lb, D), wfile, why) if config.bias else None
    lm_shape = (D, V) if config.shared_lm_head else (K, D, V)
    lm_head = take(tensors, "lm_head", lm_shape, wfile, why)
    token_map = take(tensors, "token_map", (V,), wfile, why) if config.truncated else None
    check_consumed(tensors, wfile, f" ({where.name}: bias={config.bias})")
    return _from_arrays(config, w, b, lm_head, target, directory, token_map)


# ------------------------------------------------------------------------------------ vLLM


def vllm_layout(heads: MedusaHeads) -> Files:
    c = heads.config
    if c.truncated and not c.shared_lm_head:
        raise ValueError(
            f"layout='vllm': these heads draft from {c.draft_vocab_size} of {c.vocab_size} ids "
            "with one LM head each, but vLLM builds per-head LM heads over the whole vocabulary "
            "and refuses a token_map's rows there; a draft vocabulary loads in vLLM with one "
            "shared LM head (shared_lm_head=True, its original_lm_head)"
        )
    w, b, lm_head = medusa_arrays(heads)
    tensors = {}
    for h in range(c.num_heads):
        for layer in range(c.num_layers):
            blk = 0 if c.shared_blocks else layer
            tensors[f"blocks.{h}.layers.{layer}.weight"] = w[h, blk].T  # [out, in]
            if b is not None:
                tensors[f"blocks.{h}.layers.{layer}.bias"] = b[h, blk]  # [D]
        if not c.shared_lm_head:
            tensors[f"lm_heads.{h}.weight"] = lm_head[h].T  # [V, D]
    if c.shared_lm_head:
        tensors["lm_head.weight"] = lm_head[0].T  # [Vd, D], read by every head
    if c.truncated:
        tensors["token_map"] = np.asarray(heads.token_map[...], np.int64)  # [Vd] target ids
    config = {
        "model_type": "medusa",
        "architectures": [VLLM_ARCH],
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "truncated_vocab_size": c.draft_vocab_size,
        "medusa_fc_bias": b is not None,  # vLLM drops the biases silently without it
        "original_lm_head": c.shared_lm_head,
        "torch_dtype": "float32",  # the tensors' dtype; vLLM casts them to the target's
    }
    if c.base_model:
        config["base_model_name_or_path"] = c.base_model
    return {VLLM_WEIGHTS: tensors, HF_CONFIG: config}


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
    """Every `*.safetensors` of the directory, renamed as Medusa.load_weights renames them;
    and the path to name in messages."""
    read, where = read_safetensors_dir(directory)
    tensors = {}
    for name, array in read.items():
        new = _vllm_name(name)
        if new in tensors:
            raise ValueError(f"{where}: tensor {name!r} and another both read as {new!r}")
        tensors[new] = array
    return tensors, where


def _vllm_sizes(config: dict, tensors: dict, where: Path) -> tuple[int, int, int, int, int]:
    """(D, V, Vd, K, L) from config.json; a missing vocab_size is read off the first LM head
    (vLLM would default it to 32001, then to the target's); Vd is truncated_vocab_size (V when
    absent)."""
    D = int_field(config, "hidden_size", where)
    K, L = int_field(config, "num_heads", where), int_field(config, "num_hidden_layers", where)
    V = config.get("vocab_size")
    first = tensors.get("lm_heads.0.weight", tensors.get("lm_head.weight"))
    if V is None and first is not None and first.ndim == 2 and "token_map" not in tensors:
        V = first.shape[0]
    V = int_field({"vocab_size": V}, "vocab_size", where)
    Vd = config.get("truncated_vocab_size")
    Vd = V if Vd is None else int_field({"truncated_vocab_size": Vd}, "truncated_vocab_size", where)
    if Vd > V:
        raise ValueError(f"{where}: truncated_vocab_size={Vd} exceeds vocab_size={V}")
    if Vd < V and "token_map" not in tensors:
        raise ValueError(
            f"{where}: truncated_vocab_size={Vd} < vocab_size={V} needs a 'token_map' tensor "
            "(the target id of each draft id), and the weights hold none"
        )
    if Vd == V and "token_map" in tensors:
        raise ValueError(
            f"{where}: a 'token_map' tensor but truncated_vocab_size={Vd} equals vocab_size: "
            "vLLM would ignore the map"
        )
    return D, V, Vd, K, L


def _vllm_lm_head(tensors: dict, original: bool, K: int, V: int, D: int, wfile, why, token_map):
    """[D, Vd] shared by every head (`original_lm_head`), else [K, D, Vd]. With a token map, a
    head of V rows is cut to the map's rows, as vLLM's load_weights does."""

    def take_head(name):
        if token_map is not None and tuple(getattr(tensors.get(name), "shape", ())) == (V, D):
            tensors[name] = tensors[name][np.asarray(token_map)]
        rows = V if token_map is None else len(token_map)
        return take(tensors, name, (rows, D), wfile, why).T  # [D, Vd]

    if not original:
        return np.stack([take_head(f"lm_heads.{h}.weight") for h in range(K)])  # [K, D, Vd]
    # One LM head for every head: lm_head.weight, else lm_heads.0.weight.
    if "lm_head.weight" in tensors and "lm_heads.0.weight" in tensors:
        raise ValueError(f"{wfile}: both 'lm_head.weight' and 'lm_heads.0.weight' with "
                         "original_lm_head: true (vLLM keeps whichever comes last)")  # fmt: skip
    name = "lm_head.weight" if "lm_head.weight" in tensors else "lm_heads.0.weight"
    return take_head(name)  # [D, Vd]


def load_vllm(directory: Path, target=None) -> MedusaHeads:
    where = directory / HF_CONFIG
    config = _vllm_config(read_json(where))
    arch = config.get("architectures")
    if arch is not None and arch != [VLLM_ARCH]:
        raise ValueError(
            f"{where}: field 'architectures'={arch!r}, vLLM's Medusa is ['{VLLM_ARCH}']"
        )
    tensors, wfile = _vllm_tensors(directory)
    D, V, Vd, K, L = _vllm_sizes(config, tensors, where)
    original = bool_field(config, "original_lm_head", where, False)
    token_map = None
    if Vd < V and not original:
        raise ValueError(
            f"{where}: truncated_vocab_size={Vd} < vocab_size={V} without original_lm_head: "
            "true; vLLM builds per-head LM heads over the whole vocabulary and its loader "
            "refuses the map's rows there"
        )
    if Vd < V:
        token_map = take(tensors, "token_map", (Vd,), wfile, f" (truncated_vocab_size={Vd})")
    bias = bool_field(config, "medusa_fc_bias", where, False)
    scale = config.get("logit_scale", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not np.isfinite(scale):
        raise ValueError(f"{where}: field 'logit_scale'={scale!r} must be a finite number")
    why = (f" ({where.name}: num_heads={K}, num_hidden_layers={L}, hidden_size={D}, "
           f"vocab_size={V}, medusa_fc_bias={bias})")  # fmt: skip
    w = np.zeros((K, L, D, D), np.float32)  # [K, L, D_in, D_out]
    b = np.zeros((K, L, D), np.float32) if bias else None
    for h in range(K):
        for layer in range(L):
            w[h, layer] = take(tensors, f"blocks.{h}.layers.{layer}.weight", (D, D), wfile, why).T
            if bias:
                b[h, layer] = take(tensors, f"blocks.{h}.layers.{layer}.bias", (D,), wfile, why)
    lm_head = _vllm_lm_head(tensors, original, K, V, D, wfile, why, token_map)
    stray = sorted(n for n in tensors if n.startswith("blocks.") and n.endswith(".bias"))
    if stray and not bias:
        raise ValueError(
            f"{wfile}: holds block biases ({stray[0]}, ...) but {where.name} has "
            f"medusa_fc_bias={config.get('medusa_fc_bias')!r}, not true: vLLM would drop them "
            "without a word and draft differently"
        )
    check_consumed(tensors, wfile, f"{why}: vLLM would ignore them")
    if scale != 1.0:  # vLLM scales the logits; folded in, equal up to rounding
        lm_head = lm_head * np.float32(scale)
    base = str(config.get("base_model_name_or_path") or "")
    mc = MedusaConfig(D, V, K, L, bias=bias, shared_lm_head=original, base_model=base,
                      draft_vocab_size=Vd)  # fmt: skip
    return _from_arrays(mc, w, b, lm_head, target, directory, token_map)


# -------------------------------------------------------------------------- FasterDecoding


def is_fasterdecoding(directory: Path, config: dict | None) -> bool:
    """Whether `directory` (its config.json `config`, None: none) holds FasterDecoding's heads."""
    return config is not None and (
        "medusa_num_heads" in config
        or (directory / FD_WEIGHTS).is_file()
        or (directory / FD_PICKLE).is_file()
    )


def fasterdecoding_layout(heads: MedusaHeads) -> Files:
    c = heads.config
    if c.truncated:
        raise ValueError(
            f"layout='fasterdecoding' has no draft vocabulary, but these heads draft from "
            f"{c.draft_vocab_size} of {c.vocab_size} ids (draft_vocab_size): export with "
            "layout='vllm' (truncated_vocab_size, token_map) or 'specjax'"
        )
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
    return {FD_WEIGHTS: tensors, HF_CONFIG: config}


def _fd_tensors(directory: Path) -> tuple[dict, Path]:
    wfile = directory / FD_WEIGHTS
    if not wfile.is_file() and (directory / FD_PICKLE).is_file():
        raise FileNotFoundError(
            f"{wfile} is missing; {FD_PICKLE} is a PyTorch pickle, which specjax never "
            "unpickles (convert it: safetensors.torch.save_file({k: v.contiguous().clone() "
            "for k, v in torch.load(path).items()}, ...))"
        )
    return read_tensors([wfile]), wfile


def _fd_sizes(config: dict, tensors: dict, L: int, K: int, target, where, wfile):
    """(D, V, shared LM head): from config.json, else the tensors; the vocabulary of
    "version 2" heads (no LM-head tensors: the base model's) from `target`."""
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
        V = as_model(target).config.vocab_size
    else:
        if str(config.get("version")) == "2":
            raise ValueError(
                f"{where}: version='2' heads use the base model's LM head, but {wfile.name} "
                f"holds LM-head tensors ({0}.{L}.weight, ...): which one is meant is ambiguous"
            )
        V = config.get("vocab_size", None if head0 is None else head0.shape[0])
    D = int_field({"hidden_size": D}, "hidden_size", where)
    V = int_field({"vocab_size": V}, "vocab_size", where)
    return D, V, shared_lm


def load_fasterdecoding(directory: Path, target=None) -> MedusaHeads:
    where = directory / HF_CONFIG
    config = read_json(where)
    K = int_field(config, "medusa_num_heads", where)
    L = int_field(config, "medusa_num_layers", where)
    tensors, wfile = _fd_tensors(directory)
    D, V, shared_lm = _fd_sizes(config, tensors, L, K, target, where, wfile)
    why = f" ({where.name}: medusa_num_heads={K}, medusa_num_layers={L}, hidden_size={D}, vocab_size={V})"
    w = np.zeros((K, 1, D, D), np.float32)  # [K, 1, D_in, D_out]
    b = np.zeros((K, 1, D), np.float32)
    for h in range(K):
        # One block shared by the L layers; a file lists it once or under every index.
        w[h, 0] = take(tensors, f"{h}.0.linear.weight", (D, D), wfile, why).T
        b[h, 0] = take(tensors, f"{h}.0.linear.bias", (D,), wfile, why)
        for layer in range(1, L):
            for part, ref in (("weight", w[h, 0].T), ("bias", b[h, 0])):
                name = f"{h}.{layer}.linear.{part}"
                if name in tensors and not np.array_equal(tensors.pop(name), ref):
                    raise ValueError(
                        f"{wfile}: tensor {name!r} differs from {h}.0.linear.{part}, but "
                        f"FasterDecoding's [ResBlock] * {L} shares one block across a head's layers"
                    )
    if not shared_lm:
        lm_head = np.stack([take(tensors, f"{h}.{L}.weight", (V, D), wfile, why).T
                            for h in range(K)])  # fmt: skip  # [K, D, V]
    else:
        lm_head = np.asarray(target_lm_head(as_model(target).module), np.float32)  # [D, V]
    check_consumed(tensors, wfile, why)
    mc = MedusaConfig(D, V, K, L, shared_blocks=True, bias=True, shared_lm_head=shared_lm,
                      base_model=str(config.get("base_model_name_or_path") or ""))  # fmt: skip
    return _from_arrays(mc, w, b, lm_head, target, directory)
