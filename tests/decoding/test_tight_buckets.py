"""Tree blocks at the very end of tight buckets: the caches always have room for the whole block.

A tree step writes all P + 1 nodes after a row's committed length. With the prompt as long as
its bucket and `max_new_tokens` equal to its bucket, the last steps run with the committed
length near the end of the buckets; a cache sized for the longest commit (Dmax + 1 slots)
rather than for the block would drop the deepest nodes' keys and commit another node's K/V.
Greedy output must still equal plain greedy decoding token for token, in a ragged batch whose
longest prompt fills its bucket (so every row's result is independent of the others).
The sampled law at the end of tight buckets is tested in test_spec_distribution.py.
"""

import numpy as np
import pytest

import specjax as sj
from specjax.decoding import trees

VOCAB = 32
PROMPT_BUCKET = MAX_NEW = 16  # prompt length = its bucket; max_new_tokens = its bucket


@pytest.fixture(scope="module")
def tight_prompts():
    rng = np.random.default_rng(42)
    return [rng.integers(0, VOCAB, n).tolist() for n in (PROMPT_BUCKET, 9, PROMPT_BUCKET)]


@pytest.fixture(scope="module")
def tight_reference(target, tight_prompts):
    return sj.generate(target, tight_prompts, MAX_NEW, stop_token_ids=[]).tokens


@pytest.fixture(scope="module")
def partial_draft(target):
    from tests.decoding.test_spec_greedy import _perturbed

    return _perturbed(target, 0.005)


@pytest.mark.parametrize(
    "tree", [{"depth": 3, "width": 2}, "mc_sim_7b_63"], ids=["topk3x2", "mc_sim_7b_63"]
)
def test_wide_tree_at_the_end_of_tight_buckets(
    target, partial_draft, tight_prompts, tight_reference, tree
):
    depth = trees.get_tree(tree).max_depth if isinstance(tree, str) else tree["depth"]
    cfg = {"method": "draft_model", "model": partial_draft, "num_speculative_tokens": depth,
           "draft_tree": tree}  # fmt: skip
    out = sj.generate(target, tight_prompts, MAX_NEW, stop_token_ids=[], speculative_config=cfg)
    assert out.tokens == tight_reference
    assert out.stats["accepted_tokens"] > 0  # the trees' deeper nodes were really used
    # Row by row: the same as each prompt decoded alone (batch invariance).
    for row, prompt in enumerate(tight_prompts):
        alone = sj.generate(target, [prompt], MAX_NEW, stop_token_ids=[], speculative_config=cfg)
        assert alone.tokens[0] == out.tokens[row]
