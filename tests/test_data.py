"""Corpora, splits and prompts: `specjax.data`."""

import json

import pytest

from specjax import data
from specjax.io.tokenizer import train_bpe


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


def test_pair_cycle_corpus_needs_two_letters_of_context():
    """The synthetic source: every ordered pair of letters once a period (two letters fix the
    next), each letter followed by each of the six (one fixes nothing), documents that follow
    the cycle, and a byte-level BPE that makes every letter one token wherever it stands."""
    cycle, m = data.pair_cycle(6), 6
    assert len({(cycle[i - 1], cycle[i]) for i in range(m * m)}) == m * m
    for a in range(m):
        assert {cycle[(i + 1) % (m * m)] for i in range(m * m) if cycle[i] == a} == set(range(m))
    # a draft one offset off (the pending letter repeated) is right 1 time in 6
    assert sum(cycle[i] == cycle[i - 1] for i in range(m * m)) == m
    with pytest.raises(ValueError, match="m=1"):
        data.pair_cycle(1)

    ds = data.load_text_dataset(data.PAIR_CYCLE)
    assert ds.column_names == ["text", "category"] and set(ds["category"]) == {data.PAIR_CYCLE}
    texts = list(ds["text"])
    assert len(texts) > 200 and len(set(texts)) == len(texts)
    assert texts == list(data.load_text_dataset(data.PAIR_CYCLE)["text"])  # deterministic
    spelled = lambda ids: "".join(" " + data.PAIR_LETTERS[i] for i in ids)  # noqa: E731
    after = {(cycle[i - 2], cycle[i - 1]): cycle[i] for i in range(m * m)}
    for text in texts:
        x = [data.PAIR_LETTERS.index(c) for c in text[1::2]]
        assert text == spelled(x) and len(x) >= 48
        assert all(after[x[i - 2], x[i - 1]] == x[i] for i in range(2, len(x)))
    assert data.pair_cycle_text(3, 4) == spelled(cycle[3:7])

    tok = train_bpe(texts, vocab_size=512)
    ids = {c: tok.encode(" " + c) for c in data.PAIR_LETTERS}
    assert all(len(v) == 1 for v in ids.values())
    assert tok.encode(texts[0]) == [ids[c][0] for c in texts[0][1::2]]
    _, eval_ = data.split_dataset(ds, eval_fraction=0.05, seed=0)
    prompts = data.held_out_prompts(eval_, tok, num_prompts=8, prompt_tokens=16, seed=0)
    assert [c for c, _ in prompts] == [data.PAIR_CYCLE] * 8


def test_split_keeps_small_categories_in_both():
    from datasets import Dataset

    ds = Dataset.from_dict({"text": ["a", "b", "c"], "category": ["x", "x", "y"]})
    train, eval_ = data.split_dataset(ds, eval_fraction=0.01, seed=3)
    assert sorted(eval_["category"]) == ["x"]  # one x each side; the lone y stays in train
    assert sorted(train["category"]) == ["x", "y"]


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


def test_instruction_prompts_wrap_held_out_windows(small_ds, tok):
    _, eval_ = data.split_dataset(small_ds, eval_fraction=0.2, seed=0)
    windows = data.held_out_prompts(eval_, tok, num_prompts=3, prompt_tokens=16, seed=0)
    prompts = data.instruction_prompts(eval_, tok, num_prompts=3, prompt_tokens=16, seed=0)
    assert prompts == data.instruction_prompts(eval_, tok, 3, 16, seed=0)
    assert [c for c, _ in prompts] == [c for c, _ in windows]
    for j, ((_, ids), (_, window)) in enumerate(zip(prompts, windows, strict=True)):
        text = tok.decode(ids)
        # instruction j mod len(INSTRUCTIONS), its fixed words around the window's text
        instruction = data.INSTRUCTIONS[j % len(data.INSTRUCTIONS)]
        assert text.startswith(instruction.split("{")[0])
        assert ("{text}" in instruction) == (tok.decode(window).strip() in text)
    chat = tok.__class__(tok.backend, chat_template="<user>{{ messages[0]['content'] }}</user>")
    templated = data.instruction_prompts(eval_, chat, num_prompts=3, prompt_tokens=16, seed=0)
    for (_, plain), (_, wrapped) in zip(prompts, templated, strict=True):
        assert chat.decode(wrapped) == f"<user>{tok.decode(plain)}</user>"


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
