"""Static draft trees: the named trees, their builders, and `Tree`, selected by config key.

A static tree is one block topology held constant for every step and row (the block layout,
node 0 the root and nodes 1..P in topological order with siblings in rank order, is
`topology.py`'s). A chain of N drafts is `chain(N)`: parents = (-1, 0, 1, ..., N-1).

Builders: `chain(n)`, `from_choices(choices)` (the Medusa / EAGLE-1 "choices" lists),
`topk_tree(depth, width)`, `sparse_tree(accuracies, n)` (Medusa's, from measured per-rank
accuracies) and `truncate(tree, depth)`; named trees live in `NAMED_TREES`, and `get_tree`
selects one by config key. `Tree` is a frozen, hashable dataclass of plain python ints, so it
can be a static jit argument; its numpy buffers are derived once per topology (an lru_cache
keyed on parents) and are read-only. Trees built every step (EAGLE-2's, lookahead's trie)
live beside their proposers.

Axis letters follow `specjax/models/axes.py`: P draft nodes (P+1 with the root), M = Dmax+1.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from specjax.decoding.topology import check_size
from specjax.validate import check_int

Choice = tuple[int, ...]  # a path of sibling ranks from the root, e.g. (0, 1)

# Medusa's reference sparse tree for Vicuna-7B (FasterDecoding/Medusa,
# medusa/model/medusa_choices.py::mc_sim_7b_63): 63 draft nodes, depth 4. A choice whose
# element k is i holds, at depth k+1, head k's (i+1)-th most likely token (its sibling rank).
MEDUSA_MC_SIM_7B_63: tuple[Choice, ...] = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4),
    (2, 0), (0, 5), (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8),
    (0, 0, 2), (3, 0), (0, 9), (8,), (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0),
    (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3),
    (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0),
    (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0),
    (0, 0, 0, 1), (1, 6), (0, 7, 0),
)  # fmt: skip

# A small two-level tree for tests and CPU runs: 3 children of the root, 2 under the first.
SMALL_2X3: tuple[Choice, ...] = ((0,), (1,), (2,), (0, 0), (0, 1))


# Sparse trees for 4 Medusa heads, `sparse_tree(acc, n)` of the quickstart's heads (Medusa-1 on
# the 6x384 target's greedy continuations, 400 steps; held-out per-rank accuracies, rank 0:
# 0.84 / 0.79 / 0.75 / 0.73 for heads 0-3; experiments/LOG.md 2026-11-30). Smaller than
# mc_sim_7b_63 because verifying a node is not free on a CPU (BENCHMARKS.md "Medusa").
MEDUSA_K4_8: tuple[Choice, ...] = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0))  # fmt: skip
MEDUSA_K4_16: tuple[Choice, ...] = ((0,), (1,), (2,), (0, 0), (0, 1), (0, 2), (1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0))  # fmt: skip
MEDUSA_K4_32: tuple[Choice, ...] = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0), (3, 0), (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4), (0, 1, 0), (0, 2, 0), (0, 3, 0), (1, 0, 0), (2, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 3), (0, 0, 1, 0), (0, 0, 2, 0), (0, 0, 3, 0), (0, 1, 0, 0), (0, 2, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0))  # fmt: skip

# EAGLE-1's default static tree (SafeAILab/EAGLE, eagle/model/choices.py, where it is also
# called mc_sim_7b_63 although it is not Medusa's tree of that name): 25 drafts, depth 5.
EAGLE1_25: tuple[Choice, ...] = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)  # fmt: skip

NAMED_TREES: dict[str, tuple[Choice, ...]] = {
    "eagle1_25": EAGLE1_25,
    "mc_sim_7b_63": MEDUSA_MC_SIM_7B_63,
    "small_2x3": SMALL_2X3,
    "medusa_k4_8": MEDUSA_K4_8,
    "medusa_k4_16": MEDUSA_K4_16,
    "medusa_k4_32": MEDUSA_K4_32,
}


class _Buffers(NamedTuple):
    depth: np.ndarray  # [P+1] int32
    rank: np.ndarray  # [P+1] int32
    children: tuple[tuple[int, ...], ...]  # children[i]: node ids in index (= rank) order
    ancestor_mask: np.ndarray  # [P+1, P+1] bool
    node_paths: np.ndarray  # [P+1, M] int32, -1 padded
    leaves: tuple[int, ...]
    paths: np.ndarray  # [num_leaves, M] int32, -1 padded
    choices: tuple[Choice, ...]  # one per draft node 1..P


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=256)
def _buffers(parents: tuple[int, ...]) -> _Buffers:
    """Derives every per-node buffer from a validated parents tuple (cached per topology)."""
    n = len(parents)
    depth = np.zeros(n, np.int32)  # [P+1]
    rank = np.zeros(n, np.int32)  # [P+1]
    children: list[list[int]] = [[] for _ in range(n)]
    for j in range(1, n):
        depth[j] = depth[parents[j]] + 1
        rank[j] = len(children[parents[j]])
        children[parents[j]].append(j)
    m = int(depth.max()) + 1
    mask = np.zeros((n, n), bool)  # [P+1, P+1]
    node_paths = np.full((n, m), -1, np.int32)  # [P+1, M]
    mask[0, 0] = True
    node_paths[0, 0] = 0
    choices: list[Choice] = [()]
    for j in range(1, n):
        mask[j] = mask[parents[j]]
        mask[j, j] = True
        node_paths[j] = node_paths[parents[j]]
        node_paths[j, depth[j]] = j
        choices.append(choices[parents[j]] + (int(rank[j]),))
    leaves = tuple(j for j in range(n) if not children[j])
    return _Buffers(
        depth=_readonly(depth),
        rank=_readonly(rank),
        children=tuple(tuple(c) for c in children),
        ancestor_mask=_readonly(mask),
        node_paths=_readonly(node_paths),
        leaves=leaves,
        paths=_readonly(node_paths[list(leaves)]),  # [num_leaves, M]
        choices=tuple(choices[1:]),
    )


@dataclasses.dataclass(frozen=True)
class Tree:
    """The topology of a speculative block; hashable, so a static jit argument.

    Attributes:
      parents: P+1 ints; parents[0] = -1 (the root), 0 <= parents[j] < j otherwise.
    """

    parents: tuple[int, ...]

    def __post_init__(self):
        try:
            parents = tuple(operator.index(p) for p in self.parents)
        except TypeError:
            raise ValueError(f"Tree.parents={self.parents!r} must be a sequence of ints") from None
        if not parents or parents[0] != -1:
            raise ValueError(f"Tree.parents={parents!r}: parents[0] must be -1 (the root)")
        for j, p in enumerate(parents[1:], start=1):
            if not 0 <= p < j:
                raise ValueError(
                    f"Tree.parents[{j}]={p} must be in [0, {j - 1}] (topological order)"
                )
        check_size(len(parents), "Tree")
        object.__setattr__(self, "parents", parents)

    @property
    def _b(self) -> _Buffers:
        return _buffers(self.parents)

    @property
    def num_nodes(self) -> int:
        """P+1: the drafts plus the root."""
        return len(self.parents)

    @property
    def num_drafts(self) -> int:
        """P: draft nodes in the block."""
        return len(self.parents) - 1

    @property
    def parents_array(self) -> np.ndarray:
        """[P+1] int32 parents (-1 at the root)."""
        return np.asarray(self.parents, np.int32)

    @property
    def depth(self) -> np.ndarray:
        """[P+1] int32: depth[0] = 0; node j sits at position length + depth[j]."""
        return self._b.depth

    @property
    def max_depth(self) -> int:
        """Dmax: the most drafts one step can accept."""
        return int(self._b.depth.max())

    @property
    def rank(self) -> np.ndarray:
        """[P+1] int32: index among siblings in draft-preference order (root 0)."""
        return self._b.rank

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """children[i]: node i's children, in index (= rank) order."""
        return self._b.children

    @property
    def ancestor_mask(self) -> np.ndarray:
        """[P+1, P+1] bool: [i, j] iff j is i or an ancestor of i (the block's attention mask)."""
        return self._b.ancestor_mask

    @property
    def node_paths(self) -> np.ndarray:
        """[P+1, M] int32: row j is the root-to-j path of node ids, -1 after depth[j]."""
        return self._b.node_paths

    @property
    def leaves(self) -> tuple[int, ...]:
        """Node ids without children, in index order."""
        return self._b.leaves

    @property
    def paths(self) -> np.ndarray:
        """[num_leaves, M] int32: root-to-leaf node ids (one row per leaf), -1 padded."""
        return self._b.paths

    @property
    def choices(self) -> list[Choice]:
        """The Medusa-style choices list (rank paths from the root), one per draft node."""
        return list(self._b.choices)


def chain(n: int) -> Tree:
    """The chain of n drafts: parents = (-1, 0, 1, ..., n-1). chain(0) is the root alone."""
    n = check_int("chain n", n, 0)
    check_size(n + 1, f"chain({n})")
    return Tree((-1, *range(n)))


def from_choices(choices: Sequence[Sequence[int]]) -> Tree:
    """Builds a tree from a Medusa / EAGLE-1 choices list.

    Each choice is a path of sibling ranks from the root: (0,) is the root's first child,
    (1, 0) the first child of its second child. Nodes are numbered 1..P in order of
    (len, tuple), as Medusa does, which is topological with siblings in rank order.

    Args:
      choices: sequence of non-empty int sequences; every proper prefix must be present,
        no duplicates, and sibling ranks contiguous from 0.

    Returns:
      the Tree.

    Raises:
      ValueError naming the offending choice.
    """
    seen: set[Choice] = set()
    for raw in choices:
        try:
            c = tuple(operator.index(i) for i in raw)
        except TypeError:
            raise ValueError(f"choice {raw!r} must be a sequence of ints") from None
        if not c or min(c) < 0:
            raise ValueError(f"choice {raw!r} must be a non-empty sequence of ranks >= 0")
        if c in seen:
            raise ValueError(f"choice {c} appears more than once")
        seen.add(c)
    order = sorted(seen, key=lambda c: (len(c), c))
    for c in order:
        if len(c) > 1 and c[:-1] not in seen:
            raise ValueError(f"choice {c}: its prefix {c[:-1]} is missing")
        for r in range(c[-1]):
            if c[:-1] + (r,) not in seen:
                raise ValueError(
                    f"choice {c}: sibling ranks must be contiguous from 0, but "
                    f"{c[:-1] + (r,)} is missing"
                )
    check_size(len(order) + 1, f"choices list of {len(order)} drafts")
    index = {c: i for i, c in enumerate(order, start=1)}
    index[()] = 0
    return Tree((-1, *(index[c[:-1]] for c in order)))


def topk_tree(depth: int, width: int) -> Tree:
    """The full expansion tree: every node above `depth` has `width` children (ranks 0..w-1).

    Nodes are numbered level by level (breadth first), the same order from_choices gives.
    """
    depth = check_int("topk_tree depth", depth, 1)
    width = check_int("topk_tree width", width, 1)
    num_nodes, level = 1, 1
    for _ in range(depth):  # sizes checked before anything is built
        level *= width
        num_nodes += level
        check_size(num_nodes, f"topk_tree(depth={depth}, width={width})")
    parents, frontier = [-1], [0]
    for _ in range(depth):
        nxt = []
        for node in frontier:
            for _ in range(width):
                nxt.append(len(parents))
                parents.append(node)
        frontier = nxt
    return Tree(tuple(parents))


def sparse_tree(accuracies, num_drafts: int) -> Tree:
    """Medusa's sparse tree: the `num_drafts` most probable candidates under measured accuracies.

    A node whose rank path from the root is (r_1, ..., r_d) holds head i's r_i-th token at
    depth i; with per-head accuracies a[i][r] (the chance that exactly head i's rank-r token is
    the right one) the node is accepted with probability prod_i a[i][r_i], taking heads as
    independent (Cai et al. 2024, section 3.3). A tree's expected accepted length is the sum
    of its nodes' probabilities, so the best tree of n nodes holds the n most probable ones.
    Each head's accuracies are first made non-increasing in rank (a running minimum: noisy
    estimates must not rank a deeper candidate above a better one), so a node's prefix and
    its lower-ranked siblings are at least as probable; ties go to the shallower node, then
    the lower ranks, and the chosen set is a valid choices list.

    Args:
      accuracies: [K][R] numbers >= 0: head i's top-(r+1) hit rate minus its top-r one, e.g.
        from a head trainer's eval.
      num_drafts: P, the number of draft nodes.
    Returns:
      The Tree (as `from_choices` numbers it), depth at most K.
    """
    acc = np.asarray(accuracies, np.float64)
    if acc.ndim != 2 or acc.size == 0 or np.any(~np.isfinite(acc)) or np.any(acc < 0):
        raise ValueError(f"accuracies must be a [K, R] array of numbers >= 0, got {acc.tolist()}")
    num_drafts = check_int("sparse_tree num_drafts", num_drafts, 1)
    check_size(num_drafts + 1, f"sparse_tree of {num_drafts} drafts")
    acc = np.minimum.accumulate(acc, axis=1)
    K, R = acc.shape
    # Best-first: a child is never more probable than its parent, so popping in order of
    # probability only ever takes nodes whose prefix was taken before.
    frontier = [(-acc[0, r], 1, (r,)) for r in range(R)]
    chosen: list[Choice] = []
    while frontier and len(chosen) < num_drafts:
        frontier.sort()
        neg_p, depth, path = frontier.pop(0)
        chosen.append(path)
        if depth < K:
            frontier += [(neg_p * acc[depth, r], depth + 1, path + (r,)) for r in range(R)]
    if len(chosen) < num_drafts:
        raise ValueError(
            f"sparse_tree: only {len(chosen)} candidates exist for {K} heads x {R} ranks, "
            f"fewer than num_drafts={num_drafts}"
        )
    return from_choices(chosen)


def truncate(tree: Tree, depth: int) -> Tree:
    """The nodes of `tree` at depth <= `depth` (the same tree drafted with fewer heads)."""
    depth = check_int("truncate depth", depth, 0)
    if depth >= tree.max_depth:
        return tree
    return from_choices([c for c in tree.choices if len(c) <= depth]) if depth else chain(0)


_CHAIN_RE = re.compile(r"chain_(\d+)")
_TOPK_RE = re.compile(r"topk_(\d+)x(\d+)")


def get_tree(spec: str | Tree | Sequence[Sequence[int]]) -> Tree:
    """Selects a tree by config value.

    Args:
      spec: a Tree; a name in NAMED_TREES; "chain_<n>"; "topk_<depth>x<width>"; or a
        choices list.

    Returns:
      the Tree.
    """
    if isinstance(spec, Tree):
        return spec
    if isinstance(spec, str):
        if spec in NAMED_TREES:
            return from_choices(NAMED_TREES[spec])
        if m := _CHAIN_RE.fullmatch(spec):
            return chain(int(m.group(1)))
        if m := _TOPK_RE.fullmatch(spec):
            return topk_tree(int(m.group(1)), int(m.group(2)))
        raise ValueError(
            f"tree={spec!r} is unknown: use one of {sorted(NAMED_TREES)}, 'chain_<n>', "
            "'topk_<depth>x<width>', or a choices list"
        )
    return from_choices(spec)
