"""The verify-cost curve: measured per block size in the layout decoding uses; interpolated."""

import pytest

from specjax.bench.verify_cost import cost_at, measure_verify_cost


def test_curve_on_the_tiny_target(target):
    curve = measure_verify_cost(target, (4, 2), context=8, repeats=2, calls=1)
    assert curve["blocks"] == [1, 2, 4]  # the unit added, sorted
    assert curve["cost"][0] == 1.0 and len(curve["seconds"]) == 3
    assert all(s > 0 for s in curve["seconds"])
    assert curve["cost"][2] == pytest.approx(curve["seconds"][2] / curve["seconds"][0])
    assert curve["cpu_kernel"] is True
    plain = measure_verify_cost(target, (2,), context=8, repeats=1, calls=1, pack=False)
    assert plain["cpu_kernel"] is False


def test_cost_at_interpolates_and_extrapolates():
    curve = {"blocks": [1, 3, 9], "cost": [1.0, 1.4, 2.6]}
    assert cost_at(curve, 1) == 1.0
    assert cost_at(curve, 2) == pytest.approx(1.2)
    assert cost_at(curve, 6) == pytest.approx(2.0)
    assert cost_at(curve, 12) == pytest.approx(3.2)  # the last segment's slope
    assert cost_at(None, 17) == 1.0  # no curve: the paper's free verification


def test_refuses_a_block_past_the_positions(target):
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        measure_verify_cost(target, (64,), context=100)
