"""Draft heads on disk: `load_draft(path)` detects the layout, `save_draft(heads, dir, layout)`.

Medusa layouts (MedusaHeads):

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

EAGLE layouts (EagleHead, `method` "eagle" or "eagle3"; checked against vLLM 0.32's
`model_executor/models/llama_eagle.py`, `llama_eagle3.py`, `transformers_utils/configs/eagle.py`,
`configs/speculators/{base,algos}.py` and SafeAILab/EAGLE's `eagle/model/cnets.py`, `cnets1.py`):

- ``specjax``: as above; `config` is the EagleConfig with its layer's ModelConfig nested, the
  weights the module's own arrays by NNX path (`fc.kernel` [in, out], `d2t`, `t2d`, ...).
- ``vllm``, EAGLE-1: config.json a one-layer Llama config with `architectures`
  ["EagleLlamaForCausalLM"]; model.safetensors `fc.weight` [H, 2H], `layers.0.self_attn.
  {q,k,v,o}_proj.weight`, `layers.0.mlp.{gate,up,down}_proj.weight`,
  `layers.0.post_attention_layernorm.weight`: no input norm, no embedding or LM head (the
  target's are shared). vLLM's fc has no bias and its loader skips unexpected biases without a
  word, so a biased fc is refused in this layout (the reference's heads, `architectures`
  ["LlamaForCausalLM"], import with theirs).
- ``vllm``, EAGLE-3: `architectures` ["LlamaForCausalLMEagle3"], `draft_vocab_size`,
  `eagle_aux_hidden_state_layer_ids` (always written: vLLM's default taps (2, L//2, L-3)
  collapse on small targets), `norm_before_residual` false, `target_hidden_size` where it
  differs from hidden_size; `fc.weight` [H, 3H'], `midlayer.self_attn.{q,k,v}_proj.weight`
  [., 2H], `midlayer.self_attn.o_proj.weight`, `midlayer.mlp.*`,
  `midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight`, `norm.weight`,
  `lm_head.weight` [Vd, H], and when Vd < V `d2t` [Vd] int64 (target id = i + d2t[i]) and
  `t2d` [V] bool (vLLM has no d2t parameter for a full vocabulary and refuses one then).
  vLLM collects the taps as sorted(set(ids)): taps that repeat or decrease are refused.
- ``speculators`` (EAGLE-3 only): config.json with `speculators_model_type` "eagle3",
  `transformer_layer_config` (the Llama layer), the EAGLE-3 fields above at the top level and
  `speculators_config` (`proposal_methods` [{proposal_type "greedy", speculative_tokens}],
  `verifier.name_or_path` = `config.base_model`): vLLM then loads the verifier and enables
  speculation from the head directory alone. Tensors as above under `layers.0.`.
- Import also reads the reference's heads (SafeAILab/EAGLE: a one-layer Llama config beside
  `fc.weight`, `fc.bias` per its `bias` field, `layers.0.*` or EAGLE-3 `midlayer.*`), from
  `*.safetensors` only (a `pytorch_model.bin` is refused, saying how to convert it). A head's
  own `embed_tokens.weight` loads only with `target=` and equal to the target's table (vLLM
  then shares the target's); EAGLE-3 heads without tap ids take vLLM's default from
  `target=`. Fields vLLM honours and specjax's drafter does not reproduce (norm_before_fc,
  fc_norm, norm_output, norm_before_residual true (the speculators default), logit_scale,
  other families than Llama) are refused by name.

Every refusal names the file, tensor or field and both values.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors.numpy import save_file

from specjax.heads import HEAD_TYPES, MedusaConfig, MedusaHeads
from specjax.heads.eagle import EagleConfig, EagleHead
from specjax.heads.medusa import target_lm_head
from specjax.io.hf import read_safetensors
from specjax.models import as_model
from specjax.models.config import ModelConfig, config_from_hf, config_to_hf
from specjax.validate import check_int

LAYOUTS = ("specjax", "vllm", "fasterdecoding", "speculators")
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
    """Heads holding exactly these arrays: w [K, Lb, D, D], b [K, Lb, D] | None, lm_head
    [K, D, V] ([D, V] with `config.shared_lm_head`)."""
    heads = MedusaHeads(config, lm_head=np.zeros((config.hidden_size, config.vocab_size)))
    heads.w.set_value(jnp.asarray(w, config.dtype))
    if b is not None:
        heads.b.set_value(jnp.asarray(b, config.dtype))
    heads.lm_head.set_value(jnp.asarray(lm_head, config.dtype))
    return heads


def medusa_arrays(heads: MedusaHeads) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(w [K, Lb, D, D], b [K, Lb, D] or None, lm_head [K, D, V]) as float32 numpy; a shared
    LM head comes back as a read-only [K, D, V] view of its one [D, V] copy."""
    get = lambda p: np.asarray(p[...], np.float32)  # noqa: E731
    lm_head = get(heads.lm_head)
    if heads.config.shared_lm_head:
        lm_head = np.broadcast_to(lm_head, (heads.config.num_heads, *lm_head.shape))
    return get(heads.w), None if heads.b is None else get(heads.b), lm_head


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
    lm_head = lm_head[0] if config.shared_lm_head else lm_head  # [D, V]: written once
    _write({"w": w, "lm_head": lm_head, **({} if b is None else {"b": b})}, out / SPECJAX_WEIGHTS)
    _write_json(meta, out / SPECJAX_CONFIG)


def _load_specjax(directory: Path, target=None):
    where = directory / SPECJAX_CONFIG
    meta = _read_json(where)
    method = meta.get("method")
    if method not in DRAFT_TYPES:
        raise ValueError(f"{where}: method={method!r} is not one of {sorted(DRAFT_TYPES)}")
    if DRAFT_TYPES[method] is EagleHead:
        return _load_eagle_specjax(directory, meta)
    try:
        config = MedusaConfig(**meta.get("config", {}))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: bad config ({e})") from e
    wfile = directory / SPECJAX_WEIGHTS
    tensors = _tensors([wfile])
    K, Lb, D, V = config.num_heads, config.stored_blocks, config.hidden_size, config.vocab_size
    why = (f" ({where.name}: num_heads={K}, stored blocks={Lb}, hidden_size={D}, "
           f"vocab_size={V}, shared_lm_head={config.shared_lm_head})")  # fmt: skip
    w = _take(tensors, "w", (K, Lb, D, D), wfile, why)
    b = _take(tensors, "b", (K, Lb, D), wfile, why) if config.bias else None
    lm_shape = (D, V) if config.shared_lm_head else (K, D, V)
    lm_head = _take(tensors, "lm_head", lm_shape, wfile, why)
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
        if not c.shared_lm_head:
            tensors[f"lm_heads.{h}.weight"] = lm_head[h].T  # [V, D]
    if c.shared_lm_head:
        tensors["lm_head.weight"] = lm_head[0].T  # [V, D], read by every head
    config = {
        "model_type": "medusa",
        "architectures": [VLLM_ARCH],
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "num_heads": c.num_heads,
        "num_hidden_layers": c.num_layers,
        "truncated_vocab_size": c.vocab_size,
        "medusa_fc_bias": b is not None,  # vLLM drops the biases silently without it
        "original_lm_head": c.shared_lm_head,
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
        lm_head = _take(tensors, name, (V, D), wfile, why).T  # [D, V], shared
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
    mc = MedusaConfig(D, V, K, L, bias=bias, shared_lm_head=original, base_model=base)
    return _medusa_from_arrays(mc, w, b, lm_head)


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
        lm_head = np.asarray(target_lm_head(as_model(target).module), np.float32)  # [D, V]
    _check_consumed(tensors, wfile, why)
    mc = MedusaConfig(D, V, K, L, shared_blocks=True, bias=True, shared_lm_head=shared_lm,
                      base_model=str(config.get("base_model_name_or_path") or ""))  # fmt: skip
    return _medusa_from_arrays(mc, w, b, lm_head)


# ----------------------------------------------------------------------------------- EAGLE
#
# An EagleHead's arrays by their NNX path ("fc.kernel", "mlp.gate_proj.kernel", "d2t", ...);
# checkpoints name them as vLLM's loaders do: `fc`, `<layer>self_attn.{q,k,v,o}_proj`,
# `<layer>mlp.*`, `<layer>{post_attention_layernorm,input_layernorm,hidden_norm}`, `norm`,
# `lm_head`, `d2t`, `t2d`, where <layer> is `layers.0.` (EAGLE-1; speculators' EAGLE-3) or
# `midlayer.` (the reference's and vLLM's EAGLE-3 name; vLLM maps it to layers.0.). Kernels are
# NNX's [in, out]; checkpoints hold torch's [out, in].

EAGLE_ARCH = "EagleLlamaForCausalLM"  # vLLM's registry: llama_eagle.EagleLlamaForCausalLM
EAGLE3_ARCH = "LlamaForCausalLMEagle3"  # vLLM's registry: llama_eagle3.Eagle3LlamaForCausalLM
EAGLE3_ARCHS = (EAGLE3_ARCH, "Eagle3LlamaForCausalLM")  # both name vLLM's Llama EAGLE-3
SPECULATORS_ARCH = "Eagle3Speculator"  # vllm-project/speculators' model class
SPECULATORS_TOKENS = 3  # speculators_config's speculative_tokens unless save_draft is told
EAGLE1_LAYER, EAGLE3_LAYER, SPECULATORS_LAYER = "layers.0.", "midlayer.", "layers.0."
# Config keys of EAGLE heads that are not transformers Llama fields (read here, never passed
# to config_from_hf, which refuses fields it does not know).
_EAGLE_KEYS = (
    "draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids",
    "eagle_config", "bias", "qkv_bias", "norm_before_residual", "norm_before_fc", "fc_norm",
    "norm_output", "num_aux_hidden_states", "base_model_name_or_path", "logit_scale",
    "truncated_vocab_size", "speculators_model_type", "speculators_config",
    "speculators_version", "transformer_layer_config", "auto_map", "has_no_defaults_at_init",
    "embed_requires_grad", "base_model_ep_plan",
)  # fmt: skip
DRAFT_TYPES = {**HEAD_TYPES, "eagle": EagleHead, "eagle3": EagleHead}


def _flat(head) -> dict[str, nnx.Variable]:
    """The head's variables by dotted NNX path ("fc.kernel", "d2t", ...)."""
    return {".".join(map(str, p)): v for p, v in nnx.to_flat_state(nnx.state(head))}


def eagle_arrays(head: EagleHead) -> dict[str, np.ndarray]:
    """Every array of an EagleHead by dotted NNX path: floats as float32, d2t int, t2d bool."""
    out = {}
    for name, var in _flat(head).items():
        value = np.asarray(var.get_value())
        out[name] = value.astype(np.float32) if jnp.issubdtype(value.dtype, jnp.floating) else value
    return out


def _eagle_from_arrays(config: EagleConfig, arrays: dict[str, np.ndarray]) -> EagleHead:
    """A head holding exactly `arrays` (every NNX path present, shapes already checked)."""
    head = nnx.eval_shape(lambda: EagleHead(config, nnx.Rngs(0)))  # no random init
    for name, var in _flat(head).items():
        var.set_value(jnp.asarray(arrays[name], var.get_value().dtype))
    return head


def _eagle_shapes(config: EagleConfig) -> dict[str, tuple[tuple, np.dtype]]:
    """(shape, dtype) of every array of a head with `config`, by NNX path."""
    head = nnx.eval_shape(lambda: EagleHead(config, nnx.Rngs(0)))
    return {n: (tuple(v.get_value().shape), v.get_value().dtype) for n, v in _flat(head).items()}


def _eagle_names(config: EagleConfig, layer: str) -> list[tuple[str, str, bool]]:
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


def _config_json(config) -> dict:
    """dataclasses.asdict, JSON-ready (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def _eagle_config_from_json(d: dict, where: Path) -> EagleConfig:
    """EagleConfig from `_config_json`'s dict (the specjax layout), refusing bad fields by name."""
    try:
        d = dict(d)
        layer = dict(d.pop("layer"))
        if layer.get("rope_scaling") is not None:
            layer["rope_scaling"] = tuple(tuple(kv) for kv in layer["rope_scaling"])
        layer["eos_token_ids"] = tuple(layer.get("eos_token_ids") or ())
        return EagleConfig(layer=ModelConfig(**layer), **{**d, "tap_layers": tuple(d.get("tap_layers", ()))})  # fmt: skip
    except (TypeError, ValueError, KeyError, NotImplementedError) as e:
        raise ValueError(f"{where}: bad EAGLE config ({type(e).__name__}: {e})") from e


def _eagle_layer_hf(config: EagleConfig) -> dict:
    """The drafter layer's transformers Llama config.json dict (num_hidden_layers 1)."""
    out = config_to_hf(config.layer)
    out["torch_dtype"] = config.layer.dtype  # the head's dtype; the tensors are float32
    return out


def _check_vllm_taps(config: EagleConfig) -> None:
    taps = config.tap_layers
    if list(taps) != sorted(set(taps)):
        raise ValueError(
            f"EagleConfig.tap_layers={taps}: vLLM collects the taps as sorted(set(ids)) "
            "(SupportsEagle3._set_aux_hidden_state_layers), so taps that repeat or are not "
            "increasing would reach the fc in another order or width than specjax feeds it: "
            "export with layout='specjax', or train with three increasing tap layers"
        )


def _eagle_hf_tensors(head: EagleHead, layer: str) -> dict[str, np.ndarray]:
    """The head's tensors under vLLM's names (torch layouts), d2t/t2d when the draft
    vocabulary is reduced (vLLM has no draft_id_to_target_id parameter otherwise)."""
    c, arrays = head.config, eagle_arrays(head)
    out = {name: arrays[path].T if t else arrays[path] for path, name, t in _eagle_names(c, layer)}
    if c.method == "eagle3" and c.draft_vocab_size < c.vocab_size:
        out["d2t"] = arrays["d2t"].astype(np.int64)  # [Vd]
        out["t2d"] = arrays["t2d"].astype(bool)  # [V]
    return out


def _eagle3_fields(c: EagleConfig) -> dict:
    fields = {
        "draft_vocab_size": c.draft_vocab_size,
        "eagle_aux_hidden_state_layer_ids": list(c.tap_layers),
        # vLLM's EAGLE-3 layer: residual = g_t, hidden_norm(g_t) into q/k/v (specjax's math);
        # speculators' configs default to true, so it is always written.
        "norm_before_residual": False,
    }
    if c.target_hidden_size != c.hidden_size:
        fields["target_hidden_size"] = c.target_hidden_size
    return fields


def _save_eagle_vllm(head: EagleHead, out: Path, **_) -> None:
    c = head.config
    if c.method == "eagle" and c.fc_bias:
        raise ValueError(
            "EagleConfig.fc_bias=True: vLLM's `eagle` loader (llama_eagle.py) builds fc "
            "without a bias and drops 'fc.bias' without a word (unexpected biases are skipped), "
            "so it would draft differently; export with layout='specjax', or train with "
            "fc_bias=False"
        )
    config = _eagle_layer_hf(c)
    if c.method == "eagle":
        config["architectures"] = [EAGLE_ARCH]
        tensors = _eagle_hf_tensors(head, EAGLE1_LAYER)
    else:
        _check_vllm_taps(c)
        config["architectures"] = [EAGLE3_ARCH]
        config.update(_eagle3_fields(c))
        tensors = _eagle_hf_tensors(head, EAGLE3_LAYER)
    if c.base_model:
        config["base_model_name_or_path"] = c.base_model
    _write(tensors, out / VLLM_WEIGHTS)
    _write_json(config, out / "config.json")


def _verifier_architectures(base_model: str) -> list:
    path = Path(base_model) / "config.json"
    try:
        arch = json.loads(path.read_text()).get("architectures") if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        arch = None
    return list(arch) if isinstance(arch, list) else []


def _save_eagle_speculators(head: EagleHead, out: Path, speculative_tokens=None) -> None:
    c = head.config
    if c.method != "eagle3":
        raise ValueError(
            f"layout='speculators' holds EAGLE-3 heads (speculators_model_type 'eagle3', the "
            f"one vLLM reads), got method={c.method!r}: export with layout='vllm' or 'specjax'"
        )
    if not c.base_model:
        raise ValueError(
            "layout='speculators' names the verifier (speculators_config.verifier.name_or_path) "
            "that vLLM loads from the head directory alone, but EagleConfig.base_model is "
            "empty: build the head with base_model=<target path or hub id>"
        )
    _check_vllm_taps(c)
    n = SPECULATORS_TOKENS if speculative_tokens is None else speculative_tokens
    n = check_int("speculative_tokens", n, 1)
    layer = _eagle_layer_hf(c)
    layer.pop("architectures")
    config = {
        "architectures": [SPECULATORS_ARCH],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer,
        **_eagle3_fields(c),
        "target_hidden_size": c.target_hidden_size
        if c.target_hidden_size != c.hidden_size
        else None,
        "norm_before_fc": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": n,
                    "accept_tolerance": 0.0,
                    "verifier_accept_k": 1,
                }
            ],
            "verifier": {
                "name_or_path": c.base_model,
                "architectures": _verifier_architectures(c.base_model),
            },
        },
        "torch_dtype": c.layer.dtype,
    }
    _write(_eagle_hf_tensors(head, SPECULATORS_LAYER), out / VLLM_WEIGHTS)
    _write_json(config, out / "config.json")


def _safetensors_names(d: Path) -> set[str]:
    """Tensor names of every *.safetensors in `d` (headers only)."""
    from safetensors import safe_open

    names = set()
    for path in sorted(d.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="numpy") as f:
                names.update(f.keys())
        except Exception:  # an unreadable file is refused by the loader, naming it
            continue
    return names


def _eagle_kind(d: Path, config: dict) -> str | None:
    """ "speculators" or "vllm" when config.json describes an EAGLE head, else None.

    vLLM layout: architectures naming a vLLM EAGLE class; the reference (SafeAILab/EAGLE): a
    one-layer Llama config beside `fc.weight` (or only a pickle, refused by the loader)."""
    if config.get("speculators_model_type") is not None or "speculators_config" in config:
        return "speculators"
    arch = config.get("architectures") or []
    if isinstance(arch, list) and any(isinstance(a, str) and "Eagle" in a for a in arch):
        return "vllm"
    if config.get("num_hidden_layers") != 1:
        return None
    if "draft_vocab_size" in config or "eagle_aux_hidden_state_layer_ids" in config:
        return "vllm"
    if "fc.weight" in _safetensors_names(d):
        return "vllm"
    if not any(d.glob("*.safetensors")) and (d / "pytorch_model.bin").is_file():
        return "vllm"  # a reference head as a pickle: the loader says to convert it
    return None


def _eagle_weights(directory: Path) -> tuple[dict, Path]:
    """Every *.safetensors of an EAGLE head directory (as vLLM globs them); .bin refused."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
        extra = (f"; it holds only PyTorch pickles {pickles}, which specjax never unpickles: "
                 "convert them first, e.g. safetensors.torch.save_file({k: v.contiguous() for "
                 "k, v in torch.load(path).items()}, 'model.safetensors')") if pickles else ""  # fmt: skip
        raise FileNotFoundError(f"{directory / VLLM_WEIGHTS} is missing (no *.safetensors){extra}")
    return _tensors(files), (files[0] if len(files) == 1 else directory)


def _flag(config: dict, key: str, where: Path, want, why: str):
    """Refuse a config field vLLM honours whose value specjax's drafter cannot reproduce."""
    value = config.get(key)
    if value is not None and value != want:
        raise ValueError(
            f"{where}: field {key!r}={value!r} ({why}); specjax's drafter has {key}={want!r}"
        )


def _tap_ids(value, where: Path, key: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ValueError(f"{where}: field {key!r}={value!r} must be a list of layer ids >= 0")
    ids = tuple(sorted(set(value)))  # what vLLM taps, in its order
    if len(ids) != 3:
        raise ValueError(
            f"{where}: field {key!r}={list(value)} names {len(ids)} distinct layers; an EAGLE-3 "
            "head reads three (vLLM taps sorted(set(ids)))"
        )
    return ids


def _hf_layer(cfg: dict, where: Path) -> ModelConfig:
    """The drafter layer from a one-layer Llama config.json dict (EAGLE keys stripped)."""
    mt = cfg.get("model_type", "llama")
    if mt != "llama":
        raise ValueError(
            f"{where}: field 'model_type'={mt!r}: specjax's EAGLE drafter is a Llama layer "
            "(vLLM's llama_eagle / llama_eagle3); other families' drafters are not supported"
        )
    if cfg.get("num_hidden_layers") != 1:
        raise ValueError(
            f"{where}: field 'num_hidden_layers'={cfg.get('num_hidden_layers')!r}: an EAGLE "
            "drafter has one layer"
        )
    if "vocab_size" not in cfg:
        raise ValueError(f"{where}: field 'vocab_size' (the target's vocabulary) is missing")
    plain = {k: v for k, v in cfg.items() if k not in _EAGLE_KEYS}
    try:
        layer = config_from_hf({**plain, "model_type": "llama"})
    except (NotImplementedError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: {type(e).__name__}: {e}") from e
    dtype = cfg.get("torch_dtype", cfg.get("dtype"))
    return layer.replace(dtype=dtype if dtype in ("float32", "bfloat16") else "float32")


def _check_d2t(d2t, t2d, V: int, wfile: Path) -> tuple[np.ndarray, np.ndarray]:
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


def _load_eagle_hf(directory: Path, target=None, speculators: bool = False) -> EagleHead:
    """An EAGLE head in vLLM's, the reference's (SafeAILab/EAGLE) or speculators' layout."""
    where = directory / "config.json"
    raw = _read_json(where)
    if speculators:
        kind = raw.get("speculators_model_type")
        if kind != "eagle3":
            raise ValueError(
                f"{where}: field 'speculators_model_type'={kind!r}: specjax reads speculators "
                "EAGLE-3 heads ('eagle3')"
            )
        spec = raw.get("speculators_config")
        try:
            base = spec["verifier"]["name_or_path"]
            spec["proposal_methods"][0]["speculative_tokens"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(
                f"{where}: field 'speculators_config' needs proposal_methods[0]."
                "speculative_tokens and verifier.name_or_path (vLLM reads both)"
            ) from None
        layer_cfg = raw.get("transformer_layer_config")
        if not isinstance(layer_cfg, dict):
            raise ValueError(f"{where}: field 'transformer_layer_config' must be an object")
        cfg = {**layer_cfg, **{k: v for k, v in raw.items() if k != "transformer_layer_config"}}
        # vLLM's speculators reader (configs/speculators/algos.py) defaults it to true.
        cfg.setdefault("norm_before_residual", True)
        cfg["model_type"] = layer_cfg.get("model_type", "llama")
        cfg["torch_dtype"] = raw.get("torch_dtype", layer_cfg.get("torch_dtype"))
        method, declared = "eagle3", True
    else:
        cfg, base = raw, raw.get("base_model_name_or_path")
        arch = raw.get("architectures") or []
        if not isinstance(arch, list):
            raise ValueError(f"{where}: field 'architectures'={arch!r} must be a list")
        eagle_arch = [a for a in arch if isinstance(a, str) and "Eagle" in a]
        declared = bool(eagle_arch)  # vLLM's layout (else the reference's: LlamaForCausalLM)
        if eagle_arch and eagle_arch != arch or len(eagle_arch) > 1:
            raise ValueError(f"{where}: field 'architectures'={arch!r} names several models")
        if eagle_arch and eagle_arch[0] == EAGLE_ARCH:
            method = "eagle"
        elif eagle_arch and eagle_arch[0] in EAGLE3_ARCHS:
            method = "eagle3"
        elif eagle_arch:
            raise ValueError(
                f"{where}: field 'architectures'={arch!r}: specjax reads vLLM's Llama EAGLE "
                f"drafters ['{EAGLE_ARCH}'] and {[a for a in EAGLE3_ARCHS]}"
            )
        else:
            method = None  # from the tensors below
    tensors, wfile = _eagle_weights(directory)
    if method is None:
        eagle3 = ("draft_vocab_size" in cfg or "d2t" in tensors
                  or any(n.startswith(EAGLE3_LAYER) or "hidden_norm" in n for n in tensors))  # fmt: skip
        method = "eagle3" if eagle3 else "eagle"
    layer = _hf_layer(cfg, where)
    H, V = layer.hidden_size, layer.vocab_size
    _flag(cfg, "logit_scale", where, 1.0, "vLLM scales the drafter's logits by it")
    if cfg.get("qkv_bias") is not None and bool(cfg["qkv_bias"]) != layer.attention_bias:
        raise ValueError(
            f"{where}: field 'qkv_bias'={cfg['qkv_bias']!r} differs from attention_bias="
            f"{layer.attention_bias}: vLLM gives q/k/v and o_proj different biases then"
        )

    # fc bias: the reference's config "bias" (default true) is the fc's; vLLM has none.
    fc_bias = "fc.bias" in tensors
    if method == "eagle" and not declared and cfg.get("bias") is not None:
        if bool(cfg["bias"]) != fc_bias:
            raise ValueError(
                f"{where}: field 'bias'={cfg['bias']!r} (the reference's fc bias) but "
                f"{wfile.name} {'holds' if fc_bias else 'has no'} 'fc.bias'"
            )
    elif cfg.get("bias"):
        raise ValueError(
            f"{where}: field 'bias'={cfg['bias']!r}: vLLM reads it as attention_bias "
            "(the reference as the fc's bias); set attention_bias and drop 'bias'"
        )
    if fc_bias and (method == "eagle3" or declared):
        loader = "llama_eagle3.py" if method == "eagle3" else "llama_eagle.py"
        raise ValueError(
            f"{wfile}: holds 'fc.bias' but vLLM's {method} loader ({loader}) builds fc without "
            "a bias and drops it without a word, so it would draft differently"
        )

    if method == "eagle":
        taps, Vd, TH, prefix = (), 0, 0, EAGLE1_LAYER
        stray = [k for k in ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids")
                 if cfg.get(k) not in (None, V if k == "draft_vocab_size" else H)]  # fmt: skip
        if stray:
            raise ValueError(f"{where}: EAGLE-3 field(s) {stray} in an EAGLE-1 ({method!r}) head")
    else:
        eagle_config = cfg.get("eagle_config") or {}
        if not isinstance(eagle_config, dict):
            raise ValueError(f"{where}: field 'eagle_config'={eagle_config!r} must be an object")
        for key, want, why in (
            ("norm_before_residual", False, "hidden_norm(g_t) would be the residual"),
            ("norm_before_fc", False, "an RMSNorm over the taps before fc"),
            ("fc_norm", False, "an RMSNorm over each tap before fc"),
            ("norm_output", False, "the post-norm hidden would feed the next step"),
        ):
            _flag(cfg, key, where, want, why)
            _flag(eagle_config, key, where, want, f"eagle_config.{key}: {why}")
        _flag(eagle_config, "use_aux_hidden_state", where, True, "no taps, no fc")
        _flag(cfg, "num_aux_hidden_states", where, 3, "the fc reads 3 taps")
        key = "eagle_aux_hidden_state_layer_ids"
        ids = cfg.get(key) or eagle_config.get(key)
        if ids:
            taps = _tap_ids(ids, where, key)
        elif target is not None:  # vLLM's default: (2, L//2, L-3) of the target
            L = as_model(target).config.num_layers
            taps = _tap_ids([2, L // 2, L - 3], where, f"{key} (absent: vLLM's default for L={L})")
        else:
            raise ValueError(
                f"{where}: field {key!r} is missing: vLLM then taps the target's layers "
                "(2, L//2, L-3); pass target= to load_draft so they can be computed"
            )
        Vd = cfg.get("draft_vocab_size") or V
        Vd = _int_field({"draft_vocab_size": Vd}, "draft_vocab_size", where)
        TH = _int_field({"target_hidden_size": cfg.get("target_hidden_size") or H},
                        "target_hidden_size", where)  # fmt: skip
        has_midlayer = any(n.startswith(EAGLE3_LAYER) for n in tensors)
        has_layers = any(n.startswith("layers.0.") for n in tensors)
        if has_midlayer and has_layers:
            raise ValueError(
                f"{wfile}: holds both 'midlayer.*' and 'layers.0.*' tensors, which vLLM loads "
                "into the same layer (the last one read wins)"
            )
        prefix = EAGLE3_LAYER if has_midlayer or not has_layers else "layers.0."
    try:
        config = EagleConfig(method, layer, fc_bias=fc_bias, tap_layers=taps,
                             draft_vocab_size=Vd, target_hidden_size=TH,
                             base_model=str(base or ""))  # fmt: skip
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e

    why = (f" ({where.name}: method={method!r}, hidden_size={H}, vocab_size={V}, "
           f"intermediate_size={layer.intermediate_size}, heads={layer.num_heads}/"
           f"{layer.num_kv_heads}x{layer.head_dim}"
           + (f", draft_vocab_size={Vd}, taps={list(taps)}, fc input {config.fc_in}"
              if method == "eagle3" else f", fc_bias={fc_bias}") + ")")  # fmt: skip
    shapes = _eagle_shapes(config)
    arrays = {}
    for path, name, transposed in _eagle_names(config, prefix):
        shape = shapes[path][0]
        array = _take(tensors, name, shape[::-1] if transposed else shape, wfile, why)
        arrays[path] = array.T if transposed else array
    if method == "eagle3":
        if "d2t" in tensors:
            d2t = _take(tensors, "d2t", (Vd,), wfile, why)
            t2d = _take(tensors, "t2d", (V,), wfile, why) if "t2d" in tensors else None
            arrays["d2t"], arrays["t2d"] = _check_d2t(d2t, t2d, V, wfile)
        elif Vd < V:
            raise ValueError(
                f"{wfile}: tensor 'd2t' is missing, but draft_vocab_size={Vd} < vocab_size={V} "
                "(draft id i is target id i + d2t[i])"
            )
        else:
            if "t2d" in tensors:
                _check_d2t(np.zeros(V, np.int64), _take(tensors, "t2d", (V,), wfile, why), V, wfile)
            arrays["d2t"], arrays["t2d"] = np.zeros(V, np.int32), np.ones(V, bool)
    if "embed_tokens.weight" in tensors:
        _check_own_embedding(tensors.pop("embed_tokens.weight"), target, wfile)
    _check_consumed(tensors, wfile, f"{why}: vLLM would refuse or ignore them")
    return _eagle_from_arrays(config, arrays)


def _check_own_embedding(table: np.ndarray, target, wfile: Path) -> None:
    """A head's own `embed_tokens.weight` loads only when it equals the target's table (vLLM
    then shares the target's, as specjax's drafter always does)."""
    if target is None:
        raise ValueError(
            f"{wfile}: holds its own embedding 'embed_tokens.weight' {list(table.shape)}; "
            "specjax's drafter shares the target's (as vLLM does when they are equal): pass "
            "target= to load_draft so the two can be compared"
        )
    ours = np.asarray(as_model(target).module.embedder.embedding[...], np.float32)
    if ours.shape != table.shape or not np.array_equal(ours, table):
        diff = (
            "shape" if ours.shape != table.shape else f"max |diff| {np.abs(ours - table).max():.3g}"
        )
        raise ValueError(
            f"{wfile}: tensor 'embed_tokens.weight' {list(table.shape)} differs from the "
            f"target's embedding {list(ours.shape)} ({diff}): vLLM would draft with its own "
            "table, specjax's drafter shares the target's"
        )


def _check_eagle_fit(config: EagleConfig, target, where: Path) -> None:
    """Refuse an EAGLE head whose widths, vocabulary or taps do not fit `target`, naming both."""
    tc = as_model(target).config
    checks = [("hidden_size", config.hidden_size, "hidden_size", tc.hidden_size)]
    if config.method == "eagle3":
        checks.append(
            ("target_hidden_size", config.target_hidden_size, "hidden_size", tc.hidden_size)
        )
    checks.append(("vocab_size", config.vocab_size, "vocab_size", tc.vocab_size))
    for field, ours, theirs_field, theirs in checks:
        if ours != theirs:
            raise ValueError(
                f"{where}: the EAGLE head has {field}={ours}, the target's {theirs_field} is {theirs}"
            )
    bad = [i for i in config.tap_layers if not 0 <= i < tc.num_layers]
    if bad:
        raise ValueError(
            f"{where}: the EAGLE-3 head's tap_layers={list(config.tap_layers)} include {bad}, "
            f"outside the target's num_layers={tc.num_layers} (layer ids 0..{tc.num_layers - 1})"
        )


def _save_eagle_specjax(head: EagleHead, out: Path, **_) -> None:
    c = head.config
    meta = {"format": "specjax-draft", "version": 1, "method": c.method, "config": _config_json(c)}
    _write(eagle_arrays(head), out / SPECJAX_WEIGHTS)
    _write_json(meta, out / SPECJAX_CONFIG)


def _load_eagle_specjax(directory: Path, meta: dict) -> EagleHead:
    where = directory / SPECJAX_CONFIG
    config = _eagle_config_from_json(meta.get("config") or {}, where)
    if config.method != meta.get("method"):
        raise ValueError(
            f"{where}: method={meta.get('method')!r} but config.method={config.method!r}"
        )
    wfile = directory / SPECJAX_WEIGHTS
    tensors = _tensors([wfile])
    c = config
    why = (f" ({where.name}: method={c.method!r}, hidden_size={c.hidden_size}, vocab_size="
           f"{c.vocab_size}, draft_vocab_size={c.draft_vocab_size}, fc input {c.fc_in}, "
           f"fc_bias={c.fc_bias}, attention_bias={c.layer.attention_bias})")  # fmt: skip
    arrays = {}
    for name, (shape, dtype) in _eagle_shapes(config).items():
        array = _take(tensors, name, shape, wfile, why)
        kind = "f" if jnp.issubdtype(dtype, jnp.floating) else np.dtype(dtype).kind
        if kind != array.dtype.kind and not (kind in "iu" and array.dtype.kind in "iu"):
            raise ValueError(
                f"{wfile}: tensor {name!r} has dtype {array.dtype}, expected {np.dtype(dtype)}"
            )
        arrays[name] = array
    if config.method == "eagle3":
        arrays["d2t"], arrays["t2d"] = _check_d2t(arrays["d2t"], arrays["t2d"], c.vocab_size, wfile)
    _check_consumed(tensors, wfile, why)
    return _eagle_from_arrays(config, arrays)


# ---------------------------------------------------------------------------------- public

_SAVERS = {"specjax": _save_specjax, "vllm": _save_vllm, "fasterdecoding": _save_fasterdecoding}
_EAGLE_SAVERS = {
    "specjax": _save_eagle_specjax,
    "vllm": _save_eagle_vllm,
    "speculators": _save_eagle_speculators,
}


def _load_vllm_any(directory: Path, target=None):
    """vLLM's layout: Medusa (model_type "medusa") or an EAGLE head (vLLM's or the reference's)."""
    config = _read_json(directory / "config.json")
    if config.get("model_type") == "medusa" or config.get("architectures") == [VLLM_ARCH]:
        return _load_vllm(directory, target)
    return _load_eagle_hf(directory, target)


_LOADERS = {
    "specjax": _load_specjax,
    "vllm": _load_vllm_any,
    "fasterdecoding": _load_fasterdecoding,
    "speculators": lambda d, target=None: _load_eagle_hf(d, target, speculators=True),
}


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
    eagle = _eagle_kind(d, config)
    if eagle is not None:
        return eagle
    raise ValueError(
        f"{d / 'config.json'} describes no draft heads (model_type="
        f"{config.get('model_type')!r}); a draft LM loads with sj.load_model (an EAGLE head "
        "has an Eagle architecture, speculators_config, or one layer beside fc.weight)"
    )


def detect_layout(directory) -> str:
    """The layout of a heads directory: "specjax", "vllm", "fasterdecoding" or "speculators".

    "vllm" covers vLLM's Medusa, EAGLE (`EagleLlamaForCausalLM`) and EAGLE-3
    (`LlamaForCausalLMEagle3`) directories and the reference's (SafeAILab/EAGLE) EAGLE heads:
    a one-layer Llama config.json beside `fc.weight`.

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
            "model_type 'medusa' (vLLM) or medusa_num_heads (FasterDecoding), an EAGLE "
            "architecture or speculators_config (EAGLE heads)"
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
      path: a heads directory (specjax, vLLM, FasterDecoding, SafeAILab/EAGLE or speculators
        layout), or a head-training workdir (its exported `heads/`).
      target: optional Model/Decoder; when given, a hidden size, vocabulary or EAGLE-3 tap
        layer that does not fit the target is refused here rather than at `generate`.
        FasterDecoding's version-2 heads (no LM-head tensors: they share the base model's),
        EAGLE-3 heads whose config names no tap layers (vLLM then taps the target's
        (2, L//2, L-3)) and EAGLE heads that carry their own copy of the embedding (it must
        equal the target's) need it.
    Returns:
      The heads module (`specjax.heads.MedusaHeads` or `specjax.heads.eagle.EagleHead`), its
      `config.method` naming the speculative method it serves.
    Raises:
      FileNotFoundError for a missing directory or file (or PyTorch pickles only);
      ValueError for a config field, a missing, unexpected, misshapen or non-finite tensor,
      or a mismatch with `target`, naming the field or tensor and both values.
    """
    directory = Path(path)
    if directory.is_dir() and _layout_of(directory) is None and (directory / HEADS_DIR).is_dir():
        directory = directory / HEADS_DIR  # a training workdir
    layout = detect_layout(directory)
    heads = _LOADERS[layout](directory, target)
    if target is not None:
        c = heads.config
        if isinstance(heads, EagleHead):
            _check_eagle_fit(c, target, directory)
        else:
            _check_fit(
                {"hidden_size": c.hidden_size, "vocab_size": c.vocab_size}, target, directory
            )
    return heads


def _check_out_dir(out: Path, layout: str) -> None:
    """Refuse to write vLLM/FasterDecoding/speculators heads over a model or beside other weights."""
    if layout == "specjax" or not out.is_dir():
        return
    if (out / "config.json").is_file():
        config = _read_json(out / "config.json")
        heads = (config.get("model_type") in (None, "medusa") or "medusa_num_heads" in config
                 or _eagle_kind(out, config) is not None)  # fmt: skip
        if not heads:
            raise ValueError(
                f"{out / 'config.json'} describes a model (model_type="
                f"{config.get('model_type')!r}); layout={layout!r} would overwrite it: "
                "choose an empty directory"
            )
    ours = FD_WEIGHTS if layout == "fasterdecoding" else VLLM_WEIGHTS
    others = sorted(p.name for p in out.glob("*.safetensors") if p.name != ours)
    if others:
        raise ValueError(
            f"{out} already holds {others}; vLLM loads every *.safetensors of a draft "
            f"directory, so layout={layout!r} needs one without them"
        )


def _draft_arrays(heads) -> dict[str, np.ndarray]:
    if isinstance(heads, EagleHead):
        return eagle_arrays(heads)
    w, b, lm_head = medusa_arrays(heads)
    return {"w": w, "lm_head": lm_head, **({} if b is None else {"b": b})}


def save_draft(
    heads, out_dir, layout: str = "specjax", *, speculative_tokens: int | None = None
) -> Path:
    """Write draft heads to `out_dir` in `layout`.

    Layouts: Medusa heads "specjax", "vllm", "fasterdecoding"; EAGLE heads (EagleHead)
    "specjax", "vllm" (`EagleLlamaForCausalLM` / `LlamaForCausalLMEagle3`) and, for EAGLE-3,
    "speculators" (vllm-project/speculators' config: vLLM enables speculation from the
    directory alone, loading the verifier named by `heads.config.base_model`).

    The vLLM layout loads in vLLM with speculative_config={"method": <medusa|eagle|eagle3>,
    "model": out_dir} beside the target written by `sj.save_hf`. `base_model_name_or_path` is
    written from `heads.config.base_model` when set.

    Args:
      heads: MedusaHeads or EagleHead.
      out_dir: the directory (created).
      layout: see above.
      speculative_tokens: "speculators" only: proposal_methods[0].speculative_tokens, the
        number of tokens vLLM drafts per step by default (3 when None).

    Raises:
      ValueError for an unknown layout or one the head type has not, something that is not
      draft heads, non-finite parameters, independent blocks with num_layers > 1 to
      "fasterdecoding", a biased EAGLE-1 fc or EAGLE-3 taps vLLM would reorder to "vllm" /
      "speculators", or a directory holding a model or other weights (all but "specjax").
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    if not isinstance(heads, tuple(DRAFT_TYPES.values())):
        raise ValueError(
            f"save_draft needs draft heads (MedusaHeads or EagleHead), got {type(heads).__name__}"
        )
    eagle = isinstance(heads, EagleHead)
    if eagle and layout not in _EAGLE_SAVERS:
        raise ValueError(
            f"layout={layout!r} holds Medusa heads; EAGLE heads export to {tuple(_EAGLE_SAVERS)}"
        )
    if not eagle and layout == "speculators":
        raise ValueError(
            f"layout='speculators' holds EAGLE-3 heads; Medusa heads export to {tuple(_SAVERS)}"
        )
    if speculative_tokens is not None and layout != "speculators":
        raise ValueError(
            f"speculative_tokens={speculative_tokens!r} is a layout='speculators' option "
            f"(got layout={layout!r})"
        )
    arrays = _draft_arrays(heads)
    for name, array in arrays.items():
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            raise ValueError(f"heads parameter {name!r} holds {bad} non-finite values (NaN/inf)")
    if eagle and heads.config.method == "eagle3":
        _check_d2t(arrays["d2t"], arrays["t2d"], heads.config.vocab_size, Path("heads parameter"))
    out = Path(out_dir)
    _check_out_dir(out, layout)
    out.mkdir(parents=True, exist_ok=True)
    if eagle:
        _EAGLE_SAVERS[layout](heads, out, speculative_tokens=speculative_tokens)
    else:
        _SAVERS[layout](heads, out)
    return out
