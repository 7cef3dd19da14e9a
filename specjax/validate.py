"""Host-side checks of integer and real arguments: one message format for every module.

    k = check_int("speculative_config['num_speculative_tokens']", raw, 1, 16)
    t = check_real("SamplingParams.temperature", t, lo=0.0)

Every error is a ValueError that names the key, the value and the allowed range:

    speculative_config['num_speculative_tokens']=17 is out of range: must be [1, 16]
    speculative_config['num_speculative_tokens']=2.5 must be an integer in [1, 16]

Booleans are refused wherever a number is expected (`True` is an `int` to Python, never a
count to a user); numpy integers and floats are accepted and returned as plain python
numbers, so validated values hash and compare like literals (static jit arguments).
"""

from __future__ import annotations

import math
import numbers


def is_int(value) -> bool:
    """An integer that is not a bool (python or numpy)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value) -> bool:
    """A real number that is not a bool (python or numpy; nan and inf included)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _num(x) -> str:
    return str(x) if isinstance(x, numbers.Integral) else f"{x:g}"


def _bounds(lo, hi, lo_open: bool = False) -> str:
    """'[lo, hi]', '(lo, hi]', '>= lo', '> lo', '<= hi', or '' when unbounded."""
    if lo is not None and hi is not None:
        return f"{'(' if lo_open else '['}{_num(lo)}, {_num(hi)}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    return "" if hi is None else f"<= {_num(hi)}"


def _error(name: str, value, kind: str | None, bound: str, note: str) -> ValueError:
    """`kind` set: the value is not of that kind; None: it is out of range."""
    note = f" ({note})" if note else ""
    if kind is None:
        return ValueError(f"{name}={value!r} is out of range: must be {bound}{note}")
    where = f" in {bound}" if bound.startswith(("[", "(")) else f" {bound}" if bound else ""
    return ValueError(f"{name}={value!r} must be {kind}{where}{note}")


def check_int(
    name: str, value, lo: int | None = None, hi: int | None = None, *, note: str = ""
) -> int:
    """`value` as a python int if it is an integer in [lo, hi]; ValueError otherwise.

    Args:
      name: how the caller spells the argument (`"SamplingParams.top_k"`, `"n_max"`).
      value: the value to check.
      lo, hi: inclusive bounds; None = unbounded on that side.
      note: what the allowed values mean, added to the message (`"0 = off"`).
    Returns:
      int(value).
    """
    bound = _bounds(lo, hi)
    if not is_int(value):
        raise _error(name, value, "an integer", bound, note)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _error(name, value, None, bound, note)
    return int(value)


def check_real(
    name: str,
    value,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    note: str = "",
) -> float:
    """`value` as a python float if it is a finite number in [lo, hi]; ValueError otherwise.

    Args:
      name: how the caller spells the argument.
      value: the value to check (nan and inf are refused).
      lo, hi: bounds, inclusive unless `lo_open` (then lo < value); None = unbounded.
      note: what the allowed values mean, added to the message.
    Returns:
      float(value).
    """
    bound = _bounds(lo, hi, lo_open)
    if not is_real(value) or not math.isfinite(value):
        raise _error(name, value, "a finite number", bound, note)
    too_low = lo is not None and (value <= lo if lo_open else value < lo)
    if too_low or (hi is not None and value > hi):
        raise _error(name, value, None, bound, note)
    return float(value)
