"""Draft trees: the static topology of one speculative block.

A block holds P+1 nodes. Node 0 is the root: the pending token, sampled by the target at the
last step and not yet in its cache. Nodes 1..P are draft tokens. `parents[0] = -1` and every
other node's parent has a smaller index (topological order), so one pass in index order sees
a parent before its children. Siblings are ordered by draft preference: the sibling with the
smaller index has the smaller rank (rank 0 = the proposer's first choice). Node j sits at
position `length + depth[j]` and attends to the committed prefix plus `ancestor_mask[j]`.

A chain of N drafts is the tree `parents = (-1, 0, 1, ..., N-1)`; a chain is not special
anywhere downstream.

Builders: `chain(n)`, `from_choices(choices)` (the Medusa / EAGLE-1 "choices" lists),
`topk_tree(depth, width)`; named trees live in `NAMED_TREES`, and `get_tree` selects one by
config key. `Tree` is a frozen, hashable dataclass of plain python ints, so it can be a static
jit argument; its numpy buffers are derived once per topology (an lru_cache keyed on parents)
and are read-only.

Axis letters follow `specjax/models/axes.py`: P draft nodes (P+1 with the root), M = Dmax+1.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax import sampling as sp
from specjax.validate import check_int, check_real

# Most nodes (root included) a tree may have. A block of P+1 nodes costs one target forward
# over P+1 query positions with a [P+1, P+1] mask; past a few hundred nodes the verify pass
# stops being "free" on any accelerator, and the walk in verify.py is a P-step scan.
MAX_TREE_NODES = 512

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


def _check_int(name: str, value, minimum: int) -> int:
    return check_int(name, value, minimum)


def _check_size(num_nodes: int, what: str) -> None:
    if num_nodes > MAX_TREE_NODES:
        raise ValueError(
            f"{what} has {num_nodes} nodes (root included); at most MAX_TREE_NODES="
            f"{MAX_TREE_NODES} are allowed"
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
        _check_size(len(parents), "Tree")
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
    n = _check_int("chain n", n, 0)
    _check_size(n + 1, f"chain({n})")
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
    _check_size(len(order) + 1, f"choices list of {len(order)} drafts")
    index = {c: i for i, c in enumerate(order, start=1)}
    index[()] = 0
    return Tree((-1, *(index[c[:-1]] for c in order)))


def topk_tree(depth: int, width: int) -> Tree:
    """The full expansion tree: every node above `depth` has `width` children (ranks 0..w-1).

    Nodes are numbered level by level (breadth first), the same order from_choices gives.
    """
    depth = _check_int("topk_tree depth", depth, 1)
    width = _check_int("topk_tree width", width, 1)
    num_nodes, level = 1, 1
    for _ in range(depth):  # sizes checked before anything is built
        level *= width
        num_nodes += level
        _check_size(num_nodes, f"topk_tree(depth={depth}, width={width})")
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
    num_drafts = _check_int("sparse_tree num_drafts", num_drafts, 1)
    _check_size(num_drafts + 1, f"sparse_tree of {num_drafts} drafts")
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
    depth = _check_int("truncate depth", depth, 0)
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


# ------------------------------------------------------------------------- trees as data
# The engine and the verifier read a block's topology as per-row arrays, so a proposer may
# change the tree every step and per row (EAGLE-2's dynamic tree, lookahead's trie). A static
# tree is the same data held constant (`Topology.of`): one code path for both. Only the node
# count P+1 and the deepest path Dmax are static (`TreeShape`).


@dataclasses.dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2's dynamic draft tree: its sizes (static); the topology is built every step.

    Root's top-k children, then `depth - 1` expansions of the best `top_k` frontier nodes
    (top_k children each), then the best `total_tokens` candidates by cumulative
    log-probability (Li et al. 2024b). P = total_tokens draft nodes, paths of at most `depth`.

    `score_temperature` sets the law candidates are scored under (`score_logprobs`): None (the
    default) scores them under the law the target's next token is drawn from, which is the
    drafter's processed law at T > 0 and, at T = 0 where that law is one-hot, the drafter's
    law sharpened by `GREEDY_SCORE_TEMPERATURE`; a number scores them by
    log_softmax(logits / score_temperature) at every temperature.
    """

    top_k: int
    depth: int
    total_tokens: int
    score_temperature: float | None = None

    def __post_init__(self):
        if self.score_temperature is not None:
            t = check_real(
                "draft_tree.dynamic.score_temperature", self.score_temperature, 0.0, lo_open=True
            )
            object.__setattr__(self, "score_temperature", t)
        k = _check_int("draft_tree.dynamic.top_k", self.top_k, 1)
        d = _check_int("draft_tree.dynamic depth (num_speculative_tokens)", self.depth, 1)
        n = _check_int("draft_tree.dynamic.total_tokens", self.total_tokens, 1)
        if n < d:
            raise ValueError(
                f"draft_tree.dynamic.total_tokens={n} is smaller than the depth {d} "
                "(num_speculative_tokens): the deepest path could never be kept"
            )
        if n > self.num_candidates:
            raise ValueError(
                f"draft_tree.dynamic.total_tokens={n} exceeds the {self.num_candidates} "
                f"candidates that top_k={k}, depth={d} produce (top_k + (depth - 1) * top_k^2)"
            )
        _check_size(n + 1, "draft_tree.dynamic")

    @property
    def num_candidates(self) -> int:
        """Candidates scored per step: the root's top_k, then top_k^2 per further depth."""
        return self.top_k + (self.depth - 1) * self.top_k**2

    @property
    def num_nodes(self) -> int:
        return self.total_tokens + 1

    @property
    def num_drafts(self) -> int:
        return self.total_tokens

    @property
    def max_depth(self) -> int:
        return self.depth

    def score_logprobs(self, logits, sampling):
        """[..., V] the log-probabilities a candidate's cumulative score adds up.

        Why sharpen at T = 0: a greedy verifier accepts a child exactly when it is the
        target's argmax, an event more likely than the target's (and so a well-trained
        drafter's) probability of that token whenever the target's law is broad. Scored by the
        drafter's plain law, a deep child of confident argmax steps ranks below shallow
        siblings that are rarely accepted (LOG 2026-12-01: tau 3.34 -> 4.13 at 16 drafts on
        the quickstart pair with the sharpened law).
        """
        if self.score_temperature is not None:
            return jax.nn.log_softmax(logits.astype(jnp.float32) / self.score_temperature)
        if sampling.greedy:
            return jax.nn.log_softmax(logits.astype(jnp.float32) / GREEDY_SCORE_TEMPERATURE)
        return sp.processed_logprobs(logits, sampling)


# The law a dynamic tree scores candidates under at T = 0 (`DynamicTree.score_logprobs`):
# tau on the quickstart pair is flat for temperatures 0.1-0.35 and falls at 0.5 and 1.
GREEDY_SCORE_TEMPERATURE = 0.25


@dataclasses.dataclass(frozen=True)
class NgramTrie:
    """Lookahead's verification branch: up to `num_candidates` n-grams of `length` tokens
    after the root, as a trie built every step (`ngram_trie`). P = num_candidates * length
    nodes (shared prefixes and duplicates leave nodes unoffered), paths of at most `length`.
    """

    num_candidates: int
    length: int

    def __post_init__(self):
        _check_int("max_candidates", self.num_candidates, 1)
        _check_int("ngram_size - 1", self.length, 1)
        _check_size(self.num_drafts + 1, "lookahead's candidate trie")

    @property
    def num_nodes(self) -> int:
        return self.num_drafts + 1

    @property
    def num_drafts(self) -> int:
        return self.num_candidates * self.length

    @property
    def max_depth(self) -> int:
        return self.length


def ngram_trie(candidates, valid):
    """Candidate continuations of the root as one trie per row, topology as data.

    Node 1 + g * n + j holds candidate g's token j (depth j + 1). Where candidates g' < g share
    g's first j + 1 tokens, g's node is not offered and g's next node hangs under the first
    such g' (prefixes shared, duplicates skipped), so every offered path is a distinct prefix.

    Args:
      candidates: [B, G, n] int32 tokens; valid: [B, G] bool (candidate present).
    Returns:
      (tokens [B, G*n], valid [B, G*n], Topology with [B, G*n + 1] parents and depth).
    """
    B, G, n = candidates.shape
    same = candidates[:, :, None, :] == candidates[:, None, :, :]  # [B, G, G', n]
    prefix = jnp.cumprod(same, axis=-1).astype(bool) & valid[:, None, :, None]  # [B, G, G', n]
    first = jnp.argmax(prefix, axis=2).astype(jnp.int32)  # [B, G, n] first g' sharing prefix
    first = jnp.where(valid[:, :, None], first, jnp.arange(G, dtype=jnp.int32)[None, :, None])
    offered = valid[:, :, None] & (first == jnp.arange(G)[None, :, None])  # [B, G, n]
    node = 1 + first * n + jnp.arange(n, dtype=jnp.int32)[None, None, :]  # [B, G, n] owner
    parent = jnp.concatenate([jnp.zeros((B, G, 1), jnp.int32), node[:, :, :-1]], axis=2)
    depth = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.int32), (B, G, n))
    root = jnp.full((B, 1), -1, jnp.int32)
    topology = Topology(
        parents=jnp.concatenate([root, parent.reshape(B, G * n)], axis=1),
        depth=jnp.concatenate([jnp.zeros((B, 1), jnp.int32), depth.reshape(B, G * n)], axis=1),
    )
    return candidates.reshape(B, G * n), offered.reshape(B, G * n), topology


@dataclasses.dataclass(frozen=True)
class TreeShape:
    """The static part of a block whose topology is data: P+1 nodes, paths of at most Dmax.

    `Tree` has the same two properties, so either can size a program.
    """

    num_nodes: int
    max_depth: int

    def __post_init__(self):
        n = _check_int("TreeShape.num_nodes", self.num_nodes, 2)
        d = _check_int("TreeShape.max_depth", self.max_depth, 1)
        if d > n - 1:
            raise ValueError(f"TreeShape: max_depth={d} exceeds the {n - 1} draft nodes")
        _check_size(n, "TreeShape")
        object.__setattr__(self, "num_nodes", n)
        object.__setattr__(self, "max_depth", d)

    @property
    def num_drafts(self) -> int:
        return self.num_nodes - 1


class Topology(NamedTuple):
    """A block's topology as per-row data (jax arrays).

    parents: [B, P+1] int32, -1 at the root, 0 <= parents[b, j] < j elsewhere (also for nodes
      that are not offered: hang them anywhere, e.g. under the root).
    depth: [B, P+1] int32, depth[b, 0] = 0, depth[b, j] = depth[b, parents[b, j]] + 1.
    """

    parents: object
    depth: object

    @staticmethod
    def of(tree: Tree, batch: int) -> Topology:
        """A static tree's topology, the same for every row."""
        n = tree.num_nodes
        return Topology(
            parents=jnp.broadcast_to(jnp.asarray(tree.parents_array), (batch, n)),
            depth=jnp.broadcast_to(jnp.asarray(tree.depth), (batch, n)),
        )


def ancestor_mask_of(parents, max_depth: int):
    """[B, N, N] bool: [b, i, j] iff j is i or one of its ancestors in row b's tree.

    Args:
      parents: [B, N] int32 topology (see `Topology`); max_depth: Dmax (static).
    """
    import jax.numpy as jnp

    ids = jnp.arange(parents.shape[-1], dtype=jnp.int32)  # [N]
    ptr = jnp.broadcast_to(ids, parents.shape)  # [B, N] walks up one ancestor per round
    mask = ptr[..., :, None] == ids  # [B, N, N] itself
    for _ in range(max_depth):
        up = jnp.take_along_axis(parents, jnp.maximum(ptr, 0), axis=-1)  # [B, N]
        ptr = jnp.where(ptr >= 0, up, -1)
        mask = mask | (ptr[..., :, None] == ids)
    return mask


def path_to(parents, depth, node, max_depth: int):
    """[B, Dmax+1] int32: row b's root-to-`node[b]` node ids, -1 after depth[b, node[b]].

    Args:
      parents, depth: [B, N] topology; node: [B] int32; max_depth: Dmax (static).
    """
    import jax.numpy as jnp

    M = max_depth + 1
    cols = jnp.arange(M, dtype=jnp.int32)  # [M]
    d = jnp.take_along_axis(depth, node[:, None], axis=1)[:, 0]  # [B]
    path = jnp.full((node.shape[0], M), -1, jnp.int32)  # [B, M]
    ptr = node.astype(jnp.int32)  # [B] the node at column d - k after k rounds
    for k in range(M):
        col = d - k  # [B]
        path = jnp.where((cols[None, :] == col[:, None]) & (col >= 0)[:, None], ptr[:, None], path)
        up = jnp.take_along_axis(parents, jnp.maximum(ptr, 0)[:, None], axis=1)[:, 0]  # [B]
        ptr = jnp.where(ptr > 0, up, 0)
    return path


def keep_best(tokens, scores, parents, depth, num_keep: int):
    """EAGLE-2's rerank: the best `num_keep` candidates as a block, topology as data.

    Candidates are numbered so that a parent's index is below its children's (EAGLE-2 records
    them depth by depth). The kept set is the top `num_keep` by (score desc, index asc); a
    child's score (its parent's plus a log-probability <= 0) never exceeds its parent's, and on
    a tie the parent has the lower index, so the kept set is closed under ancestors even when
    a saturated softmax gives a child its parent's score. Kept nodes are placed in index order
    (topological, siblings in candidate order).

    Args:
      tokens, scores: [B, C] candidate tokens and cumulative log-probabilities (-inf allowed).
      parents: [B, C] int32 candidate index of each candidate's parent, -1 under the root.
      depth: [C] int32 each candidate's depth (1 under the root).
      num_keep: P, the draft nodes of the block (static).
    Returns:
      (tokens [B, P], valid [B, P] (finite score and every ancestor kept and valid),
      Topology with [B, P+1] parents and depth, the root prepended).
    """
    B, C = tokens.shape
    _, kept = jax.lax.top_k(scores, num_keep)  # [B, P] ties go to the lower index
    kept = jnp.sort(kept, axis=1)
    rows = jnp.arange(B)[:, None]
    block_of = (
        jnp.zeros((B, C), jnp.int32)
        .at[rows, kept]
        .set(jnp.arange(1, num_keep + 1, dtype=jnp.int32))
    )  # [B, C] block node id of each kept candidate (0 elsewhere)
    kept_parent = jnp.take_along_axis(parents, kept, axis=1)  # [B, P]
    up = jnp.take_along_axis(block_of, jnp.maximum(kept_parent, 0), axis=1)  # [B, P]
    block_parent = jnp.where(kept_parent < 0, 0, up)
    topology = Topology(
        parents=jnp.concatenate([jnp.full((B, 1), -1, jnp.int32), block_parent], axis=1),
        depth=jnp.concatenate([jnp.zeros((B, 1), jnp.int32), jnp.asarray(depth)[kept]], axis=1),
    )
    finite = jnp.isfinite(jnp.take_along_axis(scores, kept, axis=1))  # [B, P]
    # A kept node whose parent was not kept would hang under the root, where its logits and KV
    # were computed with other ancestors: such a node (and, in index order, its kept
    # descendants) is never offered. Unreachable by scores alone (see above); here by data.
    attached = (kept_parent < 0) | (up > 0)  # [B, P]

    def settle(i, valid):  # block parents precede their children: one pass in index order
        parent = block_parent[:, i]  # [B] 0 = the root
        ok = valid[:, i] & ((parent == 0) | valid[rows[:, 0], jnp.maximum(parent - 1, 0)])
        return valid.at[:, i].set(ok)

    valid = jax.lax.fori_loop(0, num_keep, settle, finite & attached)
    return jnp.take_along_axis(tokens, kept, axis=1), valid, topology
