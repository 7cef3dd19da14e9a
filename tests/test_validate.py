"""The shared validator: every message names the key, the value and the allowed range."""

import math
import re

import numpy as np
import pytest

from specjax.validate import check_int, check_real, is_int, is_real


def test_check_int_accepts_and_normalises():
    assert check_int("k", 3, 1, 16) == 3
    value = check_int("k", np.int64(16), 1, 16)
    assert value == 16 and type(value) is int
    assert check_int("k", -5) == -5  # unbounded
    assert check_int("k", 0, None, 0) == 0


@pytest.mark.parametrize(
    "value, lo, hi, message",
    [
        (0, 1, 16, "k=0 is out of range: must be [1, 16]"),
        (17, 1, 16, "k=17 is out of range: must be [1, 16]"),
        (0, 1, None, "k=0 is out of range: must be >= 1"),
        (5, None, 3, "k=5 is out of range: must be <= 3"),
        (2.5, 1, 16, "k=2.5 must be an integer in [1, 16]"),
        (2.0, 1, None, "k=2.0 must be an integer >= 1"),
        ("3", 1, 16, "k='3' must be an integer in [1, 16]"),
        (True, 0, None, "k=True must be an integer >= 0"),
        (None, None, None, "k=None must be an integer"),
        (2**32, 0, 2**32 - 1, "k=4294967296 is out of range: must be [0, 4294967295]"),
    ],
)
def test_check_int_messages(value, lo, hi, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_int("k", value, lo, hi)


def test_check_real():
    assert check_real("t", 0, 0.0) == 0.0 and type(check_real("t", np.float32(0.5))) is float
    assert check_real("p", 1.0, 0.0, 1.0, lo_open=True) == 1.0
    with pytest.raises(
        ValueError, match=re.escape("p=0.0 is out of range: must be (0, 1] (1 = off)")
    ):
        check_real("p", 0.0, 0.0, 1.0, lo_open=True, note="1 = off")
    with pytest.raises(ValueError, match=re.escape("c=-0.1 is out of range: must be >= 0")):
        check_real("c", -0.1, 0.0)
    for bad in (math.nan, math.inf, "0.5", None, False):
        with pytest.raises(ValueError, match=re.escape(f"t={bad!r} must be a finite number >= 0")):
            check_real("t", bad, 0.0)


def test_predicates():
    assert is_int(3) and is_int(np.int32(3)) and not is_int(True) and not is_int(3.0)
    assert is_real(3) and is_real(np.float16(1)) and is_real(math.nan) and not is_real(False)
