"""Kubernetes' CEL quantity and semver libraries, over the pure Quantity and Semver types.

Owns: ``quantity``, ``isQuantity``, ``sign``, ``asApproximateFloat``, ``asInteger``, ``isInteger``,
``add``, ``sub``, ``semver``, ``isSemver``, ``major``/``minor``/``patch``, and the three names both
libraries share (``compareTo``, ``isGreaterThan``, ``isLessThan``), which dispatch on the receiver
because celpy resolves methods by name alone.

Must never: parse quantities or versions itself (``quantity.py`` and ``semver.py`` do).
"""

from __future__ import annotations

import functools

from celpy import celtypes

from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.cel.functions.values import (
    Value,
    as_bool,
    int_value,
    kind_of,
    no_overload,
    propagating,
    require_string,
)
from dra_driver.tools.cel.semver import Semver, SemverError

# -- Kubernetes quantity and semver libraries -------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _parse_quantity(text: str) -> Quantity:
    """Selectors parse the same literals (``quantity('20Gi')``) for every device; values are immutable."""
    return Quantity.parse(text)


@functools.lru_cache(maxsize=1024)
def _parse_semver(text: str, normalize: bool) -> Semver:
    return Semver.parse(text, normalize=normalize)


@propagating
def quantity(text: Value) -> Value:
    require_string("quantity", text)
    return _parse_quantity(str(text))


@propagating
def is_quantity(text: Value) -> Value:
    require_string("isQuantity", text)
    try:
        _parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _quantity(function: str, *values: Value) -> None:
    for value in values:
        if not isinstance(value, Quantity):
            raise no_overload(function, *values)


@propagating
def sign(value: Value) -> Value:
    _quantity("sign", value)
    return int_value(value.sign())


@propagating
def as_approximate_float(value: Value) -> Value:
    _quantity("asApproximateFloat", value)
    return celtypes.DoubleType(value.as_approximate_float())


@propagating
def as_integer(value: Value) -> Value:
    _quantity("asInteger", value)
    result = value.as_int64()
    if result is None:
        raise ValueError("cannot convert value to integer")
    return int_value(result)


@propagating
def is_integer(value: Value) -> Value:
    _quantity("isInteger", value)
    return celtypes.BoolType(value.is_integer())


def _quantity_operand(function: str, left: Value, right: Value) -> Quantity | int:
    _quantity(function, left)
    if isinstance(right, Quantity):
        return right
    if kind_of(right) == "int":
        return int(right)
    raise no_overload(function, left, right)


@propagating
def quantity_add(left: Value, right: Value) -> Value:
    return left.add(_quantity_operand("add", left, right))


@propagating
def quantity_sub(left: Value, right: Value) -> Value:
    return left.sub(_quantity_operand("sub", left, right))


def _ordering(function: str, left: Value, right: Value) -> int:
    """compareTo/isGreaterThan/isLessThan: one CEL name for both Quantity and Semver receivers."""
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return left.compare(right)
    if isinstance(left, Semver) and isinstance(right, Semver):
        return left.compare(right)
    raise no_overload(function, left, right)


@propagating
def compare_to(left: Value, right: Value) -> Value:
    return int_value(_ordering("compareTo", left, right))


@propagating
def is_greater_than(left: Value, right: Value) -> Value:
    return celtypes.BoolType(_ordering("isGreaterThan", left, right) == 1)


@propagating
def is_less_than(left: Value, right: Value) -> Value:
    return celtypes.BoolType(_ordering("isLessThan", left, right) == -1)


def _normalize_flag(function: str, text: Value, normalize: Value) -> bool:
    require_string(function, text)
    if normalize is None:
        return False
    if not isinstance(as_bool(normalize), celtypes.BoolType):
        raise no_overload(function, text, normalize)
    return bool(normalize)


@propagating
def semver(text: Value, normalize: Value = None) -> Value:
    return _parse_semver(str(text), _normalize_flag("semver", text, normalize))


@propagating
def is_semver(text: Value, normalize: Value = None) -> Value:
    try:
        _parse_semver(str(text), _normalize_flag("isSemver", text, normalize))
    except SemverError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(function: str, value: Value) -> None:
    if not isinstance(value, Semver):
        raise no_overload(function, value)


@propagating
def major(value: Value) -> Value:
    _semver("major", value)
    return int_value(value.major)


@propagating
def minor(value: Value) -> Value:
    _semver("minor", value)
    return int_value(value.minor)


@propagating
def patch(value: Value) -> Value:
    _semver("patch", value)
    return int_value(value.patch)
