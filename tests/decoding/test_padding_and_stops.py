"""Padded batches and stop ids, for every proposer, greedy and sampled.

A batch of 3 rows runs in a bucket of 4 (one padding row): each row must equal the same
prompt decoded alone with the same seed, since a row's randomness depends on its own key and
its result on its own data only. Stop ids end each row at its own first stop, also with
`ngram` and at T>0: the tokens before the stop are those of the run without stop ids.
"""

import numpy as np
import pytest

import specjax as sj

VOCAB = 32
NEW = 20
SEEDS = [101, 202, 303]
SAMPLED = sj.SamplingParams(temperature=0.9, top_k=12)


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(9)
    unit = rng.integers(0, VOCAB, 3).tolist()  # a repeated unit: ngram finds matches
    return [unit * 4, rng.integers(0, VOCAB, 7).tolist(), (unit * 3)[:8]]


@pytest.fixture(scope="module")
def configs(target):
    from tests.decoding.test_medusa import noisy_heads
    from tests.decoding.test_spec_greedy import _perturbed

    draft, heads = _perturbed(target, 0.005), noisy_heads(target, num_heads=3)
    return {
        "ngram": {"method": "ngram", "num_speculative_tokens": 3},
        "draft_tree": {"method": "draft_model", "model": draft, "num_speculative_tokens": 2,
                       "draft_tree": "small_2x3"},
        "medusa": {"method": "medusa", "model": heads, "num_speculative_tokens": 3},
    }  # fmt: skip


@pytest.mark.parametrize("method", ["ngram", "draft_tree", "medusa"])
@pytest.mark.parametrize("sampling", [None, SAMPLED], ids=["greedy", "sampled"])
def test_padded_batch_rows_equal_rows_alone(target, rows, configs, method, sampling):
    cfg = configs[method]
    batch = sj.generate(target, rows, NEW, sampling, [], speculative_config=cfg, seeds=SEEDS)
    assert batch.stats["generated_tokens"] == [NEW] * 3
    for i, prompt in enumerate(rows):
        alone = sj.generate(target, [prompt], NEW, sampling, [], speculative_config=cfg,
                            seeds=[SEEDS[i]])  # fmt: skip
        assert alone.tokens[0] == batch.tokens[i], (method, i)


def _truncate(row, stops):
    cut = next((i for i, t in enumerate(row) if t in stops), None)
    return row if cut is None else row[: cut + 1]


@pytest.mark.parametrize("method", ["ngram", "medusa"])
@pytest.mark.parametrize("sampling", [None, SAMPLED], ids=["greedy", "sampled"])
def test_stop_ids_end_each_row_at_its_first_stop(target, rows, configs, method, sampling):
    cfg = configs[method]
    free = sj.generate(target, rows, NEW, sampling, [], speculative_config=cfg, seeds=SEEDS)
    # Stop ids whose first occurrence differs between rows, away from the first token.
    stops = sorted({free.tokens[0][6], free.tokens[1][11]})
    want = [_truncate(r, stops) for r in free.tokens]
    assert len({len(w) for w in want}) > 1 or min(len(w) for w in want) < NEW
    out = sj.generate(target, rows, NEW, sampling, stops, speculative_config=cfg, seeds=SEEDS)
    assert out.tokens == want
    assert out.stats["generated_tokens"] == [len(w) for w in want]
