"""Padded batches, stop ids and the position limit, for every proposer, greedy and sampled.

A batch of 3 rows runs in a bucket of 4 (one padding row): each row must equal the same
prompt decoded alone with the same seed, since a row's randomness depends on its own key and
its result on its own data only. Stop ids end each row at its own first stop, also with
`ngram` and at T>0: the tokens before the stop are those of the run without stop ids. A
target whose max_position_embeddings is exactly the longest prompt + max_new_tokens gives
the greedy tokens of the unlimited target with EAGLE and lookahead (whose drafter and window
run at positions past the committed length), and one more token is refused by name.

Compile budget: each (method, sampling) is one program for the batch bucket, shared by both
tests, and one for the row alone. For EAGLE and lookahead the fast set runs T>0, where a
padding row or a neighbour could change a row's draws, with the EAGLE-1 chain (sampled drafts)
and the EAGLE-3 dynamic tree (one-hot), which between them cover both drafters' features and
both proposer paths; `-m slow` adds the other two EAGLE variants at T>0 and all of them at T=0
(at T=0 every row equals its own autoregressive decoding, which test_eagle.py and
test_lookahead.py check on ragged batches).
"""

import numpy as np
import pytest

import specjax as sj

VOCAB = 32
NEW = 20
SEEDS = [101, 202, 303]
SAMPLED = sj.SamplingParams(temperature=0.9, top_k=12)
DYNAMIC = {"dynamic": {"top_k": 3, "total_tokens": 8}}
EAGLE = ["eagle-chain", "eagle-dynamic", "eagle3-chain", "eagle3-dynamic"]
FAST_AT_T0 = {"ngram", "draft_tree", "medusa"}
FAST_AT_T = FAST_AT_T0 | {"eagle-chain", "eagle3-dynamic", "lookahead"}
SLOW = pytest.mark.slow


def _cases(methods):
    """(method, sampling) pairs, the ones outside the fast set marked slow (see the docstring)."""
    return [
        pytest.param(m, s, id=f"{i}-{m}", marks=() if m in fast else SLOW)
        for s, i, fast in ((None, "greedy", FAST_AT_T0), (SAMPLED, "sampled", FAST_AT_T))
        for m in methods
    ]


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(9)
    unit = rng.integers(0, VOCAB, 3).tolist()  # a repeated unit: ngram and lookahead find matches
    return [unit * 4, rng.integers(0, VOCAB, 7).tolist(), (unit * 3)[:8]]


@pytest.fixture(scope="module")
def configs(target):
    from tests.decoding.test_medusa import noisy_heads
    from tests.decoding.test_spec_greedy import _perturbed

    draft, heads = _perturbed(target, 0.005), noisy_heads(target, num_heads=3)
    eagle = {m: sj.EagleHead.for_target(target, method=m, seed=1) for m in ("eagle", "eagle3")}
    return {
        "ngram": {"method": "ngram", "num_speculative_tokens": 3},
        "draft_tree": {"method": "draft_model", "model": draft, "num_speculative_tokens": 2,
                       "draft_tree": "small_2x3"},
        "medusa": {"method": "medusa", "model": heads, "num_speculative_tokens": 3},
        **{f"{m}-chain": {"method": m, "model": head, "num_speculative_tokens": 3}
           for m, head in eagle.items()},
        **{f"{m}-dynamic": {"method": m, "model": head, "num_speculative_tokens": 3,
                            "draft_tree": DYNAMIC} for m, head in eagle.items()},
        "lookahead": {"method": "lookahead", "lookahead_window": 3, "ngram_size": 3,
                      "max_candidates": 2},
    }  # fmt: skip


@pytest.mark.parametrize(
    "method,sampling", _cases(["ngram", "draft_tree", "medusa", *EAGLE, "lookahead"])
)
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


@pytest.mark.parametrize("method,sampling", _cases(["ngram", "medusa", *EAGLE, "lookahead"]))
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


@pytest.fixture(scope="module")
def limited(tiny_config, rows):
    """The target's weights, max_position_embeddings = the longest prompt + NEW (32)."""
    limit = max(len(r) for r in rows) + NEW
    return sj.Decoder(tiny_config.replace(max_position_embeddings=limit), seed=0)


@pytest.mark.parametrize(
    "method",
    [pytest.param(m, marks=() if m in ("eagle3-dynamic", "lookahead") else SLOW)
     for m in [*EAGLE, "lookahead"]],
)  # fmt: skip
def test_generation_reaches_max_position_embeddings(target, limited, rows, configs, method):
    """The longest row ends at the limit: its last blocks' positions past it are clipped."""
    cfg = configs[method]
    ref = sj.generate(target, rows, NEW, stop_token_ids=[]).tokens
    out = sj.generate(limited, rows, NEW, stop_token_ids=[], speculative_config=cfg)
    assert out.tokens == ref
    assert out.stats["generated_tokens"] == [NEW] * 3
    with pytest.raises(ValueError, match=r"= 33 exceeds the model's max_position_embeddings=32"):
        sj.generate(limited, rows, NEW + 1, stop_token_ids=[], speculative_config=cfg)
