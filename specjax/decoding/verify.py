"""The one verifier: decide which drafts of a block the target accepts, chains and trees alike.

Block convention (topology.py): node 0 is the root (the pending token), nodes 1..P are drafts
in topological order with siblings in draft-preference order. The target's processed
distribution at node j, p[j], is the law of the token after node j.

The walk (every mode but `typical`). Carry the current node c (start: the root) and the
running distribution r (start: p[0]). Scan nodes j = 1..P in index order; j is a candidate
iff it is valid and parents[j] == c. A candidate is accepted with `accept_prob(r, q_j, x_j)`;
accepting moves c <- j, r <- p[j]; rejecting sets r <- `reject_update(r, q_j, x_j)`. After
the scan the bonus / recovered token is drawn from r. One pass suffices: a node's children
come after it, and a rejected sibling's subtree never has c as a parent. A chain is the tree
with one child per node, so this is also the classic chain rule.

Modes (all lossless except typical):
  greedy         accept iff x == argmax p[c] (lowest id on ties); emit argmax p[c].
  probabilistic  accept iff u < min(1, r(x) / q(x)); on reject r <- norm(max(r - q, 0)).
                 Siblings must be i.i.d. draws from one q (SpecInfer); for a chain this is
                 Leviathan / Chen speculative sampling.
  one_hot        deterministic drafts (top-k children): accept iff u < r(x); on reject
                 r(x) <- 0 and renormalise. A duplicate sibling therefore gets r(x) = 0.
  strict         draw y ~ r, accept iff y == x; on reject r(x) <- 0 and renormalise. Given a
                 rejection, y has exactly the law of r with x zeroed, so sampling the final
                 token from the updated r (with fresh randomness) gives the emitted token the
                 law p: P(emit t) = p(x) [t = x] + (1 - p(x)) p(t) [t != x] / (1 - p(x)).
  typical        Medusa's typical acceptance, LOSSY (see `_verify_typical`).
`node_output_law` computes the exact law of the token emitted at one node from the same
primitives, so tests check losslessness without sampling noise.

Randomness. Row b's key is split per node with fold_in(key[b], j): node j >= 1 draws its coin
from fold_in(key[b], j); the bonus token uses fold_in(key[b], 0) (the root is never a
candidate). A row's result therefore depends on its own key and data only.

Numerics. All probability math is float32. No division by a sum that can be zero: every
renormalisation is where-guarded, and a residual that sums to 0 (p == q in floating point,
a probability-0 rejection in exact arithmetic) leaves the running distribution unchanged.
Coins are u ~ U[0, 1) with acceptance iff u < a, so a = 0 never accepts and a = 1 always does.
Sampling uses jax.random.categorical on log r (a Gumbel race; zeros become -inf, never drawn).
Duplicate siblings. In greedy / one_hot / strict mode a copy of a rejected sibling is never
accepted (it fails the argmax again, or r(x) = 0), and of two copies of the argmax only the
first is entered: proposers should merge common prefixes (a trie) rather than repeat them.
In probabilistic mode i.i.d. siblings may repeat and a later copy may be accepted, as the
SpecInfer rule requires.

Axis letters follow specjax/models/axes.py: B batch, P draft nodes (P+1 with the root),
V vocab, M = Dmax+1.
"""

from __future__ import annotations

import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.topology import Topology, TreeShape, path_to
from specjax.decoding.trees import Tree
from specjax.sampling import SamplingParams, greedy_argmax, processed_probs

MODES = ("greedy", "probabilistic", "one_hot", "strict", "typical")
LOSSY_MODES = ("typical",)
_WALK_MODES = ("greedy", "probabilistic", "one_hot", "strict")
_BONUS_NODE = 0  # the root's per-node key draws the bonus token: the root is never a candidate


@flax.struct.dataclass
class VerifyResult:
    """What one speculative step emits.

    Attributes:
      tokens: [B, M] int32: the accepted drafts along the path, then the bonus / recovered
        token at index num_accepted; 0 after it.
      num_accepted: [B] int32 accepted drafts (0..Dmax); the step emits num_accepted + 1.
      path: [B, M] int32 block node ids of the accepted path: path[:, 0] = 0 (the root),
        path[:, i] the node accepted at depth i for i <= num_accepted; -1 after.
    """

    tokens: jax.Array
    num_accepted: jax.Array
    path: jax.Array


# ------------------------------------------------------------------ per-candidate primitives
# r, q: [..., V]; x: [...]. Pure and shape-polymorphic, used by the walk and by the exact laws.


def _at(r: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.take_along_axis(r, x[..., None], axis=-1)[..., 0]  # [...]


def _normalize(r: jax.Array, fallback: jax.Array) -> jax.Array:
    """r / sum(r), or fallback where the sum is 0 (where-guarded: no 0/0 inside jit)."""
    total = jnp.sum(r, axis=-1, keepdims=True)  # [..., 1]
    ok = total > 0  # [..., 1]
    return jnp.where(ok, r / jnp.where(ok, total, 1.0), fallback)  # [..., V]


def _check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        raise ValueError(f"mode={mode!r} is invalid here: must be one of {allowed}")


def accept_prob(r: jax.Array, q: jax.Array | None, x: jax.Array, mode: str) -> jax.Array:
    """Probability that candidate x is accepted given running distribution r.

    Args:
      r: [..., V] running target distribution at the parent (normalised here; float32).
      q: [..., V] the draft law x was sampled from (probabilistic only; else ignored).
      x: [...] int candidate token.
      mode: 'greedy', 'probabilistic', 'one_hot' or 'strict'.

    Returns:
      [...] float32 in [0, 1].
    """
    _check_mode(mode, _WALK_MODES)
    r = r.astype(jnp.float32)  # [..., V] acceptance math in float32
    if mode == "greedy":
        return (x == greedy_argmax(r)).astype(jnp.float32)  # [...]
    rx = _at(_normalize(r, r), x)  # [...]
    if mode in ("one_hot", "strict"):
        return rx  # strict: P(y == x) for y ~ r
    qx = _at(q.astype(jnp.float32), x)  # [...]
    # min(1, r(x)/q(x)); q(x) = 0 can only meet r(x) <= q(x) as r(x) = 0, which never accepts.
    ratio = rx / jnp.where(qx > rx, qx, 1.0)  # [...] divisor > 0 wherever it is used
    return jnp.where(qx > rx, ratio, (rx > 0).astype(jnp.float32))  # [...]


def reject_update(r: jax.Array, q: jax.Array | None, x: jax.Array, mode: str) -> jax.Array:
    """The running distribution after candidate x is rejected.

    Args: as accept_prob.

    Returns:
      [..., V] float32, normalised; a residual that sums to 0 falls back to norm(r).
    """
    _check_mode(mode, _WALK_MODES)
    r = r.astype(jnp.float32)  # [..., V]
    if mode == "greedy":
        return r  # x != argmax r, so the argmax is unchanged
    r = _normalize(r, r)  # [..., V]
    if mode in ("one_hot", "strict"):
        ids = jax.lax.broadcasted_iota(jnp.int32, r.shape, r.ndim - 1)  # [..., V]
        residual = jnp.where(ids == x[..., None], 0.0, r)  # [..., V]
    else:
        residual = jnp.maximum(r - q.astype(jnp.float32), 0.0)  # [..., V]
    return _normalize(residual, r)  # [..., V]


def final_law(r: jax.Array, mode: str) -> jax.Array:
    """Law of the bonus / recovered token drawn from running distribution r: [..., V]."""
    _check_mode(mode, _WALK_MODES)
    r = r.astype(jnp.float32)  # [..., V]
    if mode == "greedy":
        return jax.nn.one_hot(greedy_argmax(r), r.shape[-1], dtype=jnp.float32)  # [..., V]
    return _normalize(r, r)  # [..., V]


def node_output_law(
    p: jax.Array, q_children: jax.Array | None, tokens: jax.Array, mode: str
) -> jax.Array:
    """Exact law of the token emitted after one node, given its candidate children.

    Sums the accept / reject branches sibling by sibling with the walk's own primitives:
    the emitted token is the first accepted child's token, else a draw from the final r.

    Args:
      p: [V] target distribution at the node.
      q_children: [k, V] draft law of each child (probabilistic; None otherwise).
      tokens: [k] int the children's tokens, in sibling order (conditioned on, not averaged).
      mode: 'greedy', 'probabilistic', 'one_hot' or 'strict'.

    Returns:
      [V] float32. For one_hot / strict / greedy it equals p (greedy: one_hot(argmax p)) for
      any tokens; for probabilistic its average over tokens ~ q^k equals p.
    """
    _check_mode(mode, _WALK_MODES)
    if mode == "probabilistic" and q_children is None:
        raise ValueError("node_output_law: mode='probabilistic' needs q_children")
    r = jnp.asarray(p, jnp.float32)  # [V]
    tokens = jnp.asarray(tokens, jnp.int32)  # [k]
    law = jnp.zeros_like(r)  # [V]
    reach = jnp.float32(1.0)  # probability that every earlier sibling was rejected
    for i in range(tokens.shape[0]):
        q = None if q_children is None else jnp.asarray(q_children[i], jnp.float32)  # [V]
        a = accept_prob(r, q, tokens[i], mode)  # []
        law = law + reach * a * jax.nn.one_hot(tokens[i], r.shape[-1])  # [V]
        reach = reach * (1.0 - a)  # []
        r = reject_update(r, q, tokens[i], mode)  # [V]
    return law + reach * final_law(r, mode)  # [V]


def chain_law(p: jax.Array, q: jax.Array | None, x: jax.Array, mode: str) -> jax.Array:
    """node_output_law for a chain position: one child x drawn from q. Returns [V]."""
    q_children = None if q is None else jnp.asarray(q)[None]  # [1, V]
    return node_output_law(p, q_children, jnp.asarray(x)[None], mode)  # [V]


# ------------------------------------------------------------------------------- the walk


def _coin(key, r, q, x, mode: str) -> jax.Array:
    """One candidate's accept decision: [] bool (the randomised modes; greedy walks argmaxes)."""
    if mode == "strict":
        y = jax.random.categorical(key, jnp.log(r))  # [] a sample y ~ r
        return y == x
    u = jax.random.uniform(key, dtype=jnp.float32)  # [] in [0, 1)
    return u < accept_prob(r, q, x, mode)


def _draw(key, r, mode: str) -> jax.Array:
    """The bonus / recovered token from running distribution r: [] int32."""
    return jax.random.categorical(key, jnp.log(r)).astype(jnp.int32)  # []


def _walk_greedy(target_ids, x, valid, parents, max_depth: int):
    """The greedy walk on the target's argmax per node, with no loop over nodes.

    Greedy acceptance needs no running law, so the walk's sequential scan reduces to two
    vectorised passes. Node j matches iff it is valid and its token is the argmax at its
    parent. Of the matching children of one node the walk enters the first (lowest index:
    a later sibling's parent is no longer the current node), so `first[b, p]` is the lowest
    matching child of node p (a scatter-min over parents). The walk then descends from the
    root `max_depth` times through `first`, stopping where no child matches. This is the
    scan over nodes in index order exactly (tests/decoding/test_verify.py checks it against
    that scan on random trees), at Dmax gathers instead of P loop iterations.

    target_ids [B, N] int32 argmax at each node, x [B, N], valid [B, N], parents [B, N].
    Returns (c, bonus) [B] each: the last accepted node and the argmax after it.
    """
    B, N = x.shape
    rows = jnp.arange(B)[:, None]  # [B, 1]
    at_parent = jnp.take_along_axis(target_ids, jnp.maximum(parents, 0), axis=1)  # [B, N]
    match = valid & (parents >= 0) & (x == at_parent)  # [B, N]; the root never matches
    nodes = jnp.broadcast_to(jnp.arange(N, dtype=jnp.int32), (B, N))  # [B, N]
    slot = jnp.where(match, parents, N)  # [B, N] non-matching nodes go to a spare slot N
    first = jnp.full((B, N + 1), N, jnp.int32).at[rows, slot].min(nodes)  # [B, N+1]
    c = jnp.zeros((B,), jnp.int32)  # [B] the current node
    for _ in range(max_depth):  # static Dmax: each descent is one gather per row
        child = first[rows[:, 0], c]  # [B]; N when no child of c matches
        c = jnp.where(child < N, child, c)
    return c, target_ids[rows[:, 0], c]


def _walk(law, vocab: int, x, q, valid, keys, parents, mode: str):
    """The walk for a batch. law(j) -> [B, V] float32 is node j's target law; x [B, N],
    q [B, N, V] | None, valid [B, N], keys [B, N], parents [B, N].

    Node j's law is read (or computed from its logits) inside the loop, and the loop starts at
    the root, whose law it takes as the running r: nothing over [B, N, V] is used outside the
    loop, so XLA keeps no second copy of the laws for it.

    Returns (c, bonus) [B] each.
    """
    B, N = x.shape
    coin = jax.vmap(functools.partial(_coin, mode=mode))  # per-row keys: a row sees its own

    def step(carry, j):
        c, r = carry  # [B] int32, [B, V] float32
        p_j = law(j)  # [B, V]
        q_j = None if q is None else jax.lax.dynamic_index_in_dim(q, j, 1, keepdims=False)
        x_j = x[:, j]  # [B]
        cand = valid[:, j] & (parents[:, j] == c)  # [B]; never the root (its parent is -1)
        accept = cand & coin(keys[:, j], r, q_j, x_j)  # [B]
        r_rej = reject_update(r, q_j, x_j, mode)  # [B, V]
        take = (accept | (j == 0))[:, None]  # [B, 1] the root's law starts the walk
        r = jnp.where(take, p_j, jnp.where(cand[:, None], r_rej, r))  # [B, V]
        return (jnp.where(accept, j, c), r), None

    init = (jnp.zeros((B,), jnp.int32), jnp.zeros((B, vocab), jnp.float32))
    (c, r), _ = jax.lax.scan(step, init, jnp.arange(N, dtype=jnp.int32))
    bonus = jax.vmap(functools.partial(_draw, mode=mode))(keys[:, _BONUS_NODE], r)  # [B]
    return c, bonus


def _node_law(target, sampling):
    """j -> [B, V] float32: node j's law, read from target [B, N, V] (laws), or processed from
    its logits when `sampling` is given (no [B, N, V] law is made)."""

    def law(j):
        row = jax.lax.dynamic_index_in_dim(target, j, axis=1, keepdims=False)  # [B, V]
        if sampling is None:
            return row.astype(jnp.float32)
        return processed_probs(row, sampling)  # [B, V] float32

    return law


def _node_keys(key: jax.Array, num_nodes: int) -> jax.Array:
    """[B] row keys -> [B, N] per-node keys fold_in(key[b], j)."""
    nodes = jnp.arange(num_nodes)  # [N]
    per_row = lambda k: jax.vmap(lambda j: jax.random.fold_in(k, j))(nodes)  # [N]
    return jax.vmap(per_row)(key)  # [B, N]


def _emit(c, bonus, x, topology: Topology, max_depth: int) -> VerifyResult:
    """Builds the result from the last accepted node c [B] and its bonus token [B]."""
    num_accepted = jnp.take_along_axis(topology.depth, c[:, None], axis=1)[:, 0]  # [B]
    path = path_to(topology.parents, topology.depth, c, max_depth)  # [B, M]
    nxt = jnp.maximum(path[:, 1:], 0)  # [B, M-1] node at depth i+1 (clamped pad)
    drafted = jnp.take_along_axis(x, nxt, axis=1)  # [B, M-1]
    drafted = jnp.pad(drafted, ((0, 0), (0, 1)))  # [B, M]
    i = jnp.arange(path.shape[1])[None]  # [1, M]
    n = num_accepted[:, None]  # [B, 1]
    tokens = jnp.where(i < n, drafted, jnp.where(i == n, bonus[:, None], 0))  # [B, M]
    return VerifyResult(tokens=tokens.astype(jnp.int32), num_accepted=num_accepted, path=path)


# ------------------------------------------------------------------------------ typical


def _verify_typical(p, crit, x, valid, key, tree: Tree, eps: float, delta: float):
    """Medusa typical acceptance (LOSSY: the output law is not the target's).

    Candidate x at node j passes iff crit[parent](x) > min(eps, delta * exp(-H(crit[parent]))).
    Along each root-to-leaf path the accepted length is the run of passing nodes from the
    root (cumulative product); the longest wins, ties going to the highest total log-prob of
    the accepted prefix, then to the first leaf. The bonus token is *sampled* from p at the
    last accepted node (Medusa samples it with its typical filter; we keep p's law there).

    Args:
      p: [B, N, V] processed target probs; crit: [B, N, V] the law judged (softmax of
        target_logits when given, else p); x: [B, N]; valid: [B, N]; key: [B].
    """
    b = p.shape[0]
    parents = np.maximum(tree.parents_array, 0)  # [N] root clamped (never a candidate)
    ent = -jnp.sum(jax.scipy.special.xlogy(crit, crit), axis=-1)  # [B, N] 0 log 0 = 0
    thr = jnp.minimum(eps, delta * jnp.exp(-ent))  # [B, N] threshold at each node
    rows = jnp.arange(b)[:, None]  # [B, 1]
    px = crit[rows, parents[None, :], x]  # [B, N] crit[parent(j)](x_j)
    ok = valid & (px > thr[:, parents])  # [B, N]
    steps = tree.paths[:, 1:]  # [L, M-1] leaf paths without the root
    on_path = ok[:, np.maximum(steps, 0)] & (steps >= 0)[None]  # [B, L, M-1]
    run = jnp.cumprod(on_path, axis=-1).astype(bool)  # [B, L, M-1]
    acc_len = jnp.sum(run, axis=-1)  # [B, L]
    logp = jnp.log(jnp.where(run, px[:, np.maximum(steps, 0)], 1.0))  # [B, L, M-1]
    loglik = jnp.sum(logp, axis=-1)  # [B, L]
    best_len = jnp.max(acc_len, axis=-1)  # [B]
    score = jnp.where(acc_len == best_len[:, None], loglik, -jnp.inf)  # [B, L]
    best = jnp.argmax(score, axis=-1)  # [B] first leaf among equals
    c = jnp.asarray(tree.paths)[best, best_len]  # [B]
    p_c = p[jnp.arange(b), c]  # [B, V]
    bonus_keys = jax.vmap(lambda k: jax.random.fold_in(k, _BONUS_NODE))(key)  # [B]
    bonus = jax.vmap(lambda k, r: _draw(k, r, "typical"))(bonus_keys, p_c)  # [B]
    return _emit(c, bonus, x, Topology.of(tree, b), tree.max_depth)


# ------------------------------------------------------------------------------- verify


def _typed_keys(key) -> jax.Array:
    key = jnp.asarray(key)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)  # legacy uint32 [B, 2]


def _check_shapes(target_probs, draft_tokens, tree, draft_probs, node_valid, key, mode, topology):
    n = tree.num_nodes
    if target_probs.ndim != 3 or target_probs.shape[1] != n:
        raise ValueError(f"verify: target_probs shape {target_probs.shape} must be [B, {n}, V]")
    b, _, v = target_probs.shape
    if draft_tokens.shape != (b, n):
        raise ValueError(f"verify: draft_tokens shape {draft_tokens.shape} must be {(b, n)}")
    if mode == "probabilistic" and draft_probs is None:
        raise ValueError("verify: mode='probabilistic' needs draft_probs [B, P+1, V]")
    if draft_probs is not None and draft_probs.shape != (b, n, v):
        raise ValueError(f"verify: draft_probs shape {draft_probs.shape} must be {(b, n, v)}")
    if node_valid is not None and node_valid.shape != (b, n):
        raise ValueError(f"verify: node_valid shape {node_valid.shape} must be {(b, n)}")
    if topology is not None:
        for name, a in zip(Topology._fields, topology, strict=True):
            if tuple(a.shape) != (b, n):
                raise ValueError(f"verify: topology.{name} shape {a.shape} must be {(b, n)}")
    if mode == "typical" and not isinstance(tree, Tree):
        raise ValueError(
            "verify: mode='typical' needs a static Tree (its paths are enumerated at trace "
            f"time), got {tree!r}"
        )
    if topology is None and not isinstance(tree, Tree):
        raise ValueError(f"verify: a {type(tree).__name__} block needs topology= data")
    if mode != "greedy" and (key is None or key.shape != (b,)):
        shape = None if key is None else key.shape
        raise ValueError(f"verify: mode={mode!r} needs key of shape ({b},), got {shape}")


def verify(
    target_probs: jax.Array,
    draft_tokens: jax.Array,
    tree: Tree | TreeShape,
    mode: str,
    key: jax.Array | None,
    *,
    topology: Topology | None = None,
    draft_probs: jax.Array | None = None,
    node_valid: jax.Array | None = None,
    target_logits: jax.Array | None = None,
    typical_eps: float = 0.09,
    typical_delta: float = 0.3,
    sampling: SamplingParams | None = None,
) -> VerifyResult:
    """Verifies one block of drafts against the target; jit with tree and mode static.

    The walk reads the block's topology as data (`topology`, per row), so trees may differ
    per step and per row; a static Tree with no `topology` is the same data held constant.

    Args:
      target_probs: [B, P+1, V] processed target distribution at every node. Greedy reads
        only its argmax per node (lowest id on ties), so the raw logits serve as well and the
        engine passes them: no law over V is made at T=0.
      draft_tokens: [B, P+1] int32 node tokens (index 0, the root, is ignored).
      tree: the block's static Tree, or its TreeShape (P+1 nodes, Dmax) when the topology
        is data.
      topology: [B, P+1] parents and depth per row (`topology.Topology`); None = the static
        tree's own. 'typical' reads the static tree.
      mode: one of MODES ('typical' is lossy; the caller enforces allow_lossy).
      key: [B] typed PRNG keys (legacy uint32 [B, 2] also taken), one per row; may be None
        for greedy.
      draft_probs: [B, P+1, V] q at node j = the law node j's token was drawn from (siblings
        drawn i.i.d. share it); required for 'probabilistic', ignored otherwise.
      node_valid: [B, P+1] bool, None = all valid. Invalid nodes are never accepted and do
        not change the running distribution (missing drafts; depth shrinking at the limit).
      target_logits: [B, P+1, V] optional, 'typical' only: when given, the acceptance test
        judges softmax(target_logits) (temperature already applied by the caller), as
        Medusa does; else it judges target_probs.
      typical_eps, typical_delta: Medusa's posterior threshold and alpha.
      sampling: when given (not with 'typical'), `target_probs` are the target's raw logits
        and each node's processed law `processed_probs(logits[:, j], sampling)` is computed
        inside the walk when it is reached, so no [B, P+1, V] law is kept: at B=32, P=63,
        V=152k the step after the forward then holds the logits and nothing of their size
        (experiments/verifier_memory.py).

    Returns:
      VerifyResult with tokens [B, M], num_accepted [B], path [B, M] (M = tree.max_depth + 1).
    """
    _check_mode(mode, MODES)
    target_probs = jnp.asarray(target_probs)  # [B, N, V]
    x = jnp.asarray(draft_tokens).astype(jnp.int32)  # [B, N]
    key = None if key is None else _typed_keys(key)
    _check_shapes(target_probs, x, tree, draft_probs, node_valid, key, mode, topology)
    if mode == "typical" and sampling is not None:
        raise ValueError("verify: mode='typical' takes processed target_probs, not sampling=")
    valid = (
        jnp.ones(x.shape, bool) if node_valid is None else jnp.asarray(node_valid, bool)
    )  # [B, N]
    if mode == "typical":
        p = target_probs.astype(jnp.float32)  # [B, N, V] acceptance math in float32
        crit = p  # [B, N, V] the law whose entropy and probabilities are judged
        if target_logits is not None:
            crit = jax.nn.softmax(jnp.asarray(target_logits).astype(jnp.float32), -1)  # [B, N, V]
        return _verify_typical(p, crit, x, valid, key, tree, typical_eps, typical_delta)
    topology = topology if topology is not None else Topology.of(tree, x.shape[0])
    parents = topology.parents.astype(jnp.int32)  # [B, N]
    if mode == "greedy":  # one argmax per node up front; the walk carries node ids only
        c, bonus = _walk_greedy(greedy_argmax(target_probs), x, valid, parents, tree.max_depth)
        return _emit(c, bonus, x, topology, tree.max_depth)
    q = None
    if mode == "probabilistic":
        q = jnp.asarray(draft_probs).astype(jnp.float32)  # [B, N, V]
    keys = _node_keys(key, tree.num_nodes)  # [B, N]
    c, bonus = _walk(
        _node_law(target_probs, sampling), target_probs.shape[-1], x, q, valid, keys, parents, mode
    )  # [B], [B]
    return _emit(c, bonus, x, topology, tree.max_depth)
