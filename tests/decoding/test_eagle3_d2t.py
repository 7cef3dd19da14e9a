"""EAGLE-3 with a scattered d2t: a draft vocabulary of Vd < V target ids in random order.

The drafter's LM head scores Vd draft ids; draft id i is target id i + d2t[i]. The other
EAGLE-3 decoding tests draft over the full vocabulary (d2t = 0), where a decoder that ignored
d2t, or indexed a law by draft id instead of target id, would still be right; trained and
loaded drafters keep their ids in increasing order (`draft_vocabulary`). Here the kept target
ids are a random subset in random order (`SUBSET`), so each such slip shows:

- the drafter's logits over target ids are its draft logits moved to `SUBSET`, -inf elsewhere,
  and every offered draft (chain and dynamic tree) is a target id in `SUBSET`;
- greedy output equals plain greedy decoding (an untrained drafter, chain and dynamic tree);
- an exact drafter is accepted to full depth: a bigram target whose next token always lies in
  `SUBSET`, and a drafter built to compute that bigram map through its own layer; on a
  bigram target whose path leaves the subset, each step accepts exactly the run of next
  tokens inside it;
- at T > 0 the first generated tokens follow the target's law (chi-square, the statistic and
  sample counts of test_spec_distribution.py): a sampled chain verified probabilistically and
  a static top-k tree verified one-hot.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax.decoding import engine
from specjax.decoding.proposers import StepInput
from tests.decoding import test_spec_distribution as dist

VOCAB = 32  # the suite's tiny target (tests/conftest.py)
VD = 20  # draft vocabulary: 20 of the 32 target ids
SUBSET = np.random.default_rng(11).permutation(VOCAB)[:VD]  # target id of draft id i
MAX_NEW = 24
LENGTHS = (5, 11, 3, 14)
DYNAMIC = {"dynamic": {"top_k": 3, "total_tokens": 8}}
TREES = [pytest.param(4, None, id="chain"), pytest.param(4, DYNAMIC, id="dynamic")]


def _scatter(head: sj.EagleHead, subset=SUBSET) -> sj.EagleHead:
    """Draft id i -> target id subset[i]: d2t[i] = subset[i] - i, t2d marks the subset."""
    V = head.config.vocab_size
    head.d2t.set_value(jnp.asarray(np.asarray(subset) - np.arange(len(subset)), jnp.int32))
    head.t2d.set_value(jnp.asarray(np.isin(np.arange(V), subset)))
    return head


def _drafter(target, seed: int) -> sj.EagleHead:
    """An untrained EAGLE-3 drafter (random layer) over the scattered draft vocabulary."""
    head = sj.EagleHead.for_target(target, method="eagle3", seed=seed, draft_vocab_size=VD)
    return _scatter(head)


def _cfg(head, k, tree=None, **extra):
    cfg = {"method": "eagle3", "model": head, "num_speculative_tokens": k, **extra}
    if tree is not None:
        cfg["draft_tree"] = tree
    return cfg


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, n).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def drafter(target):
    return _drafter(target, seed=1)


# ------------------------------------------------------------------- the id mapping itself


def test_logits_over_target_ids_follow_d2t(target, drafter):
    """Draft logit i lands on target id SUBSET[i]; ids outside the subset are -inf."""
    h = jax.random.normal(jax.random.key(0), (3, target.config.hidden_size))  # [3, H]
    draft = np.asarray(drafter.draft_logits(target, h))  # [3, Vd]
    full = np.asarray(drafter.logits(target, h))  # [3, V]
    assert draft.shape == (3, VD) and full.shape == (3, VOCAB)
    np.testing.assert_array_equal(full[:, SUBSET], draft)
    outside = np.setdiff1d(np.arange(VOCAB), SUBSET)
    assert np.isneginf(full[:, outside]).all()
    np.testing.assert_array_equal(np.asarray(drafter.draft_to_target_ids()), SUBSET)
    assert np.asarray(drafter.t2d[...]).nonzero()[0].tolist() == sorted(SUBSET.tolist())
    # Not the contiguous layout: a decoder that ignored d2t would draft ids 0..Vd-1.
    assert not np.array_equal(np.sort(SUBSET), np.arange(VD))


@pytest.mark.parametrize("k,tree", TREES)
def test_every_offered_draft_is_in_the_draft_vocabulary(target, drafter, prompts, k, tree):
    """One step's draft after prefill: every valid node is a target id of the subset."""
    _, _, static, params, args = engine._setup(
        target, prompts, MAX_NEW, None, [], _cfg(drafter, k, tree), None
    )
    state = engine._prefill_jit(static, params, *args)

    @jax.jit
    def draft(p, s):
        view = StepInput(s.proposer, s.last, s.cache.lengths, ~s.done)
        module = nnx.merge(static.graphdef, p[0])
        return static.spec.proposer.propose(static.context, module, p[1], view, None)[0]

    d = draft(params, state)
    tokens, valid = np.asarray(d.tokens)[: len(prompts)], np.asarray(d.valid)[: len(prompts)]
    offered = tokens[:, 1:][valid[:, 1:]]  # node 0 is the root (the pending token)
    assert offered.size >= len(prompts) * k
    assert np.isin(offered, SUBSET).all(), (offered, SUBSET)


# ------------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("k,tree", TREES)
def test_greedy_equals_autoregressive(target, drafter, prompts, k, tree):
    reference = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_cfg(drafter, k, tree))  # fmt: skip
    assert out.tokens == reference
    s = out.stats
    assert s["method"] == "eagle3" and s["lossy"] is False
    assert 0 < s["accepted_tokens"] < s["draft_tokens"], s


# ------------------------------------------------------------- an exact drafter, full depth


def _bigram_map(rng, ids=SUBSET) -> np.ndarray:
    """next[y] for every target id: a single cycle through `ids` (so a long greedy run visits
    each of them), and every other id sent into it."""
    order = rng.permutation(ids)
    nxt = rng.choice(ids, VOCAB)
    nxt[order] = np.roll(order, -1)  # order[i] -> order[i + 1]
    return nxt


def _bigram_target(config: sj.ModelConfig, nxt: np.ndarray) -> sj.Decoder:
    """Layers' outputs zeroed and one-hot embeddings: the residual stream entering every layer
    at position t is e_{x_t}, and the LM head reads next[x_t] (logits sqrt(H) there, 0 else)."""
    V, H = config.vocab_size, config.hidden_size
    assert H >= V  # one-hot embeddings
    model = sj.Decoder(config, seed=3)
    for block in model.layers:
        block.self_attn.o_proj.kernel[...] = jnp.zeros_like(block.self_attn.o_proj.kernel[...])
        block.mlp.down_proj.kernel[...] = jnp.zeros_like(block.mlp.down_proj.kernel[...])
    model.embed_tokens.embedding[...] = jnp.eye(V, H)
    head = np.zeros((H, V), np.float32)
    head[np.arange(V), nxt] = 1.0
    model.lm_head.kernel[...] = jnp.asarray(head)
    return model


def _exact_eagle3(target: sj.Decoder, nxt: np.ndarray) -> sj.EagleHead:
    """An EAGLE-3 drafter that computes the bigram map with its own layer.

    Hidden states are one-hot, e_y ("the token y"). The fc reads the first tap (e_{x_t}
    at position t) and writes e_{next[x_t]} = e_{x_{t+1}} (on the greedy path); attention is
    off (o_proj = 0); the MLP is a lookup table, mlp(norm(e_y)) = e_{next[y]} - e_y, so the
    layer's output is e_{next[x_{t+1}]} = e_{x_{t+2}}: the entry's prediction. Fed back as
    the next depth's feature it steps the map once more, so every depth drafts the target's
    greedy token. The LM head puts draft id i on direction SUBSET[i] with a large scale, so
    the law is peaked and the dynamic tree's best candidates are the chain of argmaxes.
    """
    head = _scatter(sj.EagleHead.for_target(target, method="eagle3", seed=4, draft_vocab_size=VD))
    V, H = target.config.vocab_size, target.config.hidden_size
    F = head.config.layer.intermediate_size
    assert F >= V
    fc = np.zeros((3 * H, H), np.float32)
    fc[np.arange(V), nxt] = 1.0  # first tap only: e_y -> e_{next[y]}
    head.fc.kernel[...] = jnp.asarray(fc)
    head.o_proj.kernel[...] = jnp.zeros_like(head.o_proj.kernel[...])
    # MLP lookup: on norm(e_y) = sqrt(H) e_y only unit y is nonzero, silu(a sqrt(H)) sqrt(H);
    # down_proj divides that out and writes e_{next[y]} - e_y.
    a = 10.0
    act = float(jax.nn.silu(a * np.sqrt(H)) * np.sqrt(H))
    gate, up, down = (np.zeros((H, F), np.float32), np.zeros((H, F), np.float32),
                      np.zeros((F, H), np.float32))  # fmt: skip
    ids = np.arange(V)
    gate[ids, ids], up[ids, ids] = a, 1.0
    down[ids, nxt] += 1.0 / act
    down[ids, ids] -= 1.0 / act
    head.mlp.gate_proj.kernel[...] = jnp.asarray(gate)
    head.mlp.up_proj.kernel[...] = jnp.asarray(up)
    head.mlp.down_proj.kernel[...] = jnp.asarray(down)
    lm = np.zeros((H, VD), np.float32)
    lm[SUBSET, np.arange(VD)] = 100.0
    head.lm_head.kernel[...] = jnp.asarray(lm)
    return head


def _exact_pair(config, nxt):
    target = _bigram_target(config, nxt)
    return target, _exact_eagle3(target, nxt), nxt


@pytest.fixture(scope="module")
def bigram(tiny_config):
    """The greedy path stays in the draft vocabulary."""
    return _exact_pair(tiny_config, _bigram_map(np.random.default_rng(5)))


@pytest.fixture(scope="module")
def leaky_bigram(tiny_config):
    """The greedy path cycles through all 32 ids: 12 of every 32 lie outside the subset."""
    return _exact_pair(tiny_config, _bigram_map(np.random.default_rng(6), np.arange(VOCAB)))


def test_bigram_target_stays_in_the_draft_vocabulary(bigram, prompts):
    """The construction: greedy decoding follows next[.] and never leaves the subset."""
    target, _, nxt = bigram
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens
    for p, row in zip(prompts, out, strict=True):
        seq = [p[-1], *row]
        assert [int(nxt[y]) for y in seq[:-1]] == seq[1:]
        assert np.isin(row, SUBSET).all()
    assert len({t for row in out for t in row}) == VD  # the cycle visits every draft id


@pytest.mark.parametrize("k,tree", TREES)
def test_exact_drafter_is_accepted_to_full_depth(bigram, prompts, k, tree):
    target, head, _ = bigram
    ref = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_cfg(head, k, tree))  # fmt: skip
    assert out.tokens == ref
    # Every offered depth is accepted: only the budget's last steps offer fewer.
    assert out.stats["acceptance_by_position"] == [1.0] * k
    steps = -(-(MAX_NEW - 1) // (k + 1))  # first token from prefill, then k + 1 per step
    assert out.stats["row_steps"] == [steps] * len(prompts)
    assert out.stats["mean_accepted_length"] == pytest.approx((MAX_NEW - 1) / steps)


# ------------------------------------------------------------------ the law at T > 0


@pytest.fixture(scope="module")
def pair():
    target = dist._edit(sj.Decoder(dist.CONFIG, seed=0), dist._scale_head)
    return target, dist._edit(target, dist._perturb_layer1)


@pytest.fixture(scope="module")
def law_prompt():
    return np.random.default_rng(0).integers(0, dist.V, 12).tolist()


@pytest.fixture(scope="module")
def exact_laws(pair, law_prompt):
    return dist._laws(*pair, law_prompt, depth=3)


LAW_CASES = [  # (draft_tree, verification, sampling)
    pytest.param(None, "probabilistic", dist.TOP_P, id="chain-probabilistic"),
    pytest.param("small_2x3", "one_hot", dist.TOP_K, id="small_2x3-one_hot"),
]


@pytest.mark.slow  # one compile and 25 batched calls of 4096 rows per case
@pytest.mark.parametrize("tree,mode,params", LAW_CASES)
def test_first_tokens_follow_target_law(pair, law_prompt, exact_laws, tree, mode, params):
    target, _ = pair
    laws, _ = exact_laws[params]
    head = _drafter(target, seed=2)
    cfg = _cfg(head, 2, tree, verification=mode)
    counts, accepted, drafted, later = dist._sample(target, law_prompt, params, cfg)
    assert counts[0].sum() >= 100_000
    assert accepted > 1000 and drafted - accepted > 1000, (accepted, drafted)
    assert later > 10_000, later
    pvalues = [dist._chi2_pvalue(c, law) for c, law in zip(counts, laws, strict=True)]
    assert min(pvalues) > dist.P_PASS, pvalues


def _accepted_per_step(row: list[int], k: int) -> list[int]:
    """Drafts accepted at each step when a draft is right iff its token is in the subset.

    The first token comes from prefill; a step with n tokens generated offers
    min(k, MAX_NEW - n - 1) drafts (the budget masks the deeper ones) and accepts the run of
    the next tokens that lie in the subset.
    """
    inside = np.isin(row, SUBSET)
    n, out = 1, []
    while n < MAX_NEW:
        offered = min(k, MAX_NEW - n - 1)
        a = 0
        while a < offered and inside[n + a]:
            a += 1
        out.append(a)
        n += a + 1
    return out


@pytest.mark.parametrize("k,tree", TREES)
def test_exact_drafter_is_accepted_exactly_inside_the_draft_vocabulary(
    leaky_bigram, prompts, k, tree
):
    """The same drafter on a target whose greedy path leaves the subset: the drafter's hidden
    stays exact, but a token outside the subset cannot be drafted, so each step accepts the
    run of next tokens inside the subset, no more and no fewer."""
    target, head, _ = leaky_bigram
    ref = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens
    assert 0 < np.isin(ref, SUBSET).mean() < 1
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_cfg(head, k, tree))  # fmt: skip
    assert out.tokens == ref
    want = [_accepted_per_step(row, k) for row in ref]
    assert out.stats["row_steps"] == [len(w) for w in want]
    assert out.stats["row_accepted_tokens"] == [sum(w) for w in want]
    assert 0 < out.stats["acceptance_rate"] < 1
