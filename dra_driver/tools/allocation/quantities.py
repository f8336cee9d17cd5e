"""Counter and capacity amounts as exact numbers, parsed once per spelling.

A ResourceSlice spells amounts as Kubernetes quantities (``"10Gi"``, ``"500m"``); the allocator adds
and compares them.  Whole numbers become Python ints (fast), anything fractional a ``Fraction``; both
compare exactly, as ``resource.Quantity`` does.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.allocation.errors import AllocationError

Amount = int | Fraction


@functools.lru_cache(maxsize=8192)
def parse_amount(text: str) -> Amount:
    """The exact value of a quantity string; AllocationError if it is not one."""
    try:
        value = Quantity.parse(text).value
    except QuantityError as exc:
        raise AllocationError(f"quantity {text!r}: {exc}") from None
    return value.numerator if value.denominator == 1 else value


def amount_of(value: Any, what: str) -> Amount:
    """``value`` from an API object (a string, or a number a YAML file gave us)."""
    if isinstance(value, bool):
        raise AllocationError(f"{what}: {value!r} is not a quantity")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return parse_amount(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise AllocationError(f"{what}: {value!r} is not a quantity")


def format_amount(value: Amount) -> str:
    """The canonical Kubernetes spelling of an amount (``10Gi``, ``500m``, ``3``)."""
    if isinstance(value, int):
        return Quantity.from_int(value).canonical() if -(1 << 63) <= value < 1 << 63 else str(value)
    return Quantity(value).canonical()
