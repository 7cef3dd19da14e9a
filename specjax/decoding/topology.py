"""Block topology: the layout of one speculative block and its tree as per-row data.

A block holds P+1 nodes. Node 0 is the root: the pending token, sampled by the target at the
last step and not yet in its cache. Nodes 1..P are draft tokens. `parents[0] = -1` and every
other node's parent has a smaller index (topological order), so one pass in index order sees
a parent before its children. Siblings are ordered by draft preference: the sibling with the
smaller index has the smaller rank (rank 0 = the proposer's first choice). Node j sits at
position `length + depth[j]` and attends to the committed prefix plus its ancestors
(`ancestor_mask_of`).

A chain of N drafts is the tree `parents = (-1, 0, 1, ..., N-1)`; a chain is not special
anywhere downstream.

The engine and the verifier read a block's topology as per-row arrays (`Topology`), so a
proposer may change the tree every step and per row (EAGLE-2's dynamic tree, lookahead's
trie). A static tree (`trees.Tree`) is the same data held constant (`Topology.of`): one code
path for both. Only the node count P+1 and the deepest path Dmax are static (`TreeShape`).

Axis letters follow `specjax/models/axes.py`: B batch, P draft nodes (P+1 with the root),
M = Dmax+1.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, NamedTuple

import jax.numpy as jnp

from specjax.validate import check_int

if TYPE_CHECKING:  # for the annotation only: trees.py builds on this module
    from specjax.decoding.trees import Tree

# Most nodes (root included) a tree may have. A block of P+1 nodes costs one target forward
# over P+1 query positions with a [P+1, P+1] mask; past a few hundred nodes the verify pass
# stops being "free" on any accelerator, and the walk in verify.py is a P-step scan.
MAX_TREE_NODES = 512


def check_size(num_nodes: int, what: str) -> None:
    """Refuses a block of more than MAX_TREE_NODES nodes (root included), naming `what`."""
    if num_nodes > MAX_TREE_NODES:
        raise ValueError(
            f"{what} has {num_nodes} nodes (root included); at most MAX_TREE_NODES="
            f"{MAX_TREE_NODES} are allowed"
        )


@dataclasses.dataclass(frozen=True)
class TreeShape:
    """The static part of a block whose topology is data: P+1 nodes, paths of at most Dmax.

    `Tree` has the same two properties, so either can size a program.
    """

    num_nodes: int
    max_depth: int

    def __post_init__(self):
        n = check_int("TreeShape.num_nodes", self.num_nodes, 2)
        d = check_int("TreeShape.max_depth", self.max_depth, 1)
        if d > n - 1:
            raise ValueError(f"TreeShape: max_depth={d} exceeds the {n - 1} draft nodes")
        check_size(n, "TreeShape")
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
