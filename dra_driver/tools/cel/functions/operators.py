"""CEL's operators and container functions with Kubernetes (cel-go) semantics.

Owns: ``&&``/``||`` (lazy in the right operand, with commutative error absorption), ``!``, ``?:``
(lazy in its branches), ``==``/``!=``, ordering, the arithmetic operators, ``[]``, ``in``, ``size``,
field selection and ``has()`` (as lowered), and the helpers the lowered ``exists_one``/``filter``/``map``
call.

Must never: be called with anything but celpy values (and, for the lazy operators, thunks that return
them), or raise anything but the exceptions :func:`propagating` converts (the undecorated operators
raise only ``TypeError``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TypeVar

from celpy import celtypes
from celpy.evaluation import CELEvalError

from dra_driver.tools.cel import budget
from dra_driver.tools.cel.functions.values import (
    NUMERIC,
    Value,
    as_bool,
    compare,
    equal,
    first_error,
    int_value,
    kind_of,
    no_overload,
    propagating,
)

# -- logic ------------------------------------------------------------------------------------------
#
# ``&&``, ``||`` and ``?:`` are lazy, as in cel-go.  The runners (``environment.py``) pass ``&&``/``||``
# the left operand as a value and the right one as a thunk, a zero-argument callable that evaluates it
# and returns its value or a CEL error value; ``?:`` gets the condition's value and picks the branch the
# runner then evaluates.  An operand that is never evaluated costs nothing, so ``false && <anything>``
# neither charges the budget for the right side nor raises from it.

Thunk = Callable[[], Value]
Branch = TypeVar("Branch")  # whatever a runner uses for an unevaluated operand


def logical_and(left: Value, right: Thunk) -> Value:
    """``&&``: the right side runs only when the left is not ``false``; false wins over an error on
    either side (cel-go's commutative short-circuit: ``<error> && false`` is false)."""
    left = as_bool(left)
    if isinstance(left, celtypes.BoolType) and not left:
        return celtypes.BoolType(False)
    return _and(left, as_bool(right()))


def _and(left: Value, right: Value) -> Value:
    if isinstance(left, celtypes.BoolType) and isinstance(right, celtypes.BoolType):
        return celtypes.BoolType(bool(left) and bool(right))
    if isinstance(right, celtypes.BoolType) and not right:
        return celtypes.BoolType(False)
    error = first_error(left, right)
    if error is not None:
        return error
    raise no_overload("_&&_", left, right)


def logical_or(left: Value, right: Thunk) -> Value:
    """``||``: the right side runs only when the left is not ``true``; true wins over an error."""
    left = as_bool(left)
    if isinstance(left, celtypes.BoolType) and left:
        return celtypes.BoolType(True)
    return _or(left, as_bool(right()))


def _or(left: Value, right: Value) -> Value:
    if isinstance(left, celtypes.BoolType) and isinstance(right, celtypes.BoolType):
        return celtypes.BoolType(bool(left) or bool(right))
    if isinstance(right, celtypes.BoolType) and right:
        return celtypes.BoolType(True)
    error = first_error(left, right)
    if error is not None:
        return error
    raise no_overload("_||_", left, right)


def logical_not(value: Value) -> Value:
    value = as_bool(value)
    if isinstance(value, CELEvalError):
        return value
    if isinstance(value, celtypes.BoolType):
        return celtypes.BoolType(not value)
    raise no_overload("!_", value)


def choose(condition: Value, when_true: Branch, when_false: Branch) -> Branch | CELEvalError:
    """``c ? a : b`` without evaluating a branch: the one to evaluate, or the condition's error.

    The runners evaluate the chosen branch themselves, so a chain ``a ? x : b ? y : ...`` nests no
    deeper in Python than celpy's own evaluation of it.
    """
    condition = as_bool(condition)
    if isinstance(condition, CELEvalError):
        return condition
    if not isinstance(condition, celtypes.BoolType):
        raise no_overload("_?_:_", condition)
    return when_true if condition else when_false


def equals(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    if error is not None:
        return error
    return celtypes.BoolType(equal(left, right))


def not_equals(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    if error is not None:
        return error
    return celtypes.BoolType(not equal(left, right))


def less(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    return error if error is not None else celtypes.BoolType(compare("_<_", left, right) == -1)


def less_equal(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    return error if error is not None else celtypes.BoolType(compare("_<=_", left, right) in (-1, 0))


def greater(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    return error if error is not None else celtypes.BoolType(compare("_>_", left, right) == 1)


def greater_equal(left: Value, right: Value) -> Value:
    error = first_error(left, right)
    return error if error is not None else celtypes.BoolType(compare("_>=_", left, right) in (0, 1))


# -- arithmetic -------------------------------------------------------------------------------------


def _same_numeric(function: str, left: Value, right: Value) -> None:
    if kind_of(left) != kind_of(right) or not isinstance(left, NUMERIC):
        raise no_overload(function, left, right)


def _numeric_result(like: Value, result: Value) -> Value:
    """celpy's DoubleType inherits float's operators, which return plain floats; re-wrap them."""
    if isinstance(like, celtypes.DoubleType) and not isinstance(result, celtypes.DoubleType):
        return celtypes.DoubleType(result)
    return result


@propagating
def add(left: Value, right: Value) -> Value:
    """``+`` on numbers of one type, strings, bytes, lists, and timestamp/duration."""
    left_kind, right_kind = kind_of(left), kind_of(right)
    if left_kind == right_kind and left_kind in {"string", "bytes", "list"}:
        budget.charge_size(len(left) + len(right))
        if left_kind == "list":
            return celtypes.ListType([*left, *right])
        return type(left)(left + right)
    if left_kind == right_kind and left_kind in {"int", "uint", "double"}:
        return _numeric_result(left, left + right)
    if {left_kind, right_kind} <= {"google.protobuf.Timestamp", "google.protobuf.Duration"}:
        return operator.add(left, right)
    raise no_overload("_+_", left, right)


@propagating
def subtract(left: Value, right: Value) -> Value:
    if {kind_of(left), kind_of(right)} <= {"google.protobuf.Timestamp", "google.protobuf.Duration"}:
        return operator.sub(left, right)
    _same_numeric("_-_", left, right)
    return _numeric_result(left, left - right)


@propagating
def multiply(left: Value, right: Value) -> Value:
    _same_numeric("_*_", left, right)
    return _numeric_result(left, left * right)


@propagating
def divide(left: Value, right: Value) -> Value:
    _same_numeric("_/_", left, right)
    if kind_of(right) != "double" and right == 0:
        raise ZeroDivisionError("division by zero")
    return _numeric_result(left, left / right)


@propagating
def modulo(left: Value, right: Value) -> Value:
    if kind_of(left) == "double":
        raise no_overload("_%_", left, right)
    _same_numeric("_%_", left, right)
    if right == 0:
        raise ZeroDivisionError("modulus by zero")
    return left % right


@propagating
def negate(value: Value) -> Value:
    if kind_of(value) not in {"int", "double"}:
        raise no_overload("-_", value)
    return _numeric_result(value, -value)


# -- containers -------------------------------------------------------------------------------------


@propagating
def index(container: Value, key: Value) -> Value:
    """``container[key]``: lists by int, maps by key (missing key: ``no such key``)."""
    if isinstance(container, celtypes.ListType):
        if kind_of(key) not in {"int", "uint"} and not (kind_of(key) == "double" and float(key).is_integer()):
            raise no_overload("_[_]", container, key)
        position = int(key)
        if not 0 <= position < len(container):
            raise IndexError(f"index out of range: {position}")
        return container[position]
    if isinstance(container, celtypes.MapType):
        return container[key]
    raise no_overload("_[_]", container, key)


@propagating
def contained_in(item: Value, container: Value) -> Value:
    """``item in container``: list membership by CEL equality, map key presence."""
    if isinstance(container, celtypes.ListType):
        return celtypes.BoolType(any(equal(item, element) for element in container))
    if isinstance(container, celtypes.MapType):
        if isinstance(item, celtypes.StringType | str):
            return celtypes.BoolType(item in container)
        return celtypes.BoolType(any(equal(item, key) for key in container))
    raise no_overload("@in", item, container)


@propagating
def size(value: Value) -> Value:
    if kind_of(value) not in {"string", "bytes", "list", "map"}:
        raise no_overload("size", value)
    return int_value(len(value))


@propagating
def select(container: Value, field: Value) -> Value:
    """What ``container.field`` lowers to: a map lookup (``no such key``), an error for other types.

    celpy's CompiledRunner emits ``container.get('field')``; on a string that is a Python
    AttributeError, which escapes celpy's error handling and cannot be absorbed by ``false && ...``.
    """
    if isinstance(container, celtypes.MapType):
        return container[field]
    raise TypeError(f"type '{kind_of(container)}' does not support field selection")


@propagating
def has_field(container: Value, field: Value) -> Value:
    """What ``has(container.field)`` lowers to: presence, never an error for a missing key."""
    if isinstance(container, celtypes.MapType):
        return celtypes.BoolType(field in container)
    raise TypeError(f"type '{kind_of(container)}' does not support field selection")


def _predicate(function: str, value: Value) -> Value:
    value = as_bool(value)
    if isinstance(value, CELEvalError | celtypes.BoolType):
        return value
    raise no_overload(function, value)


@propagating
def exactly_one(results: Value) -> Value:
    """What ``l.exists_one(x, p)`` lowers to, given ``l.map(x, p)``: errors are not absorbed."""
    count = 0
    for result in results:
        outcome = _predicate("exists_one", result)
        if isinstance(outcome, CELEvalError):
            return outcome
        count += bool(outcome)
    return celtypes.BoolType(count == 1)


@propagating
def keep(pairs: Value) -> Value:
    """What ``l.filter(x, p)`` lowers to, given ``l.map(x, [x, p])``: the elements whose p is true."""
    kept = []
    for element, result in pairs:
        outcome = _predicate("filter", result)
        if isinstance(outcome, CELEvalError):
            return outcome
        if outcome:
            kept.append(element)
    return celtypes.ListType(kept)


@propagating
def strict_list(values: Value) -> Value:
    """What ``l.map(x, t)`` is wrapped in: a list holding an error value is that error (cel-go)."""
    for value in values:
        if isinstance(value, CELEvalError):
            return value
    return values
