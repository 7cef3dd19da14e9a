"""Greedy speculative decoding (T=0) reproduces plain greedy decoding token for token.

Whatever the draft proposes, greedy verification emits the target's argmax chain: a draft equal
to the target has every draft accepted, an unrelated one almost none, a perturbed copy some.
Covered: chains k in {1, 2, 4, 7} at batch 1 and a ragged batch of 4, top-k trees (a
depth x width expansion and a choices list), ngram, stop ids landing at every kind of block
position, and the length limit falling mid-block (also at max_position_embeddings).

Compile budget: every distinct (batch bucket, prompt bucket, generation bucket, spec config)
is one compile; the drafts here share the target's architecture, so draft = target, the
unrelated model and the perturbed copy reuse one program per (k, batch).
"""

import jax
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax import sampling as sp
from specjax.cache import KVCache
from specjax.decoding import engine
from specjax.decoding.proposers import StepInput

VOCAB = 32
MAX_NEW = 24  # 23 tokens after prefill: not a multiple of k+1 for any k tested
LENGTHS = (5, 11, 3, 14)  # ragged, all in the 16-token prompt bucket
TREE_DEPTH_WIDTH = {"depth": 3, "width": 2}
TREE_CHOICES = [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0)]  # depth 3, 7 drafts


def _perturbed(model: sj.Decoder, scale: float, seed: int = 1) -> sj.Decoder:
    """A copy of `model` whose second layer has Gaussian noise of `scale` added to its kernels."""
    copy = nnx.clone(model)
    layer = copy.layers[1]
    key = jax.random.key(seed)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        owner = (
            layer.self_attn
            if proj.endswith(("q_proj", "k_proj", "v_proj", "o_proj"))
            else layer.mlp
        )
        kernel = getattr(owner, proj).kernel
        key, sub = jax.random.split(key)
        kernel[...] = kernel[...] + scale * jax.random.normal(sub, kernel[...].shape)
    return copy


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(123)
    return [rng.integers(0, VOCAB, n).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def drafts(target, tiny_config):
    """Same architecture as the target: one compiled program serves all three."""
    return {
        "same": target,
        "unrelated": sj.Decoder(tiny_config, seed=11),
        "partial": _perturbed(target, 0.005),
    }


@pytest.fixture(scope="module")
def reference(target, prompts):
    """Plain greedy decoding of the ragged batch and of its first row alone."""
    return {
        4: sj.generate(target, prompts, MAX_NEW).tokens,
        1: sj.generate(target, prompts[:1], MAX_NEW).tokens,
    }


def _chain(draft, k: int, **extra) -> dict:
    return {"method": "draft_model", "model": draft, "num_speculative_tokens": k, **extra}


def _full_block_tau(max_new: int, k: int) -> float:
    """tau when every draft is accepted: the tokens after prefill over the steps they took."""
    emitted = max_new - 1
    return emitted / -(-emitted // (k + 1))


# ------------------------------------------------------------------------------- chains


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_chain_matches_autoregressive(target, drafts, prompts, reference, k, batch):
    rows = prompts[:batch]
    rates = {}
    for name, draft in drafts.items():
        out = sj.generate(target, rows, MAX_NEW, speculative_config=_chain(draft, k))
        assert out.tokens == reference[batch], f"draft={name} k={k}"
        assert out.stats["generated_tokens"] == [MAX_NEW] * batch
        rates[name] = out.stats["acceptance_rate"]
        if name == "same":
            # Everything offered is accepted; the only short block is the last (the budget).
            assert out.stats["accepted_tokens"] == out.stats["draft_tokens"] > 0
            assert out.stats["mean_accepted_length"] == pytest.approx(_full_block_tau(MAX_NEW, k))
    assert rates["same"] == 1.0
    assert rates["unrelated"] < 0.25, rates
    assert 0.2 < rates["partial"] < 0.95, rates


def test_chain_with_smaller_draft_architecture(target, unrelated_draft, prompts, reference):
    """A draft with fewer layers (its own compiled shapes) changes nothing in the output."""
    out = sj.generate(target, prompts, MAX_NEW, speculative_config=_chain(unrelated_draft, 3))
    assert out.tokens == reference[4]
    assert out.stats["acceptance_rate"] < 0.25


# -------------------------------------------------------------------------------- trees


@pytest.mark.parametrize(
    "tree,batch",
    [(TREE_DEPTH_WIDTH, 4), (TREE_CHOICES, 4), (TREE_DEPTH_WIDTH, 1)],
    ids=["depth3x2-b4", "choices-b4", "depth3x2-b1"],
)
def test_tree_matches_autoregressive(target, drafts, prompts, reference, tree, batch):
    rows = prompts[:batch]
    stats = {}
    for name, draft in drafts.items():
        cfg = _chain(draft, 3, draft_tree=tree)
        out = sj.generate(target, rows, MAX_NEW, speculative_config=cfg)
        assert out.tokens == reference[batch], f"draft={name} tree={tree}"
        stats[name] = out.stats
    # draft = target: the rank-0 path is the target's argmax chain, so every step goes 3 deep.
    assert stats["same"]["mean_accepted_length"] == pytest.approx(_full_block_tau(MAX_NEW, 3))
    # Every offered position is accepted; the budget may mask the last step's deeper positions,
    # and those do not count as offered.
    assert stats["same"]["acceptance_by_position"] == [1.0, 1.0, 1.0]
    assert stats["same"]["conditional_acceptance_by_position"] == [1.0, 1.0, 1.0]
    assert stats["unrelated"]["mean_accepted_length"] < 1.5
    assert 1.3 < stats["partial"]["mean_accepted_length"] < 4.0


@pytest.mark.slow
def test_greedy_tree_children_are_the_drafts_top_k(target, drafts, prompts):
    """At T=0 the children of a node are the draft's top-k tokens there, not just its argmax.

    (The processed law at T=0 is one-hot, so ranking children by it would make every rank >= 1
    child a tie at -inf, i.e. token 0, 1, ...: the tree would silently degrade to a chain.)
    """
    draft = drafts["partial"]
    cfg = _chain(draft, 3, draft_tree=TREE_DEPTH_WIDTH)
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, None, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)

    def draft_block(p, s, k):
        view = StepInput(pstate=s.proposer, root=s.last, lengths=s.cache.lengths, active=~s.done)
        target_module = nnx.merge(static.graphdef, p[0])
        return static.spec.proposer.propose(static.context, target_module, p[1], view, k)[0]

    propose = jax.jit(draft_block)
    tokens = np.asarray(propose(params, state, sp.step_key(state.keys, 1)).tokens)  # [B, 15]
    roots = np.asarray(state.last)
    for b, prompt in enumerate(prompts):
        # Nodes 1, 2: the root's children; nodes 3, 4: the children of node 1 (breadth first).
        for context, children in (
            ([roots[b]], tokens[b, 1:3]),
            ([roots[b], tokens[b, 1]], tokens[b, 3:5]),
        ):
            ids = np.asarray([prompt + [int(t) for t in context]], np.int32)
            logits = draft(
                ids, np.arange(ids.shape[1])[None], KVCache.for_model(draft.config, 1, ids.shape[1])
            ).logits
            top2 = np.argsort(-np.asarray(logits[0, -1]), kind="stable")[:2]
            assert children.tolist() == top2.tolist(), (b, context)


def test_children_beyond_the_sampling_filter_are_not_offered(target, drafts, prompts):
    """At T>0 with top_k=1 a parent's law has one finite token; a width-2 tree's rank-1
    children would be the lowest token ids at -inf. They (and their subtrees) are marked
    invalid, so the verifier never offers them; the rank-0 chain stays valid."""
    sampling = sj.SamplingParams(temperature=1.0, top_k=1)
    cfg = _chain(drafts["partial"], 3, draft_tree=TREE_DEPTH_WIDTH, verification="one_hot")
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, sampling, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)
    view = StepInput(pstate=state.proposer, root=state.last, lengths=state.cache.lengths,
                     active=~state.done)  # fmt: skip
    module = nnx.merge(static.graphdef, params[0])
    key = sp.step_key(state.keys, 1)
    draft = static.spec.proposer.propose(static.context, module, params[1], view, key)[0]
    valid = np.asarray(draft.valid)  # [B, 15]
    tree = static.spec.config.tree
    ranks, parents = tree.rank.tolist(), tree.parents_array.tolist()
    on_chain = [True]  # node j is on the all-rank-0 path from the root
    for j in range(1, tree.num_nodes):
        on_chain.append(on_chain[parents[j]] and ranks[j] == 0)
    assert valid.tolist() == [on_chain] * len(prompts)
    assert sum(on_chain) == 4  # root + a 3-deep chain


# -------------------------------------------------------------------------------- ngram


@pytest.fixture(scope="module")
def repetitive_prompts():
    rng = np.random.default_rng(5)
    rows = []
    for n, period in zip(LENGTHS, (2, 3, 1, 4), strict=True):
        unit = rng.integers(0, VOCAB, period).tolist()
        rows.append((unit * 16)[: max(n, 2 * period)])
    return rows


@pytest.mark.parametrize("batch", [1, 4])
def test_ngram_matches_autoregressive(target, repetitive_prompts, batch):
    rows = repetitive_prompts[:batch]
    ref = sj.generate(target, rows, MAX_NEW).tokens
    cfg = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    out = sj.generate(target, rows, MAX_NEW, speculative_config=cfg)
    assert out.tokens == ref
    # Greedy tiny models fall into cycles: the lookup must find and land drafts.
    assert out.stats["accepted_tokens"] > 0
    assert out.stats["mean_accepted_length"] > 1.5


# ------------------------------------------------------------------------------ stop ids


def _first_occurrences(tokens: list[int]) -> dict[int, int]:
    first = {}
    for i, t in enumerate(tokens):
        first.setdefault(t, i)
    return first


@pytest.fixture(scope="module")
def stop_pool(target):
    """Many single prompts with their greedy continuations (one batched reference run)."""
    rng = np.random.default_rng(77)
    pool = [rng.integers(0, VOCAB, int(n)).tolist() for n in rng.integers(2, 16, 16)]
    return pool, sj.generate(target, pool, MAX_NEW).tokens


@pytest.mark.parametrize(
    "block_pos", [0, 2, 3, 4], ids=["first-draft", "middle-draft", "last-draft", "bonus"]
)
def test_stop_inside_block(target, stop_pool, block_pos):
    """A stop id at block position j (0..k-1 a draft, k the bonus) truncates the row there.

    With draft = target every block is full, so output index i >= 1 sits at block position
    (i - 1) % (k + 1); a stop id whose first occurrence is at such an index is picked from the
    reference continuation.
    """
    k = 4
    pool, refs = stop_pool
    hits = [
        (prompt, ref, tok, i)
        for prompt, ref in zip(pool, refs, strict=True)
        for tok, i in _first_occurrences(ref).items()
        if i >= 1 and (i - 1) % (k + 1) == block_pos
    ]
    assert hits, "no reference token first occurs at that block position"
    for prompt, ref, tok, i in hits[:3]:
        out = sj.generate(
            target, [prompt], MAX_NEW, stop_token_ids=[tok], speculative_config=_chain(target, k)
        )
        assert out.tokens == [ref[: i + 1]], (tok, i)
        assert out.stats["generated_tokens"] == [i + 1]
        # The step that hit the stop accepted its drafts in full; only emission stopped.
        assert out.stats["row_steps"] == [(i - 1) // (k + 1) + 1]


def test_stop_ids_in_ragged_batch(target, drafts, prompts, reference):
    """Each row stops at its own first stop id; the others run on, frozen rows stay frozen."""
    stops = [reference[4][0][5], reference[4][2][9]]
    expected = []
    for ref in reference[4]:
        cut = next((i for i, t in enumerate(ref) if t in stops), len(ref) - 1)
        expected.append(ref[: cut + 1])
    assert len({len(e) for e in expected}) > 1  # rows really stop at different points
    for name in ("same", "partial"):
        out = sj.generate(
            target,
            prompts,
            MAX_NEW,
            stop_token_ids=stops,
            speculative_config=_chain(drafts[name], 4),
        )
        assert out.tokens == expected, name


# -------------------------------------------------------------------------- length limit


@pytest.mark.parametrize("max_new", [17, 19, 30])
def test_budget_ends_mid_block(target, drafts, prompts, max_new):
    """Budgets in one bucket (no recompile) that end the last block early by masking."""
    k = 4
    ref = sj.generate(target, prompts, max_new).tokens
    for name in ("same", "partial"):
        out = sj.generate(target, prompts, max_new, speculative_config=_chain(drafts[name], k))
        assert out.tokens == ref, name
        assert out.stats["generated_tokens"] == [max_new] * len(prompts)
    out = sj.generate(target, prompts, max_new, speculative_config=_chain(target, k))
    assert out.stats["row_steps"] == [-(-(max_new - 1) // (k + 1))] * len(prompts)


def test_generation_reaches_max_position_embeddings(target, drafts, tiny_config):
    """prompt + max_new == max_position_embeddings: the last block is cut at the model's limit."""
    limit = tiny_config.max_position_embeddings
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, VOCAB, 100).tolist()
    max_new = limit - len(prompt)  # 28: the last of 27 steps' tokens is cut mid-block for k=4
    ref = sj.generate(target, [prompt], max_new).tokens
    for name in ("same", "partial"):
        out = sj.generate(target, [prompt], max_new, speculative_config=_chain(drafts[name], 4))
        assert out.tokens == ref, name
        assert len(out.tokens[0]) == max_new
    cfg = _chain(target, 3, draft_tree=TREE_DEPTH_WIDTH)
    assert sj.generate(target, [prompt], max_new, speculative_config=cfg).tokens == ref
    with pytest.raises(ValueError, match="max_position_embeddings"):
        sj.generate(target, [prompt], max_new + 1, speculative_config=_chain(target, 4))
