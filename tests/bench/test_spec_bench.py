"""Spec-Bench as a workload: the vendored questions, chat-templated prompts by category."""

import collections

import pytest

from specjax.bench import default_config, spec_bench, workload
from specjax.io.tokenizer import train_bpe

CHAT = "<|user|>{{ messages[0]['content'] }}<|end|>{% if add_generation_prompt %}<|bot|>{% endif %}"


@pytest.fixture(scope="module")
def tok():
    texts = [q["turns"][0] for q in spec_bench.questions()[:200]]
    t = train_bpe(texts, 600, special_tokens=("<|endoftext|>", "<|user|>", "<|end|>", "<|bot|>"))
    t.chat_template = CHAT
    return t


def test_the_vendored_file_is_spec_bench():
    qs = spec_bench.questions()
    counts = collections.Counter(q["category"] for q in qs)
    assert len(qs) == 480 and set(counts) == set(spec_bench.CATEGORIES)
    assert all(counts[c] == 10 for c in spec_bench.MT_BENCH)
    assert all(counts[c] == 80 for c in spec_bench.CATEGORIES[8:])
    assert all(len(q["turns"]) == 2 for q in qs if q["category"] in spec_bench.MT_BENCH)
    assert "Apache License" in (spec_bench.QUESTIONS.parent / "LICENSE").read_text()


def test_prompts_are_chat_templated_first_turns_by_category(tok):
    got = spec_bench.prompts_by_category(tok, 3, 400, seed=0, categories=("coding", "qa"))
    assert sorted(got) == ["coding", "qa"] and all(len(v) == 3 for v in got.values())
    texts = [tok.decode(ids, skip_special_tokens=False) for ids in got["coding"]]
    coding = {q["turns"][0] for q in spec_bench.questions() if q["category"] == "coding"}
    for text in texts:
        assert text.startswith("<|user|>") and text.endswith("<|end|><|bot|>")
        assert text[len("<|user|>") : -len("<|end|><|bot|>")] in coding
    assert len(set(texts)) == 3
    # seeded: the same seed gives the same prompts, another seed others
    again = spec_bench.prompts_by_category(tok, 3, 400, seed=0, categories=("coding",))
    assert again["coding"] == got["coding"]
    other = spec_bench.prompts_by_category(tok, 3, 400, seed=1, categories=("coding",))
    assert other["coding"] != got["coding"]


def test_long_questions_are_passed_over_with_a_warning(tok, caplog):
    got = spec_bench.prompts_by_category(tok, 80, 120, categories=("summarization", "math"))
    assert all(len(ids) <= 120 for v in got.values() for ids in v)
    assert "summarization" not in got or len(got["summarization"]) < 80
    assert "longer than 120 tokens" in caplog.text


def test_the_bench_workload_reads_spec_bench(tok):
    cfg = default_config()
    cfg.data.source = "spec_bench"
    cfg.data.categories = ("writing", "translation")
    cfg.num_prompts, cfg.prompt_tokens = 2, 300
    got = workload.prompts_by_category(cfg, tok)
    assert sorted(got) == ["translation", "writing"] and all(len(v) == 2 for v in got.values())


def test_unknown_categories_are_refused():
    with pytest.raises(ValueError, match=r"\['poetry'\] do not exist"):
        spec_bench.prompts_by_category(None, 1, 10, categories=("poetry",))
