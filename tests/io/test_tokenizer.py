"""Tokenizer wrapper, byte-level BPE training, streaming detokenisation, HF interop."""

import json

import pytest
from tokenizers.decoders import DecodeStream

from specjax.data import load_text_dataset
from specjax.io.tokenizer import EOS_TOKEN, Tokenizer, train_bpe

UNICODE = "naïve café — 日本語 🙂"
SAMPLES = [
    UNICODE,
    "def f(x):\n    return x ** 2  # squared\n",
    "  leading and trailing spaces  \n\n\ttab",
    "emoji family 👨‍👩‍👧 and combining e\u0301 and CJK 漢字かな",
    "",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    ds = load_text_dataset("embedded", max_chars=60_000)
    return train_bpe(ds["text"], vocab_size=600)


def test_train_bpe_specials_and_vocab(tok):
    assert tok.vocab_size == 600
    assert tok.token_to_id(EOS_TOKEN) == 0
    assert tok.eos_token_ids == (0,) and tok.eos_token_id == 0
    assert tok.bos_token_id is None and tok.pad_token_id is None
    assert tok.id_to_token(0) == EOS_TOKEN
    vocab = tok.vocab_strings()
    assert len(vocab.tokens) == 600 and vocab.tokens[0] == EOS_TOKEN
    assert vocab.special == frozenset({EOS_TOKEN})
    assert all(isinstance(t, str) for t in vocab.tokens)


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_exact(tok, text):
    ids = tok.encode(text)
    assert EOS_TOKEN not in text and 0 not in ids  # no special tokens added
    assert tok.decode(ids) == text


def test_encode_batch_matches_encode(tok):
    assert tok.encode_batch(SAMPLES) == [tok.encode(t) for t in SAMPLES]


def test_decode_special_tokens(tok):
    ids = tok.encode("ab") + [tok.eos_token_id]
    assert tok.decode(ids) == "ab"
    assert tok.decode(ids, skip_special_tokens=False) == "ab" + EOS_TOKEN


def _stream(tok, ids, prompt=()) -> list[str | None]:
    stream = DecodeStream(list(prompt), skip_special_tokens=True)
    return [stream.step(tok.backend, i) for i in ids]


@pytest.mark.parametrize("text", SAMPLES)
def test_decode_stream_concatenation_equals_decode(tok, text):
    # Streaming is the `tokenizers` library's own DecodeStream over `Tokenizer.backend`.
    ids = tok.encode(text)
    pieces = _stream(tok, ids)
    assert "".join(p for p in pieces if p is not None) == tok.decode(ids) == text
    assert all(p is None or "\ufffd" not in p for p in pieces)


def test_decode_stream_holds_back_split_characters_and_skips_prompt(tok):
    # The emoji is four UTF-8 bytes; a 600-entry BPE spells it with several byte tokens.
    ids = tok.encode("🙂")
    assert len(ids) > 1
    assert _stream(tok, ids) == [None] * (len(ids) - 1) + ["🙂"]
    prompt, completion = tok.encode("日本"), tok.encode("語 🙂 ok")
    pieces = _stream(tok, completion, prompt)
    assert "".join(p for p in pieces if p is not None) == tok.decode(completion)


def test_save_and_reload(tok, tmp_path):
    tok.save(tmp_path)
    for loaded in (Tokenizer.from_file(tmp_path / "tokenizer.json"), Tokenizer.from_dir(tmp_path)):
        for text in SAMPLES:
            assert loaded.encode(text) == tok.encode(text)
        assert loaded.eos_token_ids == tok.eos_token_ids
        assert loaded.vocab_strings() == tok.vocab_strings()


def test_transformers_loads_saved_dir(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    for text in SAMPLES:
        ids = tok.encode(text)
        assert hf.encode(text, add_special_tokens=False) == ids
        assert hf.decode(ids) == text
    assert hf.eos_token_id == tok.eos_token_id
    assert len(hf) == tok.vocab_size


def test_from_dir_reads_hf_configs(tok, tmp_path):
    tok.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": EOS_TOKEN}, "bos_token": "a", "pad_token": None})
    )
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [5, 0], "pad_token_id": 7}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 9}))
    loaded = Tokenizer.from_dir(tmp_path)
    assert loaded.eos_token_ids == (0, 5, 9)
    assert loaded.bos_token_id == tok.token_to_id("a")
    assert loaded.pad_token_id == 7


def test_special_ids_settable(tok):
    t = Tokenizer(tok.backend)
    t.eos_token_ids = [3, 4, 3]
    assert t.eos_token_ids == (3, 4) and t.eos_token_id == 3
    t.eos_token_ids = 2
    assert t.eos_token_ids == (2,)
    t.pad_token_id = 1
    assert t.pad_token_id == 1
    with pytest.raises(ValueError, match="pad_token_id=600"):
        t.pad_token_id = 600


def test_missing_file_names_path(tmp_path):
    missing = tmp_path / "nope" / "tokenizer.json"
    with pytest.raises(FileNotFoundError, match="nope"):
        Tokenizer.from_file(missing)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.from_dir(tmp_path)


def test_garbage_file_names_file(tmp_path):
    garbage = tmp_path / "garbage.json"
    garbage.write_text("this is { not a tokenizer")
    with pytest.raises(ValueError, match="garbage.json"):
        Tokenizer.from_file(garbage)


@pytest.mark.parametrize("vocab_size", [0, 100, 256])
def test_vocab_size_too_small(vocab_size):
    with pytest.raises(ValueError, match=rf"vocab_size={vocab_size}.*>= 257"):
        train_bpe(["hello world"], vocab_size=vocab_size)


def test_vocab_size_counts_specials():
    with pytest.raises(ValueError, match=">= 258"):
        train_bpe(["hello"], vocab_size=257, special_tokens=("<a>", "<b>"))
    small = train_bpe(["hello"], vocab_size=257)  # the minimum: bytes plus eos, no merges
    assert small.vocab_size == 257 and small.decode(small.encode(UNICODE)) == UNICODE
