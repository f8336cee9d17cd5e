"""Kubernetes' lists library (``isSorted``, ``sum``, ``min``, ``max``) and ext.Sets.

Owns: those functions over celpy lists, with CEL equality and ordering.  (``indexOf`` and
``lastIndexOf`` on lists live with their string overloads in ``strings.py``: one CEL name, one function.)

Must never: be called on anything but celpy values.
"""

from __future__ import annotations

import itertools

from celpy import celtypes

from dra_driver.tools.cel import budget
from dra_driver.tools.cel.functions.operators import add
from dra_driver.tools.cel.functions.values import Value, compare, equal, int_value, no_overload, propagating

# -- lists (Kubernetes lists library) and sets (ext.Sets) -------------------------------------------


def _comparable_list(function: str, values: Value) -> list[Value]:
    if not isinstance(values, celtypes.ListType):
        raise no_overload(function, values)
    budget.charge_size(len(values))
    return list(values)


@propagating
def is_sorted(values: Value) -> Value:
    items = _comparable_list("isSorted", values)
    return celtypes.BoolType(all(compare("isSorted", a, b) in (-1, 0) for a, b in itertools.pairwise(items)))


@propagating
def list_sum(values: Value) -> Value:
    items = _comparable_list("sum", values)
    if not items:
        return int_value(0)
    total = items[0]
    for item in items[1:]:
        total = add(total, item)
    return total


@propagating
def list_min(values: Value) -> Value:
    items = _comparable_list("min", values)
    if not items:
        raise ValueError("min called on empty list")
    best = items[0]
    for item in items[1:]:
        if compare("min", item, best) == -1:
            best = item
    return best


@propagating
def list_max(values: Value) -> Value:
    items = _comparable_list("max", values)
    if not items:
        raise ValueError("max called on empty list")
    best = items[0]
    for item in items[1:]:
        if compare("max", item, best) == 1:
            best = item
    return best


def _lists(function: str, left: Value, right: Value) -> tuple[list[Value], list[Value]]:
    if not isinstance(left, celtypes.ListType) or not isinstance(right, celtypes.ListType):
        raise no_overload(function, left, right)
    budget.charge_size(len(left) * max(1, len(right)))
    return list(left), list(right)


@propagating
def sets_contains(left: Value, right: Value) -> Value:
    container, items = _lists("sets.contains", left, right)
    return celtypes.BoolType(all(any(equal(i, c) for c in container) for i in items))


@propagating
def sets_equivalent(left: Value, right: Value) -> Value:
    a, b = _lists("sets.equivalent", left, right)
    return celtypes.BoolType(
        all(any(equal(x, y) for y in b) for x in a) and all(any(equal(y, x) for x in a) for y in b)
    )


@propagating
def sets_intersects(left: Value, right: Value) -> Value:
    a, b = _lists("sets.intersects", left, right)
    return celtypes.BoolType(any(equal(x, y) for x in a for y in b))
