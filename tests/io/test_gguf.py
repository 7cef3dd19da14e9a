"""GGUF import: small files written here with the gguf writer (random weights, several quant
types), read back by specjax and by transformers' own GGUF loader (the oracle: its own
dequantizers, permutation and tokenizer conversion)."""

from __future__ import annotations

import json

import gguf
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
import torch
import transformers

import specjax as sj
from specjax.io import gguf_file
from specjax.io.tokenizer import Tokenizer, train_bpe

TEXTS = [
    "Hello world! How are you today?",
    "def square(x):\n    return x * x  # the square\n",
    "  two leading spaces, ünïcödé and 日本語, numbers 1234567",
    "<|im_start|>user\nhi there<|im_end|>\n",
]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def bpe():
    corpus = [t * 3 for t in TEXTS] + ["the quick brown fox jumps over the lazy dog " * 20]
    tok = train_bpe(corpus, 400, special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    tok.chat_template = CHAT
    return tok


def _model(bpe, model_type="llama", hidden=64, inter=128, **kw):
    config = sj.ModelConfig(
        model_type=model_type,
        vocab_size=bpe.vocab_size,
        hidden_size=hidden,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        # Qwen3 heads are wider than hidden/heads (and transformers' GGUF reader assumes 128)
        head_dim=128 if model_type == "qwen3" else hidden // 4,
        intermediate_size=inter,
        max_position_embeddings=64,
        rope_theta=50000.0,
        eos_token_ids=tuple(bpe.eos_token_ids),
        qk_norm=model_type == "qwen3",
        **kw,
    )
    decoder = sj.Decoder(config, seed=3)
    return sj.Model(decoder, bpe, "tiny")


def _logits(model, tokens) -> np.ndarray:
    tokens = jnp.asarray(tokens, jnp.int32)
    cache = sj.KVCache.for_model(model.config, tokens.shape[0], 32)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return np.asarray(model.module(tokens, positions, cache).logits)


def _hf_logits(path, tokens) -> np.ndarray:
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        return ref(torch.as_tensor(np.asarray(tokens), dtype=torch.long)).logits.numpy()


TOKENS = np.random.default_rng(0).integers(0, 300, (2, 10))


@pytest.mark.parametrize(
    "model_type,tied",
    [("llama", True), ("llama", False), ("qwen2", False), ("qwen3", True)],
)
def test_f32_round_trip_and_transformers(bpe, tmp_path, model_type, tied):
    model = _model(bpe, model_type, tie_word_embeddings=tied)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf")
    loaded = sj.load_model(path)
    assert loaded.config.replace(dtype="float32") == model.config.replace(
        bos_token_id=loaded.config.bos_token_id, pad_token_id=loaded.config.pad_token_id
    )
    ours = _logits(loaded, TOKENS)
    np.testing.assert_allclose(ours, _logits(model, TOKENS), rtol=1e-5, atol=1e-5)
    # transformers un-permutes Q/K and builds the config by its own code
    np.testing.assert_allclose(ours, _hf_logits(path, TOKENS), rtol=1e-4, atol=1e-4)


def test_the_qk_permutation_is_undone(bpe, tmp_path):
    """Q/K rows in the file are llama.cpp's interleaved order: reading them unpermuted would
    change the logits (the negative control for the round trip above)."""
    model = _model(bpe)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf")
    contents = gguf_file.read_gguf(path)
    name = "model.layers.0.self_attn.q_proj.weight"
    raw = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}["blk.0.attn_q.weight"]
    on_disk = np.asarray(raw.data).reshape(contents.tensors[name].shape)
    assert not np.allclose(on_disk, contents.tensors[name])
    np.testing.assert_array_equal(gguf_file.unpermute_qk(on_disk, 4), contents.tensors[name])
    np.testing.assert_array_equal(gguf_file.permute_qk(contents.tensors[name], 4), on_disk)


@pytest.mark.parametrize("dtype", ["F16", "BF16", "Q8_0", "Q5_1", "Q4_0", "Q4_1"])
def test_quantized_logits_match_transformers(bpe, tmp_path, dtype):
    model = _model(bpe)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf", dtype=dtype)
    loaded = sj.load_model(path)
    types = gguf_file.read_gguf(path, load_tokenizer=False).quant_types
    assert types["model.layers.0.mlp.up_proj.weight"] == dtype
    assert types["model.norm.weight"] == "F32"
    ours = _logits(loaded, TOKENS)
    np.testing.assert_allclose(ours, _hf_logits(path, TOKENS), rtol=2e-4, atol=2e-4)
    # the weights really are quantized: the logits moved off the dense model's
    drift = np.abs(ours - _logits(model, TOKENS)).max()
    assert drift > (1e-4 if dtype in ("F16", "BF16") else 1e-3), drift


def _k_quant_bytes(shape, kind, rng) -> np.ndarray:
    """Random K-quant blocks with small finite f16 scales (the gguf package cannot quantize
    K-quants, only dequantize them)."""
    block, size = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, kind)]
    rows, cols = shape
    data = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    scale = np.full((rows, cols // block), 0.01, np.float16).view(np.uint8).reshape(rows, -1, 2)
    if kind == "Q6_K":  # d is the block's last f16
        data[..., -2:] = scale
    else:  # Q4_K / Q5_K: d then dmin lead the block
        data[..., 0:2] = scale
        data[..., 2:4] = scale
    return data.reshape(rows, -1)


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_k_quants_dequantize_like_transformers(bpe, tmp_path, kind):
    model = _model(bpe, hidden=256, inter=256)
    rng = np.random.default_rng(1)
    raw = {
        f"model.layers.{i}.mlp.{p}.weight": (_k_quant_bytes((256, 256), kind, rng), kind)
        for i in range(2)
        for p in ("gate_proj", "up_proj", "down_proj")
    }
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf", raw=raw)
    loaded = sj.load_model(path)
    assert gguf_file.read_gguf(path).quant_types["model.layers.1.mlp.up_proj.weight"] == kind
    np.testing.assert_allclose(
        _logits(loaded, TOKENS), _hf_logits(path, TOKENS), rtol=2e-4, atol=2e-4
    )


def test_tokenizer_matches_transformers_conversion(bpe, tmp_path):
    model = _model(bpe)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf")
    ours = sj.load_model(path).tokenizer
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ids == bpe.encode(text), text
        assert ours.decode(ids, skip_special_tokens=False) == text
    assert ours.eos_token_ids == bpe.eos_token_ids
    messages = [{"role": "user", "content": "What is 2+2?"}]
    text = ours.apply_chat_template(messages)
    assert text == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert ours.apply_chat_template(messages, tokenize=True) == ours.encode(text)
    assert ours.chat("What is 2+2?") == text


def _sentencepiece_gguf(path, tokens, scores, types, *, add_space_prefix=True):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_space_prefix(add_space_prefix)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_sentencepiece_tokenizer_matches_transformers_conversion(tmp_path):
    """A llama-style SentencePiece vocabulary (scores, byte tokens, no merges in the file)."""
    pieces = ["▁the", "▁qu", "ick", "▁b", "row", "n", "▁fox", "▁", "t", "h", "e", "q", "u", "i"]
    pieces += ["c", "k", "b", "r", "o", "w", "f", "x", "▁t", "▁th", "qu", "ro", "ow", "▁f", "fo"]
    pieces += ["▁fo", "ic", "br", "▁br", "▁bro", "▁brow", "▁brown", "▁q", "s", "▁s"]
    pieces = list(dict.fromkeys(pieces))
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    path = tmp_path / "sp.gguf"
    _sentencepiece_gguf(path, tokens, scores, types)
    reader = gguf.GGUFReader(str(path))
    ours = gguf_file._tokenizer(reader, gguf_file._scalar_metadata(reader))
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in ("the quick brown fox", "the quicks brow", "ünï 日", "thequick  brown"):
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == text
    assert ours.eos_token_ids == (2,) and ours.bos_token_id == 1
    # the dummy prefix, then byte fallback: <0xC3><0xBC>
    assert ours.encode("ü") == [ours.token_to_id("\u2581"), 3 + 0xC3, 3 + 0xBC]


def test_a_directory_holding_one_gguf_loads(bpe, tmp_path):
    model = _model(bpe)
    gguf_file.save_gguf(model, tmp_path / "m.gguf")
    assert sj.load_model(tmp_path).config.hidden_size == 64
    gguf_file.save_gguf(model, tmp_path / "other.gguf")
    with pytest.raises(ValueError, match="holds 2 GGUF files"):
        sj.load_model(tmp_path)


def test_truncated_file_is_refused(bpe, tmp_path):
    path = gguf_file.save_gguf(_model(bpe), tmp_path / "m.gguf")
    data = path.read_bytes()
    (tmp_path / "cut").mkdir()
    cut = tmp_path / "cut" / "m.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated|corrupt"):
        sj.load_model(cut)
    (tmp_path / "cut" / "m.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="cannot read GGUF file"):
        sj.load_model(cut)


def test_unknown_architecture_is_refused(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "mamba")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(NotImplementedError, match="architecture='mamba'.*supported"):
        sj.load_model(tmp_path / "x.gguf")


def test_unsupported_quant_type_is_refused(bpe, tmp_path, monkeypatch):
    model = _model(bpe)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf", dtype="Q8_0")

    def refuse(data, qtype):
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            raise NotImplementedError("Dequantization for Q8_0 is not yet implemented")
        return np.asarray(data).view(np.float32)

    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    with pytest.raises(NotImplementedError, match="stored as Q8_0.*supported"):
        sj.load_model(path)


def test_rope_scaling_is_refused(bpe, tmp_path):
    model = _model(bpe)
    path = gguf_file.save_gguf(model, tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(path))
    meta = gguf_file._scalar_metadata(reader)
    meta["llama.rope.scaling.type"] = "yarn"
    with pytest.raises(NotImplementedError, match="rope scaling 'yarn'"):
        gguf_file._config(meta, "llama", {t.name for t in reader.tensors}, 300)


def test_save_gguf_refuses_what_it_cannot_write(bpe, tmp_path):
    with pytest.raises(ValueError, match="dtype='Q4_K'.*supported"):
        gguf_file.save_gguf(_model(bpe), tmp_path / "m.gguf", dtype="Q4_K")
    gpt2 = sj.Model(sj.Decoder(sj.ModelConfig(model_type="gpt2", vocab_size=300), seed=0), bpe, "")
    with pytest.raises(NotImplementedError, match="model_type='gpt2'"):
        gguf_file.save_gguf(gpt2, tmp_path / "g.gguf")


def test_chat_template_survives_save_hf(bpe, tmp_path):
    model = _model(bpe)
    sj.save_hf(model, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT
    back = Tokenizer.from_dir(tmp_path / "hf")
    assert back.chat("hi") == bpe.chat("hi")
    plain = Tokenizer(tokenizers.Tokenizer(tokenizers.models.BPE()))
    with pytest.raises(ValueError, match="no chat template"):
        plain.chat("hi")
    with pytest.raises(ValueError, match="list of"):
        bpe.apply_chat_template("hi")


def test_written_pre_tokenizer_is_a_name_llama_cpp_knows(bpe, tmp_path):
    """llama.cpp refuses `tokenizer.ggml.pre = "gpt2"` ("unknown pre-tokenizer type"): GPT-2's
    byte-level split is written "gpt-2", Llama-3's regex "llama-bpe", and a split it has no
    name for is refused by name rather than written as something llama.cpp tokenizes
    differently."""
    from tokenizers import pre_tokenizers

    def pre_of(model):
        path = gguf_file.save_gguf(model, tmp_path / "m.gguf")
        field = gguf.GGUFReader(str(path)).fields["tokenizer.ggml.pre"]
        return bytes(field.parts[field.data[0]]).decode()

    model = _model(bpe)
    assert pre_of(model) == "gpt-2"
    backend = tokenizers.Tokenizer.from_str(bpe.backend.to_str())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for regex, name in ((gguf_file._LLAMA3_SPLIT, "llama-bpe"), (r"\s+|\S+", None)):
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(tokenizers.Regex(regex), behavior="isolated"), byte_level]
        )
        tok = Tokenizer(backend, eos_token_ids=bpe.eos_token_id)
        other = sj.Model(model.module, tok, "")
        if name is None:
            with pytest.raises(NotImplementedError, match="no llama.cpp pre-tokenizer name"):
                pre_of(other)
        else:
            assert pre_of(other) == name
