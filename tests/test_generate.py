"""The autoregressive engine: batch independence, stopping, budgets, compile count, streaming, text.

Everything runs on conftest's tiny Llama (V=32). Shapes are chosen so that most calls share a
few compiled programs: a batch of 4 ragged prompts (bucket B=4, Tp=16) with 20 new tokens
(O=32), the same rows alone (B=1), and budgets <= 16 (O=16).
"""

from __future__ import annotations

import itertools
import logging

import jax
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.decoding import engine
from specjax.io.tokenizer import train_bpe

NEW = 20
SAMPLED = sj.SamplingParams(temperature=0.9, top_k=12, top_p=0.95)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(1)
    return [rng.integers(0, 32, n).tolist() for n in (5, 9, 3, 12)]


@pytest.fixture(scope="module")
def reference(target, prompts):
    """Greedy continuations of the ragged batch with stopping disabled: [4][NEW] ids."""
    out = sj.generate(target, prompts, max_new_tokens=NEW, stop_token_ids=[])
    assert [len(t) for t in out.tokens] == [NEW] * 4
    return out.tokens


def truncate_at_stop(tokens, stop_ids):
    """A row's tokens up to and including the first stop id."""
    for i, t in enumerate(tokens):
        if t in stop_ids:
            return tokens[: i + 1]
    return tokens


@pytest.fixture(scope="module")
def stop_ids(reference):
    """Two ids whose first occurrences stop the rows at several different positions."""
    seen = sorted({t for row in reference for t in row[1:]})

    def spread(ids):
        lengths = [len(truncate_at_stop(row, ids)) for row in reference]
        return len({n for n in lengths if n < NEW}), -min(lengths)

    best = max(itertools.combinations(seen, 2), key=spread)
    assert spread(best)[0] >= 2, "the reference run leaves no stop ids with distinct positions"
    return list(best)


def test_ragged_rows_equal_rows_alone_greedy(target, prompts, reference):
    for prompt, want in zip(prompts, reference, strict=True):
        alone = sj.generate(target, [prompt], max_new_tokens=NEW, stop_token_ids=[])
        assert alone.tokens == [want]


def test_ragged_rows_equal_rows_alone_sampled(target, prompts, reference):
    seeds = [11, 12, 13, 14]
    batch = sj.generate(
        target, prompts, max_new_tokens=NEW, sampling=SAMPLED, stop_token_ids=[], seeds=seeds
    )
    assert batch.tokens != reference  # sampling is really on
    again = sj.generate(
        target, prompts, max_new_tokens=NEW, sampling=SAMPLED, stop_token_ids=[], seeds=seeds
    )
    assert again.tokens == batch.tokens
    for i in (0, 3):
        alone = sj.generate(
            target,
            [prompts[i]],
            max_new_tokens=NEW,
            sampling=SAMPLED,
            stop_token_ids=[],
            seeds=[seeds[i]],
        )
        assert alone.tokens == [batch.tokens[i]]


def test_stop_ids_truncate_each_row(target, prompts, reference, stop_ids):
    out = sj.generate(target, prompts, max_new_tokens=NEW, stop_token_ids=stop_ids)
    want = [truncate_at_stop(row, stop_ids) for row in reference]
    assert out.tokens == want
    for row in out.tokens:
        assert len(row) == NEW or row[-1] in stop_ids
    assert out.stats["generated_tokens"] == [len(t) for t in want]
    # A row is frozen once it stops: it takes no more steps.
    assert out.stats["row_steps"] == [len(t) - 1 for t in want]


def test_single_stop_id(target, prompts, reference, stop_ids):
    out = sj.generate(target, prompts, max_new_tokens=NEW, stop_token_ids=stop_ids[0])
    assert out.tokens == [truncate_at_stop(row, stop_ids[:1]) for row in reference]


def test_stopped_rows_are_frozen_in_the_state(target, prompts, reference, stop_ids):
    """After the loop: a stopped row's cache stopped growing and its buffer after the stop is 0."""
    _, rows, static, params, args = engine._setup(target, prompts, NEW, None, stop_ids, None, None)
    state = engine._generate_jit(static, params, *args)
    num_out = np.asarray(state.num_out)[:4]
    prompt_len = np.array([len(p) for p in prompts])
    # The last emitted token is pending (not yet in the cache).
    np.testing.assert_array_equal(np.asarray(state.cache.lengths)[:4], prompt_len + num_out - 1)
    out = np.asarray(state.out)
    for b in range(4):
        assert np.all(out[b, num_out[b] :] == 0)
    assert np.all(np.asarray(state.done))


def test_model_eos_is_the_default_stop(target, prompts, reference, stop_ids):
    """stop_token_ids=None stops at the config's EOS ids; [] disables stopping."""
    with_eos = sj.Decoder(target.config.replace(eos_token_ids=tuple(stop_ids)), seed=1)
    nnx.update(with_eos, nnx.state(target))
    out = sj.generate(with_eos, prompts, max_new_tokens=NEW)
    assert out.tokens == [truncate_at_stop(row, stop_ids) for row in reference]
    out = sj.generate(with_eos, prompts, max_new_tokens=NEW, stop_token_ids=[])
    assert out.tokens == reference


@pytest.mark.parametrize("budget", [1, 2, 7, 16])
def test_exact_max_new_tokens(target, prompts, reference, budget):
    out = sj.generate(target, prompts, max_new_tokens=budget, stop_token_ids=[])
    assert out.tokens == [row[:budget] for row in reference]
    assert out.texts is None  # no tokenizer, no texts


def test_compile_once_per_bucket(target, caplog):
    """Prompt lengths <= 16, budgets <= 16 and batches of 3-4 share one compiled program."""
    sampling = sj.SamplingParams(temperature=0.7, top_k=5)  # a program no other test compiles
    rng = np.random.default_rng(3)
    calls = [((3, 16, 7), 9), ((1, 2, 3, 4), 16), ((16, 16, 16), 1), ((8, 5, 2, 11), 4)]

    def run(lengths, budget):
        ps = [rng.integers(0, 32, n).tolist() for n in lengths]
        sj.generate(target, ps, max_new_tokens=budget, sampling=sampling, seeds=list(lengths))

    before = engine.trace_count()
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        for lengths, budget in calls:
            run(lengths, budget)
    assert engine.trace_count() - before == 1
    compiled = [
        r for r in caplog.records if r.getMessage().startswith("Compiling jit(_generate_jit)")
    ]
    assert len(compiled) == 1, [r.getMessage()[:80] for r in compiled]
    # Crossing a bucket (prompt 17 -> Tp 32; budget 17 -> O 32) compiles again, once each.
    run((17, 3), 5)
    assert engine.trace_count() - before == 2
    run((4,), 17)
    run((4,), 17)
    assert engine.trace_count() - before == 3


def test_prompt_buckets():
    lengths = (1, 16, 17, 32, 33, 48, 49, 64, 65, 96, 97, 128, 129, 192, 193, 256, 257, 384, 385)
    want = (16, 16, 32, 32, 48, 48, 64, 64, 96, 96, 128, 128, 192, 192, 256, 256, 384, 384, 512)
    assert [engine.prompt_bucket(n) for n in lengths] == list(want)
    for n in range(33, 3000):  # past 32 tokens, a prompt pays for less than half its length
        assert n <= engine.prompt_bucket(n) < 1.5 * n


def test_three_quarter_bucket_gives_the_tokens_of_the_next_power_of_two(target, monkeypatch):
    """A 40-token prompt pads to 48, not 64: the same tokens, autoregressive and speculative."""
    prompt = np.random.default_rng(5).integers(0, 32, 40).tolist()
    assert engine.prompt_bucket(len(prompt)) == 48
    got = sj.generate(target, [prompt], 12, stop_token_ids=[]).tokens
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    assert (
        sj.generate(target, [prompt], 12, stop_token_ids=[], speculative_config=spec).tokens == got
    )
    monkeypatch.setattr(engine, "prompt_bucket", lambda n: 64)
    assert sj.generate(target, [prompt], 12, stop_token_ids=[]).tokens == got


def test_stream_yields_the_same_tokens(target, prompts, stop_ids):
    want = sj.generate(target, prompts, max_new_tokens=NEW, stop_token_ids=stop_ids).tokens
    got = [[] for _ in prompts]
    chunks = list(sj.generate_stream(target, prompts, max_new_tokens=NEW, stop_token_ids=stop_ids))
    assert all(len(c) == 1 for c in chunks[0])  # prefill emits one token per row
    for chunk in chunks:
        for b, new in enumerate(chunk):
            assert len(new) <= 1
            got[b] += new
    assert got == want
    assert len(chunks) == max(len(t) for t in want)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"stop_token_ids": [-3]}, "stop"),
        ({"speculative_config": {"method": "medusa7"}}, "medusa7"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_stream_refuses_bad_input_at_the_call(target, prompts, kwargs, match):
    """Errors come from the call itself, before any `next()`, as from `generate`."""
    args = {"max_new_tokens": NEW, **kwargs}
    with pytest.raises(ValueError, match=match):
        sj.generate_stream(target, prompts, **args)  # never iterated
    with pytest.raises(ValueError, match=match):
        sj.generate(target, prompts, **args)


@pytest.fixture(scope="module")
def text_model(tiny_config):
    text = "the quick brown fox jumps over the lazy dog. hello world, hello there. "
    tok = train_bpe([text * 30], vocab_size=300, min_frequency=1)
    config = tiny_config.replace(vocab_size=tok.vocab_size)
    return sj.Model(sj.Decoder(config, seed=0), tok)


def test_strings_in_texts_out(text_model):
    tok = text_model.tokenizer
    prompts = ["hello world", "the lazy"]
    out = sj.generate(text_model, prompts, max_new_tokens=8, stop_token_ids=[])
    ids = sj.generate(text_model, [tok.encode(p) for p in prompts], 8, stop_token_ids=[])
    assert out.tokens == ids.tokens and all(len(t) == 8 for t in out.tokens)
    assert out.texts == [tok.decode(t) for t in out.tokens]
    assert all(isinstance(t, str) and t for t in out.texts)
    one = sj.generate(text_model, "hello world", max_new_tokens=8, stop_token_ids=[])
    assert one.tokens == out.tokens[:1] and one.texts == out.texts[:1]
