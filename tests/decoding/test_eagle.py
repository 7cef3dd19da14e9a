"""EAGLE-1/2/3 decoding: lossless through the one verifier, trees as data, refusals by name.

Two kinds of drafter: untrained ones (random layers: they agree with the target now and then,
so greedy output must equal plain greedy decoding whatever they propose), and an EAGLE-1
drafter that is exact for a target built to be a bigram model (its layers' outputs zeroed:
next token = argmax LM(norm(emb(x)))), so every draft is accepted and the deep paths, the
commit and the drafter's re-run over accepted tokens are exercised at full depth. The T>0 law
of the chain (sampled drafts) and the dynamic tree (one-hot) is tested in
test_spec_distribution.py.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax as sj
from specjax import sampling as sp
from specjax.decoding import engine, spec_config, trees
from specjax.decoding.proposers import StepInput
from specjax.decoding.proposers.eagle_tree import GREEDY_SCORE_TEMPERATURE, DynamicTree, keep_best
from specjax.decoding.proposers.medusa import MedusaProposer
from specjax.decoding.topology import Topology, ancestor_mask_of, path_to

VOCAB = 32
MAX_NEW = 24
LENGTHS = (5, 11, 3, 14)
DYNAMIC = {"dynamic": {"top_k": 3, "total_tokens": 8}}
VARIANTS = [  # (num_speculative_tokens, draft_tree)
    (4, None),
    (3, "topk_3x2"),
    (5, "eagle1_25"),
    (4, DYNAMIC),
]
IDS = ["chain", "topk_3x2", "eagle1_25", "dynamic"]


def _cfg(method, head, k, tree=None, **extra):
    cfg = {"method": method, "model": head, "num_speculative_tokens": k, **extra}
    if tree is not None:
        cfg["draft_tree"] = tree
    return cfg


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, n).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def reference(target, prompts):
    return sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens


@pytest.fixture(scope="module")
def heads(target):
    return {m: sj.EagleHead.for_target(target, method=m, seed=1) for m in ("eagle", "eagle3")}


SLOW = pytest.mark.slow
GREEDY = [  # every tree kind for EAGLE-3, the chain and the dynamic tree for EAGLE-1
    *[
        pytest.param("eagle3", k, t, id=f"eagle3-{i}")
        for (k, t), i in zip(VARIANTS, IDS, strict=True)
    ],
    pytest.param("eagle", 4, None, id="eagle-chain"),
    pytest.param("eagle", 4, DYNAMIC, id="eagle-dynamic"),
    pytest.param("eagle", 3, "topk_3x2", id="eagle-topk_3x2", marks=SLOW),
    pytest.param("eagle", 5, "eagle1_25", id="eagle-eagle1_25", marks=SLOW),
    pytest.param("eagle3", 7, "eagle2_paper", id="eagle3-eagle2_paper", marks=SLOW),
]


@pytest.mark.parametrize("method,k,tree", GREEDY)
def test_greedy_equals_autoregressive(target, heads, prompts, reference, method, k, tree):
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_cfg(method, heads[method], k, tree))  # fmt: skip
    assert out.tokens == reference
    s = out.stats
    assert s["method"] == method and s["lossy"] is False
    assert 0 < s["accepted_tokens"] < s["draft_tokens"]


def test_eagle2_paper_preset_is_the_papers_setting():
    cfg = spec_config.parse(
        {"method": "eagle3", "model": object(), "num_speculative_tokens": 7,
         "draft_tree": "eagle2_paper"}, temperature=0.0,
    )  # fmt: skip
    assert cfg.tree == DynamicTree(top_k=10, depth=7, total_tokens=60, score_temperature=1.0)
    with pytest.raises(
        ValueError, match=r"'eagle2_paper' drafts depth 7; set num_speculative_tokens=7"
    ):
        spec_config.parse(
            {"method": "eagle3", "model": object(), "num_speculative_tokens": 5,
             "draft_tree": "eagle2_paper"}, temperature=0.0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="dynamic tree"):
        spec_config.parse(
            {"method": "medusa", "model": object(), "num_speculative_tokens": 7,
             "draft_tree": "eagle2_paper"}, temperature=0.0,
        )  # fmt: skip


# ------------------------------------------------------------- an exact drafter, full depth


def _bigram_target(config) -> sj.Decoder:
    """Every layer's output zeroed: the residual stream is the embedding, a bigram model."""
    model = sj.Decoder(config, seed=3)
    for block in model.layers:
        block.self_attn.o_proj.kernel[...] = jnp.zeros_like(block.self_attn.o_proj.kernel[...])
        block.mlp.down_proj.kernel[...] = jnp.zeros_like(block.mlp.down_proj.kernel[...])
    return model


def _exact_eagle1(target) -> sj.EagleHead:
    """h = fc(cat(emb(x), f)) = emb(x), attention and MLP zeroed: LM(h) has the argmax of
    LM(norm(emb(x))), the bigram target's next token after x."""
    head = sj.EagleHead.for_target(target, method="eagle")
    H = target.config.hidden_size
    # Scaled up so its law is peaked: the dynamic tree's best candidates are then the chain of
    # argmaxes to full depth (argmax is unchanged by a positive scale).
    scale = 1e4
    head.fc.kernel[...] = jnp.concatenate([scale * jnp.eye(H), jnp.zeros((H, H))], axis=0)
    head.o_proj.kernel[...] = jnp.zeros_like(head.o_proj.kernel[...])
    head.mlp.down_proj.kernel[...] = jnp.zeros_like(head.mlp.down_proj.kernel[...])
    return head


@pytest.fixture(scope="module")
def bigram(tiny_config):
    target = _bigram_target(tiny_config)
    return target, _exact_eagle1(target)


@pytest.mark.parametrize(
    "k,tree",
    [pytest.param(k, t, id=i, marks=() if i in ("eagle1_25", "dynamic") else SLOW)
     for (k, t), i in zip(VARIANTS, IDS, strict=True)],
)  # fmt: skip
def test_exact_drafter_is_accepted_to_full_depth(bigram, prompts, k, tree):
    target, head = bigram
    ref = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[]).tokens
    out = sj.generate(target, prompts, MAX_NEW, stop_token_ids=[],
                      speculative_config=_cfg("eagle", head, k, tree))  # fmt: skip
    assert out.tokens == ref
    # Every offered depth is accepted: only the budget's last steps offer fewer.
    assert out.stats["acceptance_by_position"] == [1.0] * k
    steps = -(-(MAX_NEW - 1) // (k + 1))  # first token from prefill, then k + 1 per step
    assert out.stats["row_steps"] == [steps] * len(prompts)


def test_tight_buckets_dynamic_tree(target, heads):
    """Prompts as long as their bucket, max_new_tokens = its bucket, a 40-node dynamic tree."""
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, VOCAB, n).tolist() for n in (16, 7)]
    ref = sj.generate(target, rows, 16, stop_token_ids=[]).tokens
    tree = {"dynamic": {"top_k": 4, "total_tokens": 40}}
    out = sj.generate(target, rows, 16, stop_token_ids=[],
                      speculative_config=_cfg("eagle3", heads["eagle3"], 5, tree))  # fmt: skip
    assert out.tokens == ref


# ----------------------------------------------------------------------- trees as data


class _ExplicitTopology(MedusaProposer):
    """Medusa drafting its static tree, but handing the topology over as data."""

    def propose(self, ctx, target, params, step, key):
        draft, pstate = super().propose(ctx, target, params, step, key)
        topo = Topology.of(self.tree, step.root.shape[0])
        return draft.replace(topology=Topology(topo.parents + 0, topo.depth + 0)), pstate


def _run_steps(target, prompts, cfg, steps, proposer_cls=None, sampling=None):
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, sampling, [], cfg, None)
    if proposer_cls is not None:
        proposer = proposer_cls(**vars(static.spec.proposer))
        static = dataclasses.replace(
            static, spec=dataclasses.replace(static.spec, proposer=proposer)
        )
    state = engine._prefill_jit(static, params, *args)
    for _ in range(steps):
        state = engine._step_jit(static, params, state)
    return state


def _host(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def test_static_tree_as_data_is_identical(target, prompts):
    from tests.decoding.test_medusa import noisy_heads

    medusa = noisy_heads(target)
    t1 = sj.SamplingParams(temperature=0.8, top_k=10, seed=4)
    cfg = {"method": "medusa", "model": medusa, "num_speculative_tokens": 3,
           "draft_tree": "topk_3x2"}  # fmt: skip
    for sampling in (None, t1):
        a = _run_steps(target, prompts, cfg, 4, sampling=sampling)
        b = _run_steps(target, prompts, cfg, 4, _ExplicitTopology, sampling=sampling)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_array_equal(_host(x), _host(y))


def test_dynamic_trees_differ_per_row(target, heads, prompts):
    """One step's dynamic trees: data per row, each a valid topological tree of depth <= 4."""
    cfg = _cfg("eagle3", heads["eagle3"], 4, DYNAMIC)
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, None, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)

    @jax.jit
    def draft(p, s):
        view = StepInput(s.proposer, s.last, s.cache.lengths, ~s.done)
        module = nnx.merge(static.graphdef, p[0])
        return static.spec.proposer.propose(static.context, module, p[1], view, None)[0]

    d = draft(params, state)
    parents, depth = np.asarray(d.topology.parents), np.asarray(d.topology.depth)
    assert parents.shape == (4, 9)
    assert len({tuple(r) for r in parents}) > 1, parents  # different shapes in one batch
    for b in range(4):
        assert parents[b, 0] == -1 and depth[b, 0] == 0
        for j in range(1, 9):
            assert 0 <= parents[b, j] < j
            assert depth[b, j] == depth[b, parents[b, j]] + 1 <= 4


def test_static_tree_children_beyond_the_sampling_filter_are_not_offered(target, heads, prompts):
    """top_k=1 at T>0 leaves each parent one finite token: the rank-1 children of "topk_3x2"
    (and their subtrees) are invalid, the rank-0 chain valid."""
    sampling = sj.SamplingParams(temperature=1.0, top_k=1)
    cfg = _cfg("eagle3", heads["eagle3"], 3, "topk_3x2", verification="one_hot")
    _, _, static, params, args = engine._setup(target, prompts, MAX_NEW, sampling, [], cfg, None)
    state = engine._prefill_jit(static, params, *args)
    view = StepInput(state.proposer, state.last, state.cache.lengths, ~state.done)
    module = nnx.merge(static.graphdef, params[0])
    key = sp.step_key(state.keys, 1)
    valid = np.asarray(
        static.spec.proposer.propose(static.context, module, params[1], view, key)[0].valid
    )
    tree = static.spec.tree
    on_chain = [True]
    for j in range(1, tree.num_nodes):
        on_chain.append(on_chain[int(tree.parents_array[j])] and int(tree.rank[j]) == 0)
    assert sum(on_chain) == 4
    assert valid.tolist() == [on_chain] * len(prompts)


def test_keep_best_is_closed_under_ancestors_on_ties():
    """A saturated softmax gives children their parent's score: the parent is kept first."""
    # Candidates: 0, 1 under the root; 2, 3 under 0; 4 under 2. Scores tie down the chain 0-2-4.
    tokens = jnp.asarray([[10, 11, 12, 13, 14]])
    scores = jnp.asarray([[0.0, -5.0, 0.0, -1.0, 0.0]])
    parents = jnp.asarray([[-1, -1, 0, 0, 2]])
    depth = jnp.asarray([1, 1, 2, 2, 3])
    tok, valid, topo = keep_best(tokens, scores, parents, depth, 3)
    assert np.asarray(tok).tolist() == [[10, 12, 14]]
    assert np.asarray(topo.parents).tolist() == [[-1, 0, 1, 2]]
    assert np.asarray(topo.depth).tolist() == [[0, 1, 2, 3]]
    assert np.asarray(valid).all()
    # -inf candidates fill the block only when nothing better exists, and are not offered.
    scores = jnp.asarray([[0.0, -jnp.inf, -jnp.inf, -jnp.inf, -jnp.inf]])
    tok, valid, topo = keep_best(tokens, scores, parents, depth, 2)
    assert np.asarray(valid).tolist() == [[True, False]]


def test_keep_best_never_offers_a_node_whose_parent_was_dropped():
    """Crafted scores where a child outscores its parent (impossible for real log-probs): the
    child and its kept descendant are kept but not offered, never re-hung under the root."""
    # 0, 1 under the root; 2 under 1; 3 under 2. Candidate 1 loses to 0, 2 and 3.
    tokens = jnp.asarray([[10, 11, 12, 13], [10, 11, 12, 13]])
    scores = jnp.asarray([[0.0, -9.0, -1.0, -2.0], [0.0, -1.0, -2.0, -3.0]])
    parents = jnp.asarray([[-1, -1, 1, 2], [-1, -1, 1, 2]])
    depth = jnp.asarray([1, 1, 2, 3])
    tok, valid, topo = keep_best(tokens, scores, parents, depth, 3)
    assert np.asarray(tok).tolist() == [[10, 12, 13], [10, 11, 12]]
    assert np.asarray(valid).tolist() == [[True, False, False], [True, True, True]]
    assert np.asarray(topo.parents)[1].tolist() == [-1, 0, 0, 2]


def test_dynamic_tree_scoring_law():
    """T=0: the drafter's law sharpened by GREEDY_SCORE_TEMPERATURE; T>0: the decode's processed
    law (top-k outside -inf); an explicit score_temperature at any T."""
    logits = jax.random.normal(jax.random.key(0), (2, 3, 11)) * 3
    tree = DynamicTree(3, 4, 8)
    greedy, t07 = sj.SamplingParams(), sj.SamplingParams(temperature=0.7, top_k=4)
    t = GREEDY_SCORE_TEMPERATURE
    np.testing.assert_allclose(tree.score_logprobs(logits, greedy),
                               jax.nn.log_softmax(logits / t), rtol=1e-6)  # fmt: skip
    got = np.asarray(tree.score_logprobs(logits, t07))
    assert (np.isfinite(got).sum(-1) == 4).all()  # top-k 4 keeps 4 tokens per law
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, rtol=1e-5)
    top = np.argsort(-np.asarray(logits), -1)[..., :4]
    want = np.asarray(jax.nn.log_softmax(np.take_along_axis(np.asarray(logits), top, -1) / 0.7))
    np.testing.assert_allclose(np.take_along_axis(got, top, -1), want, rtol=1e-5)
    fixed = DynamicTree(3, 4, 8, score_temperature=2.0)
    for sampling in (greedy, t07):
        np.testing.assert_allclose(fixed.score_logprobs(logits, sampling),
                                   jax.nn.log_softmax(logits / 2.0), rtol=1e-6)  # fmt: skip


def test_ancestor_mask_and_paths_from_data_match_the_static_tree():
    tree = trees.get_tree("mc_sim_7b_63")
    topo = Topology.of(tree, 2)
    mask = np.asarray(ancestor_mask_of(topo.parents, tree.max_depth))
    assert (mask == tree.ancestor_mask[None]).all()
    nodes = jnp.asarray([17, 63])
    paths = np.asarray(path_to(topo.parents, topo.depth, nodes, tree.max_depth))
    assert (paths == tree.node_paths[[17, 63]]).all()


# ------------------------------------------------------------------- the drafter's state


@pytest.mark.parametrize("method", ["eagle3", pytest.param("eagle", marks=pytest.mark.slow)])
def test_drafter_state_after_commits_equals_a_fresh_prefill(target, heads, prompts, method):
    """After several steps the drafter's committed cache and hidden equal what a prefill of
    the whole committed sequence (target features recomputed) gives: the re-run over the
    accepted tokens with the target's features leaves exactly what the next draft needs."""
    cfg = _cfg(method, heads[method], 4, DYNAMIC)
    state = _run_steps(target, prompts, cfg, 3)
    num, out = np.asarray(state.num_out), np.asarray(state.out)
    rows = [p + out[b, : num[b] - 1].tolist() for b, p in enumerate(prompts)]  # committed
    fresh = _run_steps(target, rows, cfg, 0)
    a, b = state.proposer, fresh.proposer
    lengths = np.asarray(a.cache.lengths)[: len(rows)]
    assert lengths.tolist() == [len(r) for r in rows] == np.asarray(b.cache.lengths)[:4].tolist()
    np.testing.assert_allclose(np.asarray(a.hidden)[:4], np.asarray(b.hidden)[:4], atol=2e-4)
    for r, n in enumerate(lengths):
        for buf in ("k", "v"):
            x = np.asarray(getattr(a.cache, buf))[0, r, :, :n]
            y = np.asarray(getattr(b.cache, buf))[0, r, :, :n]
            np.testing.assert_allclose(x, y, atol=2e-4)


def test_one_compile_per_bucket(target, heads, prompts):
    cfg = _cfg("eagle3", heads["eagle3"], 4, DYNAMIC)
    sj.generate(target, prompts, MAX_NEW, speculative_config=cfg)
    before = engine.trace_count()
    sj.generate(target, prompts[:3], MAX_NEW - 5, speculative_config=cfg)  # same buckets
    other = sj.EagleHead.for_target(target, method="eagle3", seed=9)  # same shapes: data
    sj.generate(target, [p[::-1] for p in prompts], MAX_NEW,
                speculative_config=_cfg("eagle3", other, 4, DYNAMIC))  # fmt: skip
    assert engine.trace_count() == before


# -------------------------------------------------------------------------- refusals


def _refused(target, cfg, match, sampling=None):
    before = engine.trace_count()
    with pytest.raises(ValueError, match=match):
        sj.generate(target, [[1, 2, 3]], 8, sampling, speculative_config=cfg)
    assert engine.trace_count() == before, "an invalid config reached the compiler"


def test_refusals(target, heads, tiny_config):
    from tests.decoding.test_medusa import noisy_heads

    e1, e3 = heads["eagle"], heads["eagle3"]
    t1 = sj.SamplingParams(temperature=1.0)
    _refused(target, _cfg("eagle3", e1, 2), r"method'\]='eagle3' but the drafter is an 'eagle'")
    _refused(target, _cfg("eagle", noisy_heads(target), 2),
             r"must be an EAGLE drafter .* got MedusaHeads \(heads for method 'medusa'\)")  # fmt: skip
    _refused(target, {"method": "medusa", "model": e3, "num_speculative_tokens": 2},
             r"must be Medusa heads .* got EagleHead \(heads for method 'eagle3'\)")  # fmt: skip
    _refused(target, {"method": "eagle3", "num_speculative_tokens": 2},
             r"\['model'\] is required for method='eagle3'")  # fmt: skip
    _refused(target, {"method": "ngram", "num_speculative_tokens": 2, "draft_tree": DYNAMIC},
             r"draft_tree'\] is only supported for methods")  # fmt: skip
    draft = sj.Decoder(tiny_config.replace(num_layers=1), seed=2)
    _refused(target, {"method": "draft_model", "model": draft, "num_speculative_tokens": 2,
                      "draft_tree": DYNAMIC}, r"dynamic tree\) is only supported for methods")  # fmt: skip
    _refused(target, _cfg("eagle", e1, 3, DYNAMIC, verification="probabilistic"),
             r"'probabilistic' needs sampled drafts; a dynamic tree", t1)  # fmt: skip
    _refused(target, _cfg("eagle", e1, 3, DYNAMIC, verification="typical", allow_lossy=True),
             r"'typical' .* needs a static tree", t1)  # fmt: skip
    _refused(target, _cfg("eagle", e1, 3, {"dynamic": {"top_k": 2, "total_tokens": 11}}),
             r"total_tokens=11 exceeds the 10 candidates")  # fmt: skip
    _refused(target, _cfg("eagle", e1, 3, {"dynamic": {"top_k": 2, "total_tokens": 2}}),
             r"total_tokens=2 is smaller than the depth 3")  # fmt: skip
    _refused(target, _cfg("eagle", e1, 3, {"dynamic": {"top_k": 2, "size": 4}}),
             r"unknown keys \['size'\]")  # fmt: skip
    for bad in (0, -1.0, float("nan"), "hot"):
        _refused(target, _cfg("eagle", e1, 3, {"dynamic": {"top_k": 2, "score_temperature": bad}}),
                 r"score_temperature")  # fmt: skip
    _refused(target, _cfg("eagle", e1, 2, "eagle1_25"),
             r"has depth 5, deeper than num_speculative_tokens=2")  # fmt: skip
    deep = sj.EagleHead(sj.EagleConfig("eagle3", e3.config.layer, tap_layers=(0, 1, 5)))
    _refused(target, _cfg("eagle3", deep, 2), r"tap_layers=\[0, 1, 5\] include \[5\], outside "
             r"the target's num_layers=2")  # fmt: skip
    wide = sj.Decoder(tiny_config.replace(hidden_size=48, head_dim=12), seed=0)
    _refused(target, _cfg("eagle", sj.EagleHead.for_target(wide, method="eagle"), 2),
             "hidden_size=48, the target's hidden_size is 32")  # fmt: skip


def test_auto_verification(target, heads):
    """T>0: EAGLE chains are sampled and verified probabilistically by default, trees one-hot."""
    from specjax.decoding import spec_config

    e1 = heads["eagle"]
    parse = lambda cfg: spec_config.parse(cfg, temperature=1.0).verification  # noqa: E731
    assert parse(_cfg("eagle", e1, 3)) == "probabilistic"
    assert parse(_cfg("eagle", e1, 3, "topk_3x2")) == "one_hot"
    assert parse(_cfg("eagle3", e1, 3, DYNAMIC)) == "one_hot"
    assert spec_config.parse(_cfg("eagle", e1, 3), temperature=0.0).verification == "greedy"
