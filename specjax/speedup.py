"""The speedup model of speculative decoding and the acceptance estimators behind it.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding",
arXiv 2211.17192, section 3): if each draft token is accepted with probability alpha,
independently, a step with N drafts emits on average

    E[tokens per target call] = (1 - alpha^(N+1)) / (1 - alpha)          (their equation 1)

and with a draft step costing c target steps the wall-clock speedup over autoregressive
decoding is that divided by (N c + 1) (their Theorem 3.8). The benchmark report and plots
draw the theory curve with these; the picker predicts every method x N with them.

Estimating alpha from a run: `alpha_from_acceptance` (the maximum-likelihood alpha of the
truncated geometric model, from the acceptance by position every run reports) and
`alpha_from_tau` (invert the tokens-per-call formula when only tau is known).
"""

from __future__ import annotations

from specjax.validate import check_int, check_real


def _check(alpha, n=None, c=None) -> None:
    check_real("alpha", alpha, 0.0, 1.0)
    if n is not None:
        check_int("n", n, 0)
    if c is not None:
        check_real("c", c, 0.0)


def expected_tokens_per_call(alpha: float, n: int) -> float:
    """(1 - alpha^(n+1)) / (1 - alpha): tokens emitted per target call with n drafts.

    Summed as 1 + alpha + ... + alpha^n, exact at alpha = 1 (n + 1).
    """
    _check(alpha, n)
    return float(sum(alpha**i for i in range(n + 1)))


def expected_speedup(alpha: float, n: int, c: float, verify_cost: float = 1.0) -> float:
    """(1 - alpha^(n+1)) / ((1 - alpha)(n c + v)): speedup over autoregressive decoding.

    Args:
      alpha: per-token acceptance probability in [0, 1].
      n: drafts per step (0 = autoregressive: speedup 1).
      c: cost of one draft step in target steps (>= 0).
      verify_cost: v, the target forward over the step's block in one-token forwards: 1 on
        hardware where verifying is free (the paper's model), the measured curve's value at
        the block size elsewhere (`specjax.bench.verify_cost`).
    """
    _check(alpha, n, c)
    check_real("verify_cost", verify_cost, 0.0)
    if n == 0:
        return 1.0
    return expected_tokens_per_call(alpha, n) / (n * c + verify_cost)


def optimal_n(alpha: float, c: float, n_max: int, verify_cost=None) -> int:
    """The N in 0..n_max with the highest expected speedup (0 = do not speculate).

    verify_cost: None (verification free) or a function of the block size (N + 1 tokens)
    giving the verify forward in target steps, e.g. `lambda t: cost_at(curve, t)`.
    Ties go to the smaller N (less draft work for the same gain).
    """
    _check(alpha, n_max, c)
    v = (lambda tokens: 1.0) if verify_cost is None else verify_cost
    speedups = [expected_speedup(alpha, n, c, v(n + 1)) for n in range(n_max + 1)]
    best = max(speedups)
    return next(n for n, s in enumerate(speedups) if s >= best - 1e-12)


def alpha_from_tau(tau: float, n: int) -> float:
    """The alpha whose expected tokens per call with n drafts is tau (inverse of the above).

    Args:
      tau: measured mean accepted length (tokens per target call), in [1, n + 1].
      n: drafts per step (>= 1).
    Returns:
      alpha in [0, 1] (bisection; the map alpha -> tau is increasing).
    """
    n = check_int("n", n, 1)
    tau = check_real("tau", tau, 1.0, n + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if expected_tokens_per_call(mid, n) < tau:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def alpha_from_acceptance(acceptance_by_position) -> float | None:
    """Maximum-likelihood alpha from unconditional acceptance by position.

    The truncated geometric model: a step attempts drafts up to and including its first
    rejection, so alpha = accepted / attempted drafts. Exact when acceptance is i.i.d.
    (u_i = alpha^i) and, unlike inverting tau, it uses every position. For a tree, u_i is
    the chance that the accepted path reaches depth i: alpha is an effective per-depth
    acceptance of the tree.

    Args:
      acceptance_by_position: u_1..u_N, u_i = P(a step accepts >= i drafts).
    Returns:
      sum_{i=1..N} u_i / sum_{i=0..N-1} u_i (u_0 = 1); None for an empty list
      (autoregressive).
    """
    u = [float(x) for x in acceptance_by_position]
    if not u:
        return None
    return sum(u) / (1.0 + sum(u[:-1]))
