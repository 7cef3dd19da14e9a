"""ModelConfig: the frozen, hashable description of one decoder (a static jit argument).

One dataclass covers the Llama family (Llama, Qwen2, Qwen3, Mistral) and GPT-2. `from_hf`
reads a transformers `config.json` dict and refuses fields it cannot honour, naming them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from specjax.validate import check_int

LLAMA_FAMILY = ("llama", "qwen2", "qwen3", "mistral")
SUPPORTED_MODEL_TYPES = (*LLAMA_FAMILY, "gpt2")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture hyper-parameters. `model_type` selects the family and the HF names."""

    model_type: str = "llama"
    vocab_size: int = 256
    hidden_size: int = 64  # D
    num_layers: int = 2  # L
    num_heads: int = 4  # N
    num_kv_heads: int = 2  # K
    head_dim: int = 16  # H
    intermediate_size: int = 128  # F
    max_position_embeddings: int = 512
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # Hashable rope-scaling items, e.g. (("rope_type", "llama3"), ("factor", 8.0), ...).
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    # Bias on q/k/v (and o_proj, except Qwen2). None: the family's fixed choice (Qwen2 always has
    # q/k/v biases, Mistral never has any, Llama/Qwen3 default to none); resolved at construction.
    attention_bias: bool | None = None
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k
    # None: the family's choice, resolved at construction (GPT-2 always ties its LM head to
    # wte and uses a GELU, as transformers' GPT2LMHeadModel does; Llama-family: untied, SiLU).
    tie_word_embeddings: bool | None = None
    sliding_window: int | None = None  # Mistral: keys older than this are invisible
    hidden_act: str | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    dtype: str = "float32"  # parameter and activation dtype

    def __post_init__(self):
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise NotImplementedError(
                f"model_type={self.model_type!r} is not supported; supported: {SUPPORTED_MODEL_TYPES}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "max_position_embeddings",
        ):
            object.__setattr__(self, name, check_int(f"ModelConfig.{name}", getattr(self, name), 1))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads={self.num_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.model_type == "gpt2" and self.num_heads * self.head_dim != self.hidden_size:
            raise ValueError("gpt2 needs num_heads * head_dim == hidden_size")
        fixed = {"qwen2": True, "mistral": False}.get(self.model_type)
        if self.attention_bias is None:
            object.__setattr__(self, "attention_bias", bool(fixed))
        elif fixed is not None and self.attention_bias != fixed:
            raise ValueError(
                f"ModelConfig.attention_bias={self.attention_bias} is not possible for "
                f"model_type={self.model_type!r}: its attention always has "
                f"{'q/k/v biases' if fixed else 'no biases'} (transformers ignores the field)"
            )
        self._resolve_family_fields()
        if self.sliding_window is not None:
            window = check_int("ModelConfig.sliding_window", self.sliding_window, 1, note="or None")
            object.__setattr__(self, "sliding_window", window)

    def _resolve_family_fields(self) -> None:
        """tie_word_embeddings / hidden_act: None -> the family's; a contradiction is refused."""
        gpt2 = self.model_type == "gpt2"
        if self.tie_word_embeddings is None:
            object.__setattr__(self, "tie_word_embeddings", gpt2)
        elif gpt2 and not self.tie_word_embeddings:
            raise ValueError(
                "ModelConfig.tie_word_embeddings=False is not possible for model_type='gpt2': "
                "its LM head is always the transposed wte (transformers ties it)"
            )
        allowed = ("gelu_new", "gelu_pytorch_tanh", "gelu") if gpt2 else ("silu",)
        if self.hidden_act is None:
            object.__setattr__(self, "hidden_act", allowed[0])
        elif self.hidden_act not in allowed:
            raise ValueError(
                f"ModelConfig.hidden_act={self.hidden_act!r} is not possible for model_type="
                f"{self.model_type!r}: allowed {allowed}"
            )

    @property
    def is_llama(self) -> bool:
        return self.model_type in LLAMA_FAMILY

    @property
    def rope_dict(self) -> dict[str, Any] | None:
        return None if self.rope_scaling is None else dict(self.rope_scaling)

    def replace(self, **kw) -> ModelConfig:
        return dataclasses.replace(self, **kw)

    def num_params(self) -> int:
        """Parameter count (embeddings included once when tied)."""
        D, F, V, L = self.hidden_size, self.intermediate_size, self.vocab_size, self.num_layers
        N, K, H = self.num_heads, self.num_kv_heads, self.head_dim
        if self.model_type == "gpt2":
            per_layer = 4 * D + D * 3 * D + 3 * D + D * D + D + D * F + F + F * D + D
            return V * D + self.max_position_embeddings * D + L * per_layer + 2 * D
        attn = D * (N + 2 * K) * H + N * H * D
        if self.attention_bias:
            attn += (N + 2 * K) * H + (D if self.model_type != "qwen2" else 0)
        per_layer = attn + 3 * D * F + 2 * D + (2 * H if self.qk_norm else 0)
        head = 0 if self.tie_word_embeddings else V * D
        return V * D + L * per_layer + D + head


# ------------------------------------------------------------------ HF config.json -> ModelConfig

# Fields read (or knowingly ignored) per family; anything else that changes the math is refused.
_IGNORED = {
    "architectures",
    "model_type",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "initializer_range",
    "_name_or_path",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "tie_word_embeddings",
    "vocab_size",
    "max_position_embeddings",
    "attention_dropout",
    "pretraining_tp",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "id2label",
    "label2id",
    "problem_type",
    "is_encoder_decoder",
    "chunk_size_feed_forward",
    "tokenizer_class",
    "prefix",
    "task_specific_params",
    "use_return_dict",
    "max_window_layers",
    "layer_types",
    "use_sliding_window",
    "sliding_window",
    "embd_pdrop",
    "resid_pdrop",
    "attn_pdrop",
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "scale_attn_weights",
    "n_ctx",
    "mlp_bias",
    "head_dim",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "hidden_act",
    "activation_function",
    "attention_bias",
    "rms_norm_eps",
    "layer_norm_epsilon",
    "num_key_value_heads",
    "num_attention_heads",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "n_embd",
    "n_head",
    "n_layer",
    "n_positions",
    "n_inner",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "add_cross_attention",
    "chat_template",
    "keys_to_ignore_at_inference",
    "cross_attention_hidden_size",
    "tie_encoder_decoder",
    "decoder_start_token_id",
    "sep_token_id",
    "finetuning_task",
    "bad_words_ids",
    "begin_suppress_tokens",
    "quantization_config_unused",
    "qkv_bias",
    "model_name",
    "name_or_path",
}


def _eos_tuple(value) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def _rope_items(cfg: dict) -> tuple[tuple[str, Any], ...] | None:
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not rope:
        return None
    rope = {k: v for k, v in rope.items() if k != "rope_theta"}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise NotImplementedError(
            f"config field rope_scaling.rope_type={kind!r} is not supported; supported: default, llama3"
        )
    rope["rope_type"] = "llama3"
    rope.pop("type", None)
    return tuple(sorted(rope.items()))


def config_from_hf(cfg: dict) -> ModelConfig:
    """Translate a transformers `config.json` dict into a ModelConfig.

    Raises:
      NotImplementedError: unknown `model_type`, or a field whose value changes the math in a way
        specjax does not implement (named in the message).
    """
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise NotImplementedError(
            f"config.json model_type={model_type!r} is not supported; supported: {SUPPORTED_MODEL_TYPES}"
        )
    # A field specjax does not know may change the math (softcapping, MoE, quantisation, ...):
    # refuse it unless it is off (null, false, 0, empty). "_"-prefixed keys are HF bookkeeping.
    unknown = sorted(k for k, v in cfg.items() if v and k not in _IGNORED and k[:1] != "_")
    if unknown:
        raise NotImplementedError(
            f"config field(s) not supported for model_type={model_type!r}: "
            + ", ".join(f"{k}={cfg[k]!r}" for k in unknown)
        )
    common = dict(
        model_type=model_type,
        vocab_size=int(cfg["vocab_size"]),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=_eos_tuple(cfg.get("eos_token_id")),
        pad_token_id=cfg.get("pad_token_id"),
    )
    if model_type == "gpt2":
        D, N = int(cfg["n_embd"]), int(cfg["n_head"])
        act = cfg.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            raise NotImplementedError(f"config field activation_function={act!r} is not supported")
        for field in (
            "scale_attn_by_inverse_layer_idx",
            "reorder_and_upcast_attn",
            "add_cross_attention",
        ):
            if cfg.get(field):
                raise NotImplementedError(f"config field {field}={cfg[field]!r} is not supported")
        if cfg.get("scale_attn_weights") is False:
            raise NotImplementedError("config field scale_attn_weights=False is not supported")
        return ModelConfig(
            **common,
            hidden_size=D,
            num_layers=int(cfg["n_layer"]),
            num_heads=N,
            num_kv_heads=N,
            head_dim=D // N,
            intermediate_size=int(cfg.get("n_inner") or 4 * D),
            max_position_embeddings=int(cfg["n_positions"]),
            norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
            hidden_act=act,
            tie_word_embeddings=True,
        )
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise NotImplementedError(
            f"config field hidden_act={act!r} is not supported; supported: silu"
        )
    if cfg.get("mlp_bias"):
        raise NotImplementedError("config field mlp_bias=True is not supported")
    if cfg.get("pretraining_tp", 1) not in (1, None):
        raise NotImplementedError(
            f"config field pretraining_tp={cfg['pretraining_tp']} is not supported"
        )
    D, N = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    sliding = None
    if model_type == "mistral":
        sliding = cfg.get("sliding_window")
    elif cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        raise NotImplementedError(
            f"config field use_sliding_window=True is not supported for model_type={model_type!r}"
        )
    rope_theta = cfg.get("rope_theta")
    if rope_theta is None and isinstance(cfg.get("rope_parameters"), dict):
        rope_theta = cfg["rope_parameters"].get("rope_theta")
    return ModelConfig(
        **common,
        hidden_size=D,
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=N,
        num_kv_heads=int(cfg.get("num_key_value_heads") or N),
        head_dim=int(cfg.get("head_dim") or D // N),
        intermediate_size=int(cfg["intermediate_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope_theta if rope_theta is not None else 10000.0),
        rope_scaling=_rope_items(cfg),
        # transformers ignores attention_bias for Qwen2 (always biased) and Mistral (never).
        attention_bias=(
            None if model_type in ("qwen2", "mistral") else bool(cfg.get("attention_bias", False))
        ),
        qk_norm=model_type == "qwen3",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_window=None if sliding is None else int(sliding),
    )


def config_to_hf(config: ModelConfig) -> dict:
    """The transformers `config.json` dict for `config` (inverse of `config_from_hf`)."""
    eos = list(config.eos_token_ids)
    common = dict(
        model_type=config.model_type,
        vocab_size=config.vocab_size,
        bos_token_id=config.bos_token_id,
        eos_token_id=eos[0] if len(eos) == 1 else (eos or None),
        pad_token_id=config.pad_token_id,
        tie_word_embeddings=config.tie_word_embeddings,
        torch_dtype=config.dtype,
    )
    if config.model_type == "gpt2":
        return dict(
            **common,
            architectures=["GPT2LMHeadModel"],
            n_embd=config.hidden_size,
            n_layer=config.num_layers,
            n_head=config.num_heads,
            n_inner=config.intermediate_size,
            n_positions=config.max_position_embeddings,
            layer_norm_epsilon=config.norm_eps,
            activation_function=config.hidden_act,
        )
    arch = {
        "llama": "LlamaForCausalLM",
        "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM",
        "mistral": "MistralForCausalLM",
    }[config.model_type]
    out = dict(
        **common,
        architectures=[arch],
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.norm_eps,
        rope_theta=config.rope_theta,
        hidden_act="silu",
        rope_scaling=config.rope_dict,
    )
    if config.model_type in ("llama", "qwen3"):
        out["attention_bias"] = config.attention_bias
    if config.model_type == "mistral":
        out["sliding_window"] = config.sliding_window
    return out


def rope_inv_freq(config: ModelConfig):
    """Inverse RoPE frequencies [H/2] as float64 numpy (host side), with llama3 scaling."""
    import numpy as np

    H = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, H, 2, dtype=np.float64) / H))
    rope = config.rope_dict
    if rope is None:
        return inv
    factor = float(rope["factor"])
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_len = float(rope["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)
