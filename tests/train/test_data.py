"""Corpora, splits, packing, resumable batches and held-out prompts."""

import itertools
import json

import numpy as np
import pytest

from specjax.io.tokenizer import train_bpe
from specjax.train import data


@pytest.fixture(scope="module")
def small_ds():
    return data.load_text_dataset("embedded", max_documents=40, max_chars=80_000)


@pytest.fixture(scope="module")
def tok(small_ds):
    return train_bpe(small_ds["text"], vocab_size=512)


def test_embedded_corpus_files():
    files = data.embedded_corpus_files()
    code, prose = files[data.CODE], files[data.PROSE]
    assert len(code) > 100 and all(p.suffix == ".py" and p.is_file() for p in code)
    assert any(p.name == "os.py" for p in code)
    excluded = {"site-packages", "test", "tests", "idlelib", "__pycache__"}
    assert not any(excluded & set(p.parts) for p in code)
    assert code == sorted(code, key=lambda p: p.as_posix())
    assert [p.name for p in prose] == ["topics.py"] and prose[0].parent.name == "pydoc_data"


def test_embedded_dataset_has_both_categories():
    ds = data.load_text_dataset()
    assert ds.column_names == ["text", "category"]
    categories = ds["category"]
    assert categories.count(data.CODE) > 100 and categories.count(data.PROSE) > 20
    texts = list(ds["text"])
    assert all(t.strip() for t in texts) and len(set(texts)) == len(texts)
    prose = [t for t, c in zip(texts, categories, strict=True) if c == data.PROSE]
    assert any('The "assert" statement' in t for t in prose)


def test_limits_apply_per_category():
    ds = data.load_text_dataset(max_documents=3, max_chars=1000)
    for category in (data.CODE, data.PROSE):
        texts = [t for t, c in zip(ds["text"], ds["category"], strict=True) if c == category]
        assert 1 <= len(texts) <= 3 and sum(map(len, texts)) <= 1000
    with pytest.raises(ValueError, match="max_chars=0"):
        data.load_text_dataset(max_chars=0)


def test_split_deterministic_disjoint_stratified():
    ds = data.load_text_dataset()
    train, eval_ = data.split_dataset(ds, eval_fraction=0.1, seed=0)
    train2, eval2 = data.split_dataset(ds, eval_fraction=0.1, seed=0)
    assert list(eval_["text"]) == list(eval2["text"])
    assert list(train["text"]) == list(train2["text"])
    assert len(train) + len(eval_) == len(ds)
    assert not set(train["text"]) & set(eval_["text"])
    for category in (data.CODE, data.PROSE):
        assert category in train["category"] and category in eval_["category"]
    _, eval_other = data.split_dataset(ds, eval_fraction=0.1, seed=1)
    assert set(eval_other["text"]) != set(eval_["text"])
    with pytest.raises(ValueError, match="eval_fraction=1.0"):
        data.split_dataset(ds, eval_fraction=1.0, seed=0)


def test_split_keeps_small_categories_in_both():
    from datasets import Dataset

    ds = Dataset.from_dict({"text": ["a", "b", "c"], "category": ["x", "x", "y"]})
    train, eval_ = data.split_dataset(ds, eval_fraction=0.01, seed=3)
    assert sorted(eval_["category"]) == ["x"]  # one x each side; the lone y stays in train
    assert sorted(train["category"]) == ["x", "y"]


def test_pack_shapes_and_values():
    docs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11]]
    packed = data.pack(docs, seq_len=4, eos_id=0)
    stream = np.array([1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 10, 11, 0])  # 14 tokens
    assert packed.shape == (3, 5) and packed.dtype == np.int32  # (14 - 1) // 4 rows
    for i, row in enumerate(packed):
        np.testing.assert_array_equal(row, stream[i * 4 : i * 4 + 5])
    no_eos = data.pack(docs, seq_len=2)
    np.testing.assert_array_equal(no_eos[-1], [9, 10, 11])
    with pytest.raises(ValueError, match="cannot fill one row"):
        data.pack([[1, 2]], seq_len=4, eos_id=0)


def test_pack_from_tokenizer(small_ds, tok):
    streams = data.tokenize(small_ds["text"], tok)
    assert streams[0].tolist() == tok.encode(small_ds["text"][0])
    packed = data.pack(streams, seq_len=32, eos_id=tok.eos_token_id)
    flat = np.concatenate([np.r_[s, tok.eos_token_id] for s in streams])
    assert packed.shape == ((len(flat) - 1) // 32, 33)
    np.testing.assert_array_equal(packed[7], flat[7 * 32 : 7 * 32 + 33])


def _take(iterator, n):
    return list(itertools.islice(iterator, n))


def test_batches_resume_exactly():
    packed = np.arange(23 * 9, dtype=np.int32).reshape(23, 9)  # 23 rows, T = 8
    per_epoch = data.steps_per_epoch(packed, 5)  # 4: the 3 leftover rows are dropped
    full = _take(data.batches(packed, 5, seed=7), 3 * per_epoch + 2)
    assert [s for s, _ in full] == list(range(len(full)))
    for k in (0, 1, 3, 4, 9):
        resumed = _take(data.batches(packed, 5, seed=7, start_step=k), len(full) - k)
        for (s1, b1), (s2, b2) in zip(full[k:], resumed, strict=True):
            assert s1 == s2
            np.testing.assert_array_equal(b1["inputs"], b2["inputs"])
            np.testing.assert_array_equal(b1["targets"], b2["targets"])
            np.testing.assert_array_equal(b1["inputs"], data.batch_at(packed, 5, 7, s1)["inputs"])
    _, batch = full[0]
    assert batch["inputs"].shape == batch["targets"].shape == (5, 8)
    np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
    epoch0 = np.concatenate([b["inputs"][:, 0] for _, b in full[:per_epoch]]) // 9
    assert len(set(epoch0)) == 20  # an epoch visits distinct rows
    epoch1 = np.concatenate([b["inputs"][:, 0] for _, b in full[per_epoch : 2 * per_epoch]]) // 9
    assert not np.array_equal(epoch0, epoch1)  # reshuffled each epoch
    one_epoch = list(data.batch_iterator(packed, 5, seed=7, epoch=1))
    assert len(one_epoch) == per_epoch
    np.testing.assert_array_equal(one_epoch[0]["inputs"], full[per_epoch][1]["inputs"])
    other_seed = next(data.batches(packed, 5, seed=8))[1]
    assert not np.array_equal(other_seed["inputs"], batch["inputs"])
    with pytest.raises(ValueError, match="batch_size=24"):
        data.steps_per_epoch(packed, 24)


def test_held_out_prompts_deterministic(small_ds, tok):
    _, eval_ = data.split_dataset(small_ds, eval_fraction=0.2, seed=0)
    prompts = data.held_out_prompts(eval_, tok, num_prompts=3, prompt_tokens=16, seed=0)
    again = data.held_out_prompts(eval_, tok, num_prompts=3, prompt_tokens=16, seed=0)
    assert prompts == again
    assert [c for c, _ in prompts] == [data.CODE] * 3 + [data.PROSE] * 3
    assert all(len(ids) == 16 for _, ids in prompts)
    eval_docs = list(zip(eval_["text"], eval_["category"], strict=True))
    for category, ids in prompts:  # each prompt is a window of an eval document
        assert any(_contains(tok.encode(t), ids) for t, c in eval_docs if c == category)
    other = data.held_out_prompts(eval_, tok, num_prompts=3, prompt_tokens=16, seed=1)
    assert other != prompts


def _contains(doc, window):
    n = len(window)
    return any(doc[i : i + n] == window for i in range(len(doc) - n + 1))


def test_load_local_jsonl_and_txt(tmp_path):
    jsonl = tmp_path / "docs.jsonl"
    rows = [{"body": "first doc", "kind": "a"}, {"body": "second ü doc", "kind": "b"}]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = data.load_text_dataset(
        jsonl, text_field="body", category_field="kind", cache_dir=tmp_path / "cache"
    )
    assert list(ds["text"]) == ["first doc", "second ü doc"]
    assert list(ds["category"]) == ["a", "b"]
    ds = data.load_text_dataset(jsonl, text_field="body", cache_dir=tmp_path / "cache")
    assert list(ds["category"]) == ["docs", "docs"]  # no "category" column: the file stem
    ds = data.load_text_dataset(
        jsonl, text_field="body", category_field="kind", category="all", cache_dir=tmp_path / "c"
    )
    assert list(ds["category"]) == ["all", "all"]
    with pytest.raises(ValueError, match="text_field='text'"):
        data.load_text_dataset(jsonl, cache_dir=tmp_path / "cache")

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "one.txt").write_text("line one\nline two\n")
    (corpus / "sub" / "two.txt").write_text("naïve café — 日本語 🙂\n")
    (corpus / "skip.bin").write_bytes(b"\xff\x00")
    ds = data.load_text_dataset(corpus, cache_dir=tmp_path / "cache")
    assert sorted(ds["text"]) == ["line one\nline two\n", "naïve café — 日本語 🙂\n"]
    assert set(ds["category"]) == {"corpus"}
    ds = data.load_text_dataset(
        corpus / "one.txt", category="shakespeare", cache_dir=tmp_path / "cache", max_chars=8
    )
    assert list(ds["text"]) == ["line one"] and list(ds["category"]) == ["shakespeare"]

    play = tmp_path / "play.txt"
    play.write_text("First Citizen:\nSpeak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\nYou are.\n")
    ds = data.load_text_dataset(play, sample_by="paragraph", cache_dir=tmp_path / "cache")
    assert len(ds) == 3 and ds[1]["text"].startswith("All:")
    train, eval_ = data.split_dataset(ds, eval_fraction=0.3, seed=0)
    assert len(train) == 2 and len(eval_) == 1
    with pytest.raises(ValueError, match="sample_by='page'"):
        data.load_text_dataset(play, sample_by="page")


def test_missing_local_file_and_hub_message(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        data.load_text_dataset(tmp_path / "missing.txt")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/corpus' on the Hub")

    monkeypatch.setattr(data.datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match=r"'someone/corpus'.*network.*embedded"):
        data.load_text_dataset("someone/corpus")
