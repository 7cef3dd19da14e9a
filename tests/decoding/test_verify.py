"""The verifier: exact output laws, Monte Carlo laws of the full walk, greedy, masking, typical."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specjax import sampling as sp
from specjax.decoding import trees
from specjax.decoding import verify as vf
from specjax.decoding.topology import Topology, TreeShape

LOSSLESS = ("probabilistic", "one_hot", "strict")
SMALL = trees.get_tree("small_2x3")  # parents (-1, 0, 0, 0, 1, 1)


# ------------------------------------------------------------------------- exact algebra


def _pair(vocab: int, case: str, seed: int):
    """A target p and a draft q over `vocab` tokens, float32, in one of the edge cases."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(vocab, 0.5))
    q = rng.dirichlet(np.full(vocab, 0.5))
    half = vocab // 2
    if case == "equal":
        q = p.copy()
    elif case == "disjoint":
        p[half:], q[:half] = 0.0, 0.0
    elif case == "one_hot_q":
        q = np.eye(vocab)[int(np.argmin(p))]  # the draft is sure of the target's least likely
    elif case == "sparse_q":  # q(x) = 0 on half the tokens, p(x) > 0 there
        q[rng.permutation(vocab)[:half]] = 0.0
    p, q = p / p.sum(), q / q.sum()
    return p.astype(np.float32), q.astype(np.float32)


@functools.cache
def _laws_fn(mode: str):
    """jit(vmap(node_output_law)) over many token tuples; one compile per shape and mode."""

    def law(p, q, toks):  # p [V], q [V] shared by the i.i.d. siblings, toks [k]
        return vf.node_output_law(p, jnp.broadcast_to(q, (toks.shape[0], *q.shape)), toks, mode)

    return jax.jit(jax.vmap(law, in_axes=(None, None, 0)))


def _all_tuples(vocab: int, k: int) -> np.ndarray:
    return np.array(list(itertools.product(range(vocab), repeat=k)), np.int32)  # [V^k, k]


@pytest.mark.parametrize("vocab", [8, 17, 32])
@pytest.mark.parametrize("case", ["random", "equal", "disjoint", "one_hot_q", "sparse_q"])
@pytest.mark.parametrize("k", [1, 3], ids=["chain", "tree3"])
def test_node_law_is_exactly_p(vocab, case, k):
    """One child (chain) or 3 siblings (tree): the emitted token's law is p, to 1e-6."""
    p, q = _pair(vocab, case, seed=vocab * 10 + k)
    toks = _all_tuples(vocab, k)  # [V^k, k]
    # probabilistic: siblings are i.i.d. from q, so average the conditional laws over q^k.
    laws = np.asarray(_laws_fn("probabilistic")(p, q, toks), np.float64)  # [V^k, V]
    assert np.isfinite(laws).all()
    weights = np.prod(q.astype(np.float64)[toks], axis=1)  # [V^k]
    np.testing.assert_allclose(weights @ laws, p, atol=1e-6)
    # one_hot / strict: deterministic drafts, so the law given *any* tokens is p; this covers
    # distinct top-k children, tokens with p(x) = 0 or q(x) = 0, and duplicates.
    for mode in ("one_hot", "strict"):
        laws = np.asarray(_laws_fn(mode)(p, q, toks), np.float64)  # [V^k, V]
        np.testing.assert_allclose(laws, np.broadcast_to(p, laws.shape), atol=1e-6)


def test_chain_law_matches_node_law_and_greedy_law():
    p, q = _pair(8, "random", seed=3)
    for x in range(8):
        np.testing.assert_allclose(
            vf.chain_law(p, q, x, "probabilistic"),
            vf.node_output_law(p, q[None], jnp.array([x]), "probabilistic"),
        )
        np.testing.assert_array_equal(vf.chain_law(p, None, x, "greedy"), np.eye(8)[p.argmax()])


@pytest.mark.parametrize("mode", ["probabilistic", "one_hot"])
def test_broken_residual_is_detected(monkeypatch, mode):
    """Replacing the residual by the running p itself must break the law (the test can fail)."""
    monkeypatch.setattr(vf, "reject_update", lambda r, q, x, mode: r / r.sum())
    p, q = _pair(8, "random", seed=5)
    toks = _all_tuples(8, 1)  # [V, 1]
    law = jax.vmap(lambda t: vf.node_output_law(p, q[None], t, mode))(toks)  # [V, V]
    law = np.asarray(law, np.float64)
    law = q @ law if mode == "probabilistic" else law[int(p.argmax())]  # x = top token
    assert np.abs(law - p).max() > 1e-2


def test_zero_residual_primitives_are_finite():
    p, _ = _pair(8, "random", seed=7)
    for x in range(8):
        r = vf.reject_update(p, p, jnp.int32(x), "probabilistic")  # p == q: residual is 0
        assert np.isfinite(r).all() and abs(float(r.sum()) - 1) < 1e-6
    hot = np.eye(8, dtype=np.float32)[3]
    r = vf.reject_update(hot, None, jnp.int32(3), "one_hot")  # zeroing the only mass
    np.testing.assert_array_equal(r, hot)
    zero_q = np.zeros(8, np.float32)
    assert float(vf.accept_prob(hot, zero_q, jnp.int32(3), "probabilistic")) == 1.0
    assert float(vf.accept_prob(hot, zero_q, jnp.int32(2), "probabilistic")) == 0.0


# ------------------------------------------------------------------- full verify, sampled

ROWS = 20000
VOCAB = 8


def _run(tree, mode, target, tokens, draft=None, valid=None, seed=0, logits=None):
    rows = tokens.shape[0]
    key = jax.random.split(jax.random.key(seed), rows)  # [B]
    fn = jax.jit(vf.verify, static_argnames=("tree", "mode"))
    return fn(
        jnp.asarray(target), jnp.asarray(tokens), tree, mode, key,
        draft_probs=None if draft is None else jnp.asarray(draft),
        node_valid=None if valid is None else jnp.asarray(valid),
        target_logits=logits,
    )  # fmt: skip


def _soft(rng, *shape):
    """Random laws mixed with uniform so every cell of a chi-square has mass."""
    d = rng.dirichlet(np.full(VOCAB, 0.7), size=shape)
    return (0.6 * d + 0.4 / VOCAB).astype(np.float32)


def _sample(rng, probs):
    """One draw per row of probs [..., V] (float64 inverse cdf in numpy)."""
    cdf = np.cumsum(probs.astype(np.float64), axis=-1)
    u = rng.random(probs.shape[:-1])[..., None] * cdf[..., -1:]
    return (u < cdf).argmax(-1).astype(np.int32)


def _top(probs, k):
    return np.argsort(-probs, axis=-1, kind="stable")[..., :k].astype(np.int32)


def _check_law(observed_tokens, expected_probs, cells):
    counts = np.bincount(observed_tokens, minlength=cells)
    exp = np.asarray(expected_probs, np.float64).ravel()
    exp = exp / exp.sum() * counts.sum()
    assert stats.chisquare(counts, exp).pvalue > 1e-3


def _second_token(rng, res, p1_table):
    """Token 2 of the stream: emitted this step, else the next step's draw from p1[y1]."""
    y1, y2 = np.asarray(res.tokens[:, 0]), np.asarray(res.tokens[:, 1])
    fresh = _sample(rng, p1_table[y1])
    return y1, np.where(np.asarray(res.num_accepted) >= 1, y2, fresh)


@pytest.mark.parametrize("mode", ["probabilistic", "one_hot"])
def test_monte_carlo_chain(mode):
    """Depth-2 chain; p and q at node 1 depend on the drafted token, as they do for real."""
    rng = np.random.default_rng(11)
    p0, p1, p2 = _soft(rng), _soft(rng, VOCAB), _soft(rng, VOCAB, VOCAB)  # laws after 0/1/2
    q1, q2 = rng.dirichlet(np.full(VOCAB, 0.5)), rng.dirichlet(np.full(VOCAB, 0.5), VOCAB)
    if mode == "probabilistic":
        x1 = _sample(rng, np.broadcast_to(q1, (ROWS, VOCAB)))
        x2 = _sample(rng, q2[x1])
    else:  # deterministic drafts: a good drafter's argmax chain
        x1 = np.full(ROWS, _top(p0, 1)[0], np.int32)
        x2 = _top(p1[x1], 1)[:, 0]
    tokens = np.stack([np.zeros(ROWS, np.int32), x1, x2], 1)  # [B, 3]
    target = np.stack([np.broadcast_to(p0, (ROWS, VOCAB)), p1[x1], p2[x1, x2]], 1)  # [B, 3, V]
    draft = np.stack(
        [np.broadcast_to(q1, (ROWS, VOCAB)), np.broadcast_to(q1, (ROWS, VOCAB)), q2[x1]], 1
    ).astype(np.float32)  # [B, 3, V]; node 0's entry unused
    res = _run(trees.chain(2), mode, target, tokens, draft)
    assert res.tokens.shape == (ROWS, 3)
    y1, y2 = _second_token(rng, res, p1)
    _check_law(y1, p0, VOCAB)
    _check_law(y1 * VOCAB + y2, p0[:, None] * p1, VOCAB * VOCAB)
    assert 0.1 < float(np.mean(res.num_accepted)) < 1.9  # both branches are exercised
    # a row's result depends on its own key and data only, not on the batch around it
    few = _run(trees.chain(2), mode, target[:3], tokens[:3], draft[:3])
    np.testing.assert_array_equal(few.tokens, res.tokens[:3])


@pytest.mark.parametrize("mode", ["probabilistic", "one_hot"])
def test_monte_carlo_tree(mode):
    """small_2x3: 3 children of the root, 2 under the first."""
    rng = np.random.default_rng(12)
    p0, p1 = _soft(rng), _soft(rng, VOCAB)
    q0, q1 = rng.dirichlet(np.full(VOCAB, 0.5)), rng.dirichlet(np.full(VOCAB, 0.5), VOCAB)
    if mode == "probabilistic":  # siblings i.i.d. from their parent's draft law
        kids = _sample(rng, np.broadcast_to(q0, (ROWS, 3, VOCAB)))  # [B, 3]
        grand = _sample(rng, np.broadcast_to(q1[kids[:, 0]][:, None], (ROWS, 2, VOCAB)))
    else:  # distinct top-k children
        kids = np.broadcast_to(_top(q0, 3), (ROWS, 3))
        grand = _top(q1[kids[:, 0]], 2)  # [B, 2]
    tokens = np.concatenate([np.zeros((ROWS, 1), np.int32), kids, grand], 1)  # [B, 6]
    target = np.concatenate(
        [np.broadcast_to(p0, (ROWS, 1, VOCAB)), p1[tokens[:, 1:]]], 1
    )  # [B, 6, V]; depth-2 nodes' own laws only feed the third token
    draft = np.concatenate(
        [np.broadcast_to(q0, (ROWS, 4, VOCAB)), np.repeat(q1[kids[:, :1]], 2, 1)], 1
    ).astype(np.float32)  # [B, 6, V]
    res = _run(SMALL, mode, target, tokens, draft, seed=1)
    y1, y2 = _second_token(rng, res, p1)
    _check_law(y1, p0, VOCAB)
    _check_law(y1 * VOCAB + y2, p0[:, None] * p1, VOCAB * VOCAB)
    path = np.asarray(res.path)
    assert set(np.unique(path[:, 1])) >= {-1, 1, 2, 3}  # every sibling gets accepted sometimes


# -------------------------------------------------------------------------------- greedy


def _peaked(argmaxes, vocab=8):
    """Target laws [..., V] whose argmax is `argmaxes`."""
    argmaxes = np.asarray(argmaxes)
    probs = np.full((*argmaxes.shape, vocab), 0.5 / (vocab - 1), np.float32)
    np.put_along_axis(probs, argmaxes[..., None], 0.5, axis=-1)
    return probs


def test_greedy_chain_prefix_and_ties():
    amax = np.array([[3, 5, 1, 4, 6], [3, 5, 1, 4, 6]])  # argmax after nodes 0..4
    tokens = np.array([[0, 3, 5, 7, 4], [0, 3, 5, 1, 4]], np.int32)  # row 0 misses at node 3
    target = _peaked(amax)  # [2, 5, 8]
    res = _run(trees.chain(4), "greedy", target, tokens)
    np.testing.assert_array_equal(res.num_accepted, [2, 4])
    np.testing.assert_array_equal(res.tokens, [[3, 5, 1, 0, 0], [3, 5, 1, 4, 6]])
    np.testing.assert_array_equal(res.path, [[0, 1, 2, -1, -1], [0, 1, 2, 3, 4]])
    # ties: ids 2 and 5 share the maximum; the lowest id is the target's choice
    tie = np.zeros((2, 2, 8), np.float32)
    tie[:, :, [2, 5]] = 0.5
    res = _run(trees.chain(1), "greedy", tie, np.array([[0, 5], [0, 2]], np.int32))
    np.testing.assert_array_equal(res.tokens, [[2, 0], [2, 2]])
    np.testing.assert_array_equal(res.num_accepted, [0, 1])


def test_greedy_tree_follows_argmax_path():
    # small_2x3 nodes: 1, 2, 3 under the root; 4, 5 under node 1
    amax = np.array([[7, 6, 2, 0, 1, 3], [7, 6, 2, 0, 1, 3]])
    tokens = np.array([[0, 3, 7, 1, 6, 6], [0, 7, 3, 7, 5, 6]], np.int32)
    res = vf.verify(_peaked(amax), tokens, SMALL, "greedy", None)  # greedy needs no key
    np.testing.assert_array_equal(res.num_accepted, [1, 2])
    np.testing.assert_array_equal(res.path, [[0, 2, -1], [0, 1, 5]])
    np.testing.assert_array_equal(res.tokens, [[7, 2, 0], [7, 6, 3]])


def _greedy_scan(amax, tokens, valid, parents):
    """The greedy walk as the module's docstring states it: scan nodes 1..P in index order,
    enter a valid node whose parent is the current node and whose token is the argmax there."""
    c = 0
    for j in range(1, len(tokens)):
        if valid[j] and parents[j] == c and tokens[j] == amax[c]:
            c = j
    return c


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 2**31 - 1))
def test_greedy_walk_equals_the_scan_over_nodes(seed):
    """The vectorised greedy walk (scatter-min of matching children, Dmax descents) accepts
    exactly the node the sequential scan does, on random per-row trees with repeated sibling
    tokens, invalid nodes and a small vocabulary (so most drafts match somewhere).

    One shape for every example (one compile): each row draws its own tree size (the nodes
    past it invalid), vocabulary (2, 3 or 5 ids) and shape, and the walk's static depth bound
    is the block's, above most rows' real depth."""
    rng = np.random.default_rng(seed)
    rows, num_nodes, width = 24, 40, 5
    parents = np.full((rows, num_nodes), -1, np.int32)
    depth = np.zeros((rows, num_nodes), np.int32)
    for j in range(1, num_nodes):
        parents[:, j] = rng.integers(0, j, size=rows)
        depth[:, j] = depth[np.arange(rows), parents[:, j]] + 1
    vocab = rng.choice([2, 3, 5], size=(rows, 1))
    amax = rng.integers(0, width, size=(rows, num_nodes)) % vocab
    tokens = (rng.integers(0, width, size=(rows, num_nodes)) % vocab).astype(np.int32)
    size = rng.integers(2, num_nodes + 1, size=(rows, 1))
    valid = (rng.random((rows, num_nodes)) < 0.8) & (np.arange(num_nodes)[None, :] < size)
    topo = Topology(parents=jnp.asarray(parents), depth=jnp.asarray(depth))
    shape = TreeShape(num_nodes, num_nodes - 1)
    res = vf.verify(_peaked(amax), tokens, shape, "greedy", None, topology=topo, node_valid=valid)
    want = [_greedy_scan(amax[b], tokens[b], valid[b], parents[b]) for b in range(rows)]
    num = np.asarray(res.num_accepted)
    last = np.asarray(res.path)[np.arange(rows), num]
    np.testing.assert_array_equal(last, want)
    np.testing.assert_array_equal(num, depth[np.arange(rows), want])
    np.testing.assert_array_equal(
        np.asarray(res.tokens)[np.arange(rows), num], amax[np.arange(rows), want]
    )
    assert max(depth[b, w] for b, w in enumerate(want)) >= 2  # some walks go deep


# ------------------------------------------------------------------------ masking, NaNs


def test_node_valid_shrinks_depth():
    amax = np.array([[3, 5, 1, 4, 6]])
    tokens = np.array([[0, 3, 5, 1, 4]], np.int32)  # every draft matches
    valid = np.array([[True, True, True, False, False]])  # depth limited to 2
    res = _run(trees.chain(4), "greedy", _peaked(amax), tokens, valid=valid)
    np.testing.assert_array_equal(res.num_accepted, [2])
    np.testing.assert_array_equal(res.tokens, [[3, 5, 1, 0, 0]])


def test_invalid_nodes_never_accepted_nor_touch_r():
    # Root law is one-hot at 4; node 1 (invalid) and node 2 both draft 4. If node 1 had
    # been rejected through the walk, r(4) would be 0 and node 2 could not be accepted.
    target = np.broadcast_to(np.eye(8, dtype=np.float32)[4], (1, 6, 8))
    tokens = np.array([[0, 4, 4, 1, 4, 4]], np.int32)
    valid = np.array([[True, False, True, True, True, True]])
    res = _run(SMALL, "one_hot", target, tokens, valid=valid)
    np.testing.assert_array_equal(res.path, [[0, 2, -1]])
    np.testing.assert_array_equal(res.tokens, [[4, 4, 0]])
    # random data, random masks: every node on an accepted path is valid
    rng = np.random.default_rng(2)
    rows = 2000
    target = _soft(rng, rows, 6)
    draft = np.broadcast_to(_soft(rng), (rows, 6, VOCAB))
    tokens = _sample(rng, draft)
    valid = rng.random((rows, 6)) < 0.6
    res = _run(SMALL, "probabilistic", target, tokens, draft, valid)
    path = np.asarray(res.path)
    on_path = np.take_along_axis(valid, np.maximum(path, 0), 1) | (path <= 0)
    assert on_path.all() and (np.asarray(res.num_accepted) > 0).any()


@pytest.mark.parametrize("mode", LOSSLESS)
def test_zero_residual_never_nan(mode):
    """p == q exactly and every draft has p(x) = q(x) = 0: all candidates are rejected for
    sure, the residual max(p - q, 0) is all zeros, and the walk must stay finite."""
    rng = np.random.default_rng(4)
    rows = 64
    p = _soft(rng, rows, 6)
    p[..., 6:] = 0.0
    p /= p.sum(-1, keepdims=True)
    tokens = rng.integers(6, 8, size=(rows, 6)).astype(np.int32)  # only zero-mass tokens
    res = _run(SMALL, mode, p, tokens, draft=p)
    np.testing.assert_array_equal(res.num_accepted, 0)
    assert (np.asarray(res.tokens[:, 0]) < 6).all()


# ------------------------------------------------------------------------------- typical


def test_typical_hand_computed():
    """Thresholds by hand (eps=0.09, delta=0.3):
    root law [.5, .3, .15, .05]: H = 1.1422, 0.3 e^-H = 0.0957 -> threshold 0.09, so tokens
    0, 1, 2 pass and 3 fails. Node-1 law [.2, .4, .2, .2]: threshold min(.09, .0792) = .0792,
    every token passes.
    Row 0: node 1 drafts 3 (fails, so its subtree is cut); nodes 2, 3 (tokens 1, 0) pass
    with length 1; node 3 wins on log-prob (log .5 > log .3).
    Row 1: node 1 drafts 2 (passes); nodes 4, 5 (tokens 0, 1) pass: length 2 beats length 1
    despite lower log-prob, and node 5 beats node 4 on log-prob (log .4 > log .2)."""
    root = [0.5, 0.3, 0.15, 0.05]
    node1 = [0.2, 0.4, 0.2, 0.2]
    target = np.zeros((2, 6, 4), np.float32)
    target[:, 0], target[:, 1] = root, node1
    target[:, 2:] = np.eye(4)[[0, 1, 2, 3]]  # bonus laws: one-hot, so the bonus is known
    tokens = np.array([[0, 3, 1, 0, 0, 1], [0, 2, 1, 0, 0, 1]], np.int32)
    res = _run(SMALL, "typical", target, tokens)
    np.testing.assert_array_equal(res.num_accepted, [1, 2])
    np.testing.assert_array_equal(res.path, [[0, 3, -1], [0, 1, 5]])
    np.testing.assert_array_equal(res.tokens, [[0, 1, 0], [2, 1, 3]])
    # target_logits, when given, is what gets judged: with every law peaked at token 2
    # (threshold .09), only row 1's node 1 (token 2) passes.
    logits = np.log(np.array([0.01, 0.01, 0.97, 0.01], np.float32))
    logits = jnp.asarray(np.broadcast_to(logits, (2, 6, 4)))
    res = _run(SMALL, "typical", target, tokens, logits=logits)
    np.testing.assert_array_equal(res.num_accepted, [0, 1])
    np.testing.assert_array_equal(res.path, [[0, -1, -1], [0, 1, -1]])


def test_argument_errors():
    target = np.full((1, 3, 4), 0.25, np.float32)
    tokens = np.zeros((1, 3), np.int32)
    key = jax.random.split(jax.random.key(0), 1)
    with pytest.raises(ValueError, match="mode='bogus'"):
        vf.verify(target, tokens, trees.chain(2), "bogus", key)
    with pytest.raises(ValueError, match="needs draft_probs"):
        vf.verify(target, tokens, trees.chain(2), "probabilistic", key)
    with pytest.raises(ValueError, match=r"must be \[B, 4, V\]"):
        vf.verify(target, tokens, trees.chain(3), "one_hot", key)
    with pytest.raises(ValueError, match="needs key"):
        vf.verify(target, tokens, trees.chain(2), "one_hot", None)
    with pytest.raises(ValueError, match="typical' takes processed target_probs"):
        vf.verify(target, tokens, trees.chain(2), "typical", key, sampling=sp.SamplingParams())


@pytest.mark.parametrize("mode", ["greedy", "probabilistic", "one_hot", "strict"])
def test_laws_made_inside_the_walk_equal_the_laws_given(mode):
    """verify(logits, sampling=s) (each node's law processed when the walk reaches it, as the
    engine calls it) decides exactly as verify(processed_probs(logits, s)), with top-k and
    top-p filters, on a tree with invalid nodes."""
    rng = np.random.default_rng(3)
    tree = trees.from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    rows, n, vocab = 64, tree.num_nodes, 16
    logits = jnp.asarray(rng.normal(size=(rows, n, vocab)) * 2, jnp.float32)
    greedy = mode == "greedy"
    sampling = sp.SamplingParams(temperature=0.0 if greedy else 0.8, top_k=9, top_p=0.9)
    probs = sp.processed_probs(logits, sampling)  # [B, N, V]
    # Drafts: the target's own top choices half the time, so paths go deep.
    top = np.argsort(-np.asarray(logits), axis=-1, kind="stable")[..., :2]
    at_parent = top[:, np.maximum(tree.parents_array, 0), 0]  # [B, N] the parent's argmax
    tokens = np.where(rng.random((rows, n)) < 0.5, at_parent, rng.integers(0, vocab, (rows, n)))
    q = jax.nn.softmax(jnp.asarray(rng.normal(size=(rows, n, vocab)), jnp.float32), -1)
    valid = rng.random((rows, n)) < 0.9
    key = jax.random.split(jax.random.key(5), rows)
    kw = dict(draft_probs=q if mode == "probabilistic" else None, node_valid=jnp.asarray(valid))
    given = vf.verify(probs, jnp.asarray(tokens, jnp.int32), tree, mode, key, **kw)
    made = vf.verify(logits, jnp.asarray(tokens, jnp.int32), tree, mode, key, sampling=sampling,
                     **kw)  # fmt: skip
    for a, b in zip(jax.tree.leaves(given), jax.tree.leaves(made), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(given.num_accepted).max() >= 2  # the walk went deep somewhere
