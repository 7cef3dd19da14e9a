"""EAGLE heads in vLLM's, vllm-project/speculators' and the reference's (SafeAILab/EAGLE) layouts.

Checked against vLLM 0.32's `model_executor/models/llama_eagle.py`, `llama_eagle3.py`,
`transformers_utils/configs/eagle.py`, `configs/speculators/{base,algos}.py` and
SafeAILab/EAGLE's `eagle/model/cnets.py`, `cnets1.py`:

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
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specjax.heads.eagle import EagleConfig, EagleHead
from specjax.io.drafts.common import (
    HF_CONFIG,
    VLLM_WEIGHTS,
    Files,
    check_consumed,
    int_field,
    read_json,
    read_safetensors_dir,
    safetensors_names,
    take,
)
from specjax.io.drafts.eagle import check_d2t, checkpoint_names, eagle_arrays, eagle_shapes
from specjax.io.drafts.eagle import from_arrays as eagle_from_arrays
from specjax.models import as_model
from specjax.models.config import ModelConfig, config_from_hf, config_to_hf
from specjax.validate import check_int

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
# EAGLE-3 options vLLM honours that specjax's drafter does not reproduce: (key, the value it
# has, what the other value would do).
_EAGLE3_FLAGS = (
    ("norm_before_residual", False, "hidden_norm(g_t) would be the residual"),
    ("norm_before_fc", False, "an RMSNorm over the taps before fc"),
    ("fc_norm", False, "an RMSNorm over each tap before fc"),
    ("norm_output", False, "the post-norm hidden would feed the next step"),
)


def eagle_kind(d: Path, config: dict | None) -> str | None:
    """ "speculators" or "vllm" when config.json (`config`, None: none) describes an EAGLE
    head, else None.

    vLLM layout: architectures naming a vLLM EAGLE class; the reference (SafeAILab/EAGLE): a
    one-layer Llama config beside `fc.weight` (or only a pickle, refused by the loader)."""
    if config is None:
        return None
    if config.get("speculators_model_type") is not None or "speculators_config" in config:
        return "speculators"
    arch = config.get("architectures") or []
    if isinstance(arch, list) and any(isinstance(a, str) and "Eagle" in a for a in arch):
        return "vllm"
    if config.get("num_hidden_layers") != 1:
        return None
    if "draft_vocab_size" in config or "eagle_aux_hidden_state_layer_ids" in config:
        return "vllm"
    if "fc.weight" in safetensors_names(d):
        return "vllm"
    if not any(d.glob("*.safetensors")) and (d / "pytorch_model.bin").is_file():
        return "vllm"  # a reference head as a pickle: the loader says to convert it
    return None


# ----------------------------------------------------------------------------------- save


def _layer_hf(config: EagleConfig) -> dict:
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


def _hf_tensors(head: EagleHead, layer: str) -> dict[str, np.ndarray]:
    """The head's tensors under vLLM's names (torch layouts), d2t/t2d when the draft
    vocabulary is reduced (vLLM has no draft_id_to_target_id parameter otherwise)."""
    c, arrays = head.config, eagle_arrays(head)
    out = {
        name: arrays[path].T if t else arrays[path] for path, name, t in checkpoint_names(c, layer)
    }
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


def vllm_layout(head: EagleHead) -> Files:
    c = head.config
    if c.method == "eagle" and c.fc_bias:
        raise ValueError(
            "EagleConfig.fc_bias=True: vLLM's `eagle` loader (llama_eagle.py) builds fc "
            "without a bias and drops 'fc.bias' without a word (unexpected biases are skipped), "
            "so it would draft differently; export with layout='specjax', or train with "
            "fc_bias=False"
        )
    config = _layer_hf(c)
    if c.method == "eagle":
        config["architectures"] = [EAGLE_ARCH]
        tensors = _hf_tensors(head, EAGLE1_LAYER)
    else:
        _check_vllm_taps(c)
        config["architectures"] = [EAGLE3_ARCH]
        config.update(_eagle3_fields(c))
        tensors = _hf_tensors(head, EAGLE3_LAYER)
    if c.base_model:
        config["base_model_name_or_path"] = c.base_model
    return {VLLM_WEIGHTS: tensors, HF_CONFIG: config}


def _verifier_architectures(base_model: str) -> list:
    path = Path(base_model) / HF_CONFIG
    try:
        arch = json.loads(path.read_text()).get("architectures") if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        arch = None
    return list(arch) if isinstance(arch, list) else []


def speculators_layout(head: EagleHead, speculative_tokens: int = SPECULATORS_TOKENS) -> Files:
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
    n = check_int("speculative_tokens", speculative_tokens, 1)
    layer = _layer_hf(c)
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
    return {VLLM_WEIGHTS: _hf_tensors(head, SPECULATORS_LAYER), HF_CONFIG: config}


# ----------------------------------------------------------------------------------- load


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


def _speculators_config(raw: dict, where: Path) -> tuple[dict, str]:
    """(the layer config with the EAGLE-3 fields, the verifier) of a speculators config.json."""
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
    return cfg, base


def _declared_method(raw: dict, where: Path) -> tuple[str | None, bool]:
    """(method, declared) from `architectures`: declared for vLLM's EAGLE classes, method None
    for the reference's (LlamaForCausalLM: read off the tensors)."""
    arch = raw.get("architectures") or []
    if not isinstance(arch, list):
        raise ValueError(f"{where}: field 'architectures'={arch!r} must be a list")
    eagle_arch = [a for a in arch if isinstance(a, str) and "Eagle" in a]
    if eagle_arch and eagle_arch != arch or len(eagle_arch) > 1:
        raise ValueError(f"{where}: field 'architectures'={arch!r} names several models")
    if not eagle_arch:
        return None, False
    if eagle_arch[0] == EAGLE_ARCH:
        return "eagle", True
    if eagle_arch[0] in EAGLE3_ARCHS:
        return "eagle3", True
    raise ValueError(
        f"{where}: field 'architectures'={arch!r}: specjax reads vLLM's Llama EAGLE "
        f"drafters ['{EAGLE_ARCH}'] and {[a for a in EAGLE3_ARCHS]}"
    )


def _fc_bias(cfg: dict, tensors: dict, layer, method: str, declared: bool, where, wfile) -> bool:
    """Whether fc has a bias, refusing biases vLLM would read otherwise: the reference's
    config "bias" (default true) is the fc's; vLLM has none."""
    if cfg.get("qkv_bias") is not None and bool(cfg["qkv_bias"]) != layer.attention_bias:
        raise ValueError(
            f"{where}: field 'qkv_bias'={cfg['qkv_bias']!r} differs from attention_bias="
            f"{layer.attention_bias}: vLLM gives q/k/v and o_proj different biases then"
        )
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
    return fc_bias


def _eagle1_shape(cfg: dict, layer: ModelConfig, where: Path):
    """(taps, Vd, target hidden size, layer prefix) of an EAGLE-1 head: none of EAGLE-3's."""
    H, V = layer.hidden_size, layer.vocab_size
    stray = [k for k in ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids")
             if cfg.get(k) not in (None, V if k == "draft_vocab_size" else H)]  # fmt: skip
    if stray:
        raise ValueError(f"{where}: EAGLE-3 field(s) {stray} in an EAGLE-1 ('eagle') head")
    return (), 0, 0, EAGLE1_LAYER


def _eagle3_taps(cfg: dict, eagle_config: dict, target, where: Path) -> tuple[int, ...]:
    """The tap ids the config names, else vLLM's default (2, L//2, L-3) of `target`."""
    key = "eagle_aux_hidden_state_layer_ids"
    ids = cfg.get(key) or eagle_config.get(key)
    if ids:
        return _tap_ids(ids, where, key)
    if target is None:
        raise ValueError(
            f"{where}: field {key!r} is missing: vLLM then taps the target's layers "
            "(2, L//2, L-3); pass target= to load_draft so they can be computed"
        )
    L = as_model(target).config.num_layers
    return _tap_ids([2, L // 2, L - 3], where, f"{key} (absent: vLLM's default for L={L})")


def _eagle3_shape(cfg: dict, tensors: dict, layer: ModelConfig, target, where, wfile):
    """(taps, Vd, target hidden size, layer prefix) of an EAGLE-3 head."""
    H, V = layer.hidden_size, layer.vocab_size
    eagle_config = cfg.get("eagle_config") or {}
    if not isinstance(eagle_config, dict):
        raise ValueError(f"{where}: field 'eagle_config'={eagle_config!r} must be an object")
    for key, want, why in _EAGLE3_FLAGS:
        _flag(cfg, key, where, want, why)
        _flag(eagle_config, key, where, want, f"eagle_config.{key}: {why}")
    _flag(eagle_config, "use_aux_hidden_state", where, True, "no taps, no fc")
    _flag(cfg, "num_aux_hidden_states", where, 3, "the fc reads 3 taps")
    taps = _eagle3_taps(cfg, eagle_config, target, where)
    Vd = int_field(
        {"draft_vocab_size": cfg.get("draft_vocab_size") or V}, "draft_vocab_size", where
    )
    TH = int_field({"target_hidden_size": cfg.get("target_hidden_size") or H},
                   "target_hidden_size", where)  # fmt: skip
    has_midlayer = any(n.startswith(EAGLE3_LAYER) for n in tensors)
    has_layers = any(n.startswith("layers.0.") for n in tensors)
    if has_midlayer and has_layers:
        raise ValueError(
            f"{wfile}: holds both 'midlayer.*' and 'layers.0.*' tensors, which vLLM loads "
            "into the same layer (the last one read wins)"
        )
    return taps, Vd, TH, EAGLE3_LAYER if has_midlayer or not has_layers else "layers.0."


def _why(config: EagleConfig, where: Path) -> str:
    """The config fields that decide which tensors a head holds, for messages."""
    c, layer = config, config.layer
    return (f" ({where.name}: method={c.method!r}, hidden_size={layer.hidden_size}, vocab_size="
            f"{layer.vocab_size}, intermediate_size={layer.intermediate_size}, heads="
            f"{layer.num_heads}/{layer.num_kv_heads}x{layer.head_dim}"
            + (f", draft_vocab_size={c.draft_vocab_size}, taps={list(c.tap_layers)}, fc input "
               f"{c.fc_in}" if c.method == "eagle3" else f", fc_bias={c.fc_bias}") + ")")  # fmt: skip


def _draft_vocabulary(tensors: dict, config: EagleConfig, wfile, why):
    """(d2t [V] int32, t2d [V] bool) of an EAGLE-3 head: read, or the identity for a full
    draft vocabulary."""
    V, Vd = config.vocab_size, config.draft_vocab_size
    if "d2t" in tensors:
        d2t = take(tensors, "d2t", (Vd,), wfile, why)
        t2d = take(tensors, "t2d", (V,), wfile, why) if "t2d" in tensors else None
        return check_d2t(d2t, t2d, V, wfile)
    if Vd < V:
        raise ValueError(
            f"{wfile}: tensor 'd2t' is missing, but draft_vocab_size={Vd} < vocab_size={V} "
            "(draft id i is target id i + d2t[i])"
        )
    if "t2d" in tensors:
        check_d2t(np.zeros(V, np.int64), take(tensors, "t2d", (V,), wfile, why), V, wfile)
    return np.zeros(V, np.int32), np.ones(V, bool)


def _hf_arrays(config: EagleConfig, tensors: dict, prefix: str, wfile, why) -> dict:
    """Every array of the head by NNX path, taken from `tensors` (checkpoint names, torch
    layouts)."""
    shapes = eagle_shapes(config)
    arrays = {}
    for path, name, transposed in checkpoint_names(config, prefix):
        shape = shapes[path][0]
        array = take(tensors, name, shape[::-1] if transposed else shape, wfile, why)
        arrays[path] = array.T if transposed else array
    if config.method == "eagle3":
        arrays["d2t"], arrays["t2d"] = _draft_vocabulary(tensors, config, wfile, why)
    return arrays


def load_hf(directory: Path, target=None, speculators: bool = False) -> EagleHead:
    """An EAGLE head in vLLM's, the reference's (SafeAILab/EAGLE) or speculators' layout."""
    where = directory / HF_CONFIG
    raw = read_json(where)
    if speculators:
        cfg, base = _speculators_config(raw, where)
        method, declared = "eagle3", True
    else:
        cfg, base = raw, raw.get("base_model_name_or_path")
        method, declared = _declared_method(raw, where)
    tensors, wfile = read_safetensors_dir(directory)
    if method is None:
        eagle3 = ("draft_vocab_size" in cfg or "d2t" in tensors
                  or any(n.startswith(EAGLE3_LAYER) or "hidden_norm" in n for n in tensors))  # fmt: skip
        method = "eagle3" if eagle3 else "eagle"
    layer = _hf_layer(cfg, where)
    _flag(cfg, "logit_scale", where, 1.0, "vLLM scales the drafter's logits by it")
    fc_bias = _fc_bias(cfg, tensors, layer, method, declared, where, wfile)
    if method == "eagle":
        taps, Vd, TH, prefix = _eagle1_shape(cfg, layer, where)
    else:
        taps, Vd, TH, prefix = _eagle3_shape(cfg, tensors, layer, target, where, wfile)
    try:
        config = EagleConfig(method, layer, fc_bias=fc_bias, tap_layers=taps,
                             draft_vocab_size=Vd, target_hidden_size=TH,
                             base_model=str(base or ""))  # fmt: skip
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e
    why = _why(config, where)
    arrays = _hf_arrays(config, tensors, prefix, wfile, why)
    embedding = tensors.pop("embed_tokens.weight", None)
    check_consumed(tensors, wfile, f"{why}: vLLM would refuse or ignore them")
    return eagle_from_arrays(config, arrays, target, directory, embedding)
