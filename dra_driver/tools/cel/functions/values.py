"""CEL values at run time, as celpy represents them: kinds, equality, ordering, errors.

Owns: the CEL type name of a runtime value, CEL's runtime equality (numbers compare across int, uint
and double; other mixed kinds are unequal) and ordering (CrossTypeNumericComparisons), the argument
checks every library function shares, and :func:`propagating`, which makes a function strict in
errors and reports its failures as CEL error values.

Must never: register functions (``__init__.py`` does) or depend on a particular library.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from dra_driver.quantity import Quantity
from dra_driver.tools.cel.semver import Semver

Value = Any  # celpy values are untyped; each function checks what it was given
Function = Callable[..., Value]

NUMERIC = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def kind_of(value: Value) -> str:
    """CEL's type of a runtime value, for overload checks and messages."""
    if isinstance(value, bool):  # celpy's has() yields Python bools
        return "bool"
    for cel_type, name in _KINDS:
        if isinstance(value, cel_type):
            return name
    if value is None:
        return "null_type"
    return type(value).__name__


_KINDS: tuple[tuple[type, str], ...] = (
    (celtypes.BoolType, "bool"),
    (celtypes.UintType, "uint"),
    (celtypes.IntType, "int"),
    (celtypes.DoubleType, "double"),
    (celtypes.StringType, "string"),
    (celtypes.BytesType, "bytes"),
    (celtypes.ListType, "list"),
    (celtypes.MapType, "map"),
    (celtypes.TimestampType, "google.protobuf.Timestamp"),
    (celtypes.DurationType, "google.protobuf.Duration"),
    (Quantity, "kubernetes.Quantity"),
    (Semver, "kubernetes.Semver"),
    (type, "type"),
)


def int_value(value: int) -> Value:
    """A CEL int.  celpy's ``IntType(...)`` rebuilds a range-checking wrapper on every call, which is
    most of the cost of ``compareTo`` and ``size``; check the int64 range here and build it directly."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError("overflow")
    return int.__new__(celtypes.IntType, value)


def no_overload(function: str, *args: Value) -> TypeError:
    return TypeError(
        f"found no matching overload for '{function}' applied to '({', '.join(kind_of(a) for a in args)})'"
    )


def first_error(*args: Value) -> CELEvalError | None:
    for arg in args:
        if isinstance(arg, CELEvalError):
            return arg
    return None


def as_bool(value: Value) -> Value:
    """celpy's CompiledRunner returns plain Python bools from has(); CEL has one bool type."""
    if isinstance(value, bool) and not isinstance(value, celtypes.BoolType):
        return celtypes.BoolType(value)
    return value


_ERROR_LABELS: dict[type[Exception], str] = {
    KeyError: "no such key",
    IndexError: "index out of range",
    ZeroDivisionError: "division by zero",
    OverflowError: "return error for overflow",
    ValueError: "return error for overflow",
    TypeError: "no such overload",
}


def propagating(function: Function) -> Function:
    """Make ``function`` strict in errors (an erroneous argument is the result) and report its own
    failures as CEL error *values*.

    The two celpy runners catch different exception classes from functions (the interpreter lets a
    KeyError or IndexError escape, past ``false && ...``); an error value behaves the same in both.
    """

    @functools.wraps(function)
    def strict(*args: Value) -> Value:
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        try:
            return function(*args)
        except (KeyError, IndexError, ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
            label = next(text for kind, text in _ERROR_LABELS.items() if isinstance(exc, kind))
            error = CELEvalError(label, type(exc), exc.args)
            error.__cause__ = exc
            return error

    return strict


_SCALAR_TYPES = frozenset(
    {celtypes.StringType, celtypes.IntType, celtypes.UintType, celtypes.DoubleType, celtypes.BoolType}
)


def equal(left: Value, right: Value) -> bool:
    """CEL runtime equality: numbers compare across int/uint/double, other mixed kinds are unequal."""
    kind = type(left)
    if kind is type(right) and kind in _SCALAR_TYPES:  # the common case, without the kind lookup
        return bool(left == right)
    left, right = as_bool(left), as_bool(right)
    left_kind, right_kind = kind_of(left), kind_of(right)
    if left_kind in {"int", "uint", "double"} and right_kind in {"int", "uint", "double"}:
        return bool(float(left) == float(right)) if "double" in (left_kind, right_kind) else int(left) == int(right)
    if left_kind != right_kind:
        return False
    if left_kind == "list":
        return len(left) == len(right) and all(equal(a, b) for a, b in zip(left, right, strict=True))
    if left_kind == "map":
        if len(left) != len(right):
            return False
        for key, value in left.items():
            match = [k for k in right if equal(k, key)]
            if not match or not equal(value, right[match[0]]):
                return False
        return True
    if left_kind == "null_type":
        return True
    if left_kind == "type":
        return bool(left is right)
    return bool(left == right)


_ORDERED_KINDS = frozenset(
    {"string", "bytes", "bool", "google.protobuf.Timestamp", "google.protobuf.Duration", "int", "uint", "double"}
)


def compare(function: str, left: Value, right: Value) -> int:
    left, right = as_bool(left), as_bool(right)
    left_kind, right_kind = kind_of(left), kind_of(right)
    numeric = {"int", "uint", "double"}
    if left_kind in numeric and right_kind in numeric:
        # CrossTypeNumericComparisons: exact when both are integers, IEEE otherwise (NaN is unordered).
        if "double" in (left_kind, right_kind):
            a, b = float(left), float(right)
            if a != a or b != b:  # noqa: PLR0124 -- NaN check
                return 2  # unordered: every ordering comparison is false
            return (a > b) - (a < b)
        return (int(left) > int(right)) - (int(left) < int(right))
    if left_kind != right_kind or left_kind not in _ORDERED_KINDS:
        raise no_overload(function, left, right)
    if left_kind == "bool":
        return (bool(left) > bool(right)) - (bool(left) < bool(right))
    return int(left > right) - int(left < right)


def require_string(function: str, *values: Value) -> None:
    for value in values:
        if not isinstance(value, celtypes.StringType):
            raise no_overload(function, *values)


def require_int(function: str, *values: Value) -> None:
    for value in values:
        if kind_of(value) != "int":
            raise no_overload(function, *values)
