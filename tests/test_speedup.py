"""The speedup model (Leviathan et al. 2023) and the alpha estimators, against hand-computed
values."""

import pytest

from specjax import speedup


@pytest.mark.parametrize(
    "alpha, n, expected",
    [
        (0.5, 2, 1.75),  # 1 + 0.5 + 0.25
        (0.8, 1, 1.8),
        (0.0, 5, 1.0),  # nothing accepted: the target's own token only
        (1.0, 3, 4.0),  # everything accepted: N + 1
        (0.6, 3, 2.176),  # 1 + 0.6 + 0.36 + 0.216
        (0.5, 0, 1.0),
    ],
)
def test_expected_tokens_per_call(alpha, n, expected):
    assert speedup.expected_tokens_per_call(alpha, n) == pytest.approx(expected, abs=1e-12)
    if alpha < 1:
        closed = (1 - alpha ** (n + 1)) / (1 - alpha)
        assert speedup.expected_tokens_per_call(alpha, n) == pytest.approx(closed)


@pytest.mark.parametrize(
    "alpha, n, c, expected",
    [
        (0.5, 2, 0.1, 1.75 / 1.2),
        (0.6, 2, 0.2, 1.96 / 1.4),  # = 1.4
        (0.6, 1, 0.2, 1.6 / 1.2),
        (0.8, 4, 0.0, 3.3616),  # free drafts: speedup = tokens per call
        (0.2, 1, 0.5, 1.2 / 1.5),  # 0.8: slower than autoregressive
        (0.9, 0, 0.3, 1.0),  # N = 0 is autoregressive
    ],
)
def test_expected_speedup(alpha, n, c, expected):
    assert speedup.expected_speedup(alpha, n, c) == pytest.approx(expected, abs=1e-12)


def test_optimal_n_hand_computed():
    # alpha 0.6, c 0.2: N=1 1.333, N=2 1.400, N=3 1.360 -> 2.
    assert speedup.optimal_n(0.6, 0.2, 8) == 2
    # alpha 0.2, c 0.5: every N is below 1 -> do not speculate.
    assert speedup.optimal_n(0.2, 0.5, 8) == 0
    # alpha 0.8, c 0.05: 1.714, 2.218, 2.567, 2.801, 2.951, 3.040, 3.082, 3.092, (N=9) 3.078.
    assert speedup.optimal_n(0.8, 0.05, 8) == 8
    assert speedup.optimal_n(0.8, 0.05, 12) == 8
    assert speedup.optimal_n(0.8, 0.05, 5) == 5
    # Free drafts and perfect acceptance: ties never happen, the longest chain wins.
    assert speedup.optimal_n(1.0, 0.0, 6) == 6
    # alpha 0: speculation never helps; the tie at c = 0 goes to the smaller N.
    assert speedup.optimal_n(0.0, 0.0, 8) == 0


def test_verify_cost_moves_the_optimum():
    # alpha 0.8, free drafts, verification growing 0.25 steps per token past the first:
    # N=1 1.8/1.25 = 1.44, N=2 2.44/1.5 = 1.627, N=3 2.952/1.75 = 1.687, N=4 3.3616/2 = 1.681.
    assert speedup.expected_speedup(0.8, 2, 0.0, 1.5) == pytest.approx(2.44 / 1.5)
    grow = lambda tokens: 1.0 + 0.25 * (tokens - 1)
    assert speedup.optimal_n(0.8, 0.0, 8, grow) == 3
    assert speedup.optimal_n(0.8, 0.0, 8) == 8  # free verification: the longest chain
    with pytest.raises(ValueError, match="verify_cost"):
        speedup.expected_speedup(0.8, 2, 0.0, -1.0)


def test_alpha_from_tau_inverts_expected_tokens():
    assert speedup.alpha_from_tau(1.75, 2) == pytest.approx(0.5, abs=1e-12)
    assert speedup.alpha_from_tau(1.8, 1) == pytest.approx(0.8, abs=1e-12)
    assert speedup.alpha_from_tau(1.0, 4) == pytest.approx(0.0, abs=1e-12)
    assert speedup.alpha_from_tau(5.0, 4) == pytest.approx(1.0, abs=1e-12)
    for n in (1, 2, 4, 8):
        for alpha in (0.05, 0.3, 0.55, 0.8, 0.97):
            tau = speedup.expected_tokens_per_call(alpha, n)
            assert speedup.alpha_from_tau(tau, n) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(ValueError, match="tau=3.5 is out of range"):
        speedup.alpha_from_tau(3.5, 2)
    with pytest.raises(ValueError, match="n=0"):
        speedup.alpha_from_tau(1.5, 0)


def test_alpha_from_acceptance():
    # i.i.d. acceptance u_i = alpha^i gives alpha back exactly.
    assert speedup.alpha_from_acceptance([0.5, 0.25]) == pytest.approx(0.5)
    assert speedup.alpha_from_acceptance([0.7**i for i in range(1, 6)]) == pytest.approx(0.7)
    # (0.8 + 0.4) / (1 + 0.8): accepted over attempted drafts.
    assert speedup.alpha_from_acceptance([0.8, 0.4]) == pytest.approx(2 / 3)
    assert speedup.alpha_from_acceptance([0.0, 0.0, 0.0]) == 0.0
    assert speedup.alpha_from_acceptance([1.0, 1.0]) == 1.0
    assert speedup.alpha_from_acceptance([]) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: speedup.expected_tokens_per_call(1.5, 2),
        lambda: speedup.expected_tokens_per_call(0.5, -1),
        lambda: speedup.expected_speedup(0.5, 2, -0.1),
        lambda: speedup.optimal_n(0.5, 0.1, 2.5),
    ],
)
def test_formulas_reject_bad_inputs(call):
    with pytest.raises(ValueError):
        call()
