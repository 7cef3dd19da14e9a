"""Tree topologies: buffers against hand-computed arrays, builders, validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import trees
from specjax.decoding.proposers import tree_drafting
from specjax.decoding.topology import MAX_TREE_NODES


def _eq(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_chain3_buffers():
    t = trees.chain(3)
    assert t.parents == (-1, 0, 1, 2)
    assert (t.num_nodes, t.num_drafts, t.max_depth) == (4, 3, 3)
    _eq(t.depth, [0, 1, 2, 3])
    _eq(t.rank, [0, 0, 0, 0])
    _eq(t.ancestor_mask, np.tril(np.ones((4, 4), bool)))
    _eq(t.paths, [[0, 1, 2, 3]])
    _eq(t.node_paths, [[0, -1, -1, -1], [0, 1, -1, -1], [0, 1, 2, -1], [0, 1, 2, 3]])
    assert t.children == ((1,), (2,), (3,), ())
    assert t.leaves == (3,)
    assert t.choices == [(0,), (0, 0), (0, 0, 0)]
    assert t.depth.dtype == np.int32 and t.paths.dtype == np.int32


def test_chain0_is_root_alone():
    t = trees.chain(0)
    assert (t.num_nodes, t.num_drafts, t.max_depth) == (1, 0, 0)
    _eq(t.paths, [[0]])
    _eq(t.ancestor_mask, [[True]])


def test_hand_written_choices_tree():
    # Given out of order on purpose: nodes are numbered by (len, tuple), like Medusa.
    t = trees.from_choices([(1, 0), (0,), (0, 1), [1], (0, 0)])
    # node:     0     1     2     3       4       5
    # choice:  ()   (0,)  (1,)  (0, 0)  (0, 1)  (1, 0)
    assert t.parents == (-1, 0, 0, 1, 1, 2)
    _eq(t.depth, [0, 1, 1, 2, 2, 2])
    _eq(t.rank, [0, 0, 1, 0, 1, 0])
    assert t.max_depth == 2
    expected_mask = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 0, 1, 0, 0, 0],
            [1, 1, 0, 1, 0, 0],
            [1, 1, 0, 0, 1, 0],
            [1, 0, 1, 0, 0, 1],
        ],
        bool,
    )
    _eq(t.ancestor_mask, expected_mask)
    _eq(t.paths, [[0, 1, 3], [0, 1, 4], [0, 2, 5]])
    assert t.children == ((1, 2), (3, 4), (5,), (), (), ())
    assert t.leaves == (3, 4, 5)
    assert t.choices == [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    assert trees.from_choices(t.choices) == t


def test_topk_tree_2_2():
    t = trees.topk_tree(2, 2)
    assert t.parents == (-1, 0, 0, 1, 1, 2, 2)
    _eq(t.depth, [0, 1, 1, 2, 2, 2, 2])
    _eq(t.rank, [0, 0, 1, 0, 1, 0, 1])
    _eq(t.paths, [[0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 2, 6]])
    assert t == trees.from_choices([(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)])
    assert t == trees.get_tree("topk_2x2")


def test_tree_is_hashable_static_and_buffers_read_only():
    a, b = trees.from_choices([(0,), (0, 0)]), trees.chain(2)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(ValueError):
        a.depth[0] = 3  # cached buffers are shared: they must not be writable


def test_named_trees():
    t = trees.get_tree("mc_sim_7b_63")
    assert (t.num_drafts, t.max_depth) == (63, 4)
    assert len(set(trees.MEDUSA_MC_SIM_7B_63)) == 63
    assert trees.from_choices(t.choices) == t  # Medusa's list is already in a valid form
    assert trees.get_tree("chain_5") == trees.chain(5)
    assert trees.get_tree([(0,), (1,)]).parents == (-1, 0, 0)
    assert trees.get_tree(t) is t
    assert trees.get_tree("small_2x3").parents == (-1, 0, 0, 0, 1, 1)


@pytest.mark.parametrize(
    "choices, match",
    [
        ([(0,), (0, 0), (0, 0)], r"\(0, 0\) appears more than once"),
        ([(0,), (0, 1, 0), (0, 0), (0, 1)], None),  # valid control
        ([(0,), (1, 0)], r"choice \(1, 0\): its prefix \(1,\) is missing"),
        ([(0,), (1,), (1, 0), (0, 0, 0)], r"choice \(0, 0, 0\): its prefix \(0, 0\)"),
        ([(0,), (2,)], r"choice \(2,\): sibling ranks must be contiguous.*\(1,\) is missing"),
        ([(1,)], r"choice \(1,\).*\(0,\) is missing"),
        ([()], r"non-empty"),
        ([(0, -1)], r"ranks >= 0"),
        ([(0.5,)], r"sequence of ints"),
    ],
)
def test_from_choices_validation(choices, match):
    if match is None:
        trees.from_choices(choices)
        return
    with pytest.raises(ValueError, match=match):
        trees.from_choices(choices)


def test_builder_validation():
    with pytest.raises(ValueError, match="depth=0"):
        trees.topk_tree(0, 2)
    with pytest.raises(ValueError, match="width=0"):
        trees.topk_tree(2, 0)
    with pytest.raises(ValueError, match="MAX_TREE_NODES=512"):
        trees.topk_tree(9, 2)  # 1023 nodes
    assert trees.topk_tree(8, 2).num_nodes == 511
    with pytest.raises(ValueError, match="MAX_TREE_NODES"):
        trees.chain(MAX_TREE_NODES)
    with pytest.raises(ValueError, match="n=-1"):
        trees.chain(-1)
    with pytest.raises(ValueError, match=r"parents\[0\] must be -1"):
        trees.Tree((0, 0))
    with pytest.raises(ValueError, match=r"parents\[2\]=2 must be in \[0, 1\]"):
        trees.Tree((-1, 0, 2))
    with pytest.raises(ValueError, match="unknown"):
        trees.get_tree("mc_sim_7b_64")


def _brute_force_best(acc: np.ndarray, n: int) -> set:
    """The n most probable rank paths (every path up to depth K enumerated)."""
    import itertools

    K, R = acc.shape
    paths = [p for d in range(1, K + 1) for p in itertools.product(range(R), repeat=d)]
    prob = {p: float(np.prod([acc[i, r] for i, r in enumerate(p)])) for p in paths}
    ranked = sorted(paths, key=lambda p: (-prob[p], len(p), p))
    return set(ranked[:n]), prob


@pytest.mark.parametrize("n", [1, 4, 9, 20])
def test_sparse_tree_keeps_the_most_probable_candidates(n):
    acc = np.array([[0.55, 0.15, 0.05], [0.35, 0.12, 0.06], [0.25, 0.1, 0.04]])
    tree = trees.sparse_tree(acc, n)
    best, prob = _brute_force_best(acc, n)
    assert set(tree.choices) == best
    assert tree.num_drafts == n
    # The expected accepted length it maximises: no other n-set beats it.
    assert sum(prob[c] for c in tree.choices) == pytest.approx(sum(sorted(prob.values())[-n:]))


def test_sparse_tree_smooths_noisy_accuracies_and_refuses_bad_input():
    # Rank 2 measured above rank 1 (noise): treated as rank 1's, so ranks stay contiguous.
    tree = trees.sparse_tree([[0.5, 0.1, 0.2], [0.4, 0.1, 0.1]], 4)
    assert tree.choices == [(0,), (1,), (2,), (0, 0)]
    with pytest.raises(ValueError, match="accuracies must be"):
        trees.sparse_tree([[0.5, -0.1]], 2)
    with pytest.raises(ValueError, match="only 2 candidates exist"):
        trees.sparse_tree([[0.5, 0.1]], 3)


def test_a_chain_level_ranks_as_top_k_does():
    # A chain's level takes each parent's best by a reduction, not a sort: the same token
    # (ties to the lower id) and the same validity (a row of -inf has no draft) as top_k.
    scores = jnp.array(
        [
            [[0.5, 2.0, 2.0, -1.0], [-jnp.inf] * 4],
            [[3.0, -jnp.inf, 3.0, 1.0], [0.0, 0.0, 0.0, 0.0]],
        ]
    )  # [B=2, n=2, V=4]
    key = jax.random.split(jax.random.key(0), 2)
    tokens, ok = tree_drafting.children(scores, (0, 1), (0, 0), key, 1, sampled=False)
    score, top = jax.lax.top_k(scores, 1)
    _eq(tokens, top[..., 0])
    _eq(ok, jnp.isfinite(score[..., 0]))
    _eq(tokens, [[1, 0], [0, 0]])
    _eq(ok, [[True, False], [True, True]])
