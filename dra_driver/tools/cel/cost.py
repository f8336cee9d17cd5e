"""The worst-case cost of a selector, estimated statically, as kube-apiserver checks it at admission.

Owns: a model of cel-go's cost estimator (``checker/cost.go``) with the sizes Kubernetes declares for
the ``device`` variable and the estimates of its CEL libraries, and :func:`estimate_cost`.  Kubernetes
rejects a selector whose estimated cost exceeds ``CELSelectorExpressionMaxCost`` (1,000,000) as "too
complex, exceeds cost limit"; ``migdra cel lint`` reports the same.

Must never: evaluate anything.  The estimate is a worst case, over every device that could exist, not
the cost on any particular device (that is ``budget.py``'s runtime count).

The model, in cel-go's cost units (each sub-expression's cost is added to its parent's):

- a literal costs 0; an identifier 1; a field selection or an index 1; ``has()`` 0
  (``PresenceTestHasCost(false)``); a list literal 10, a map literal 30.
- ``&&`` and ``||``: both operands (the worst case is that the left one does not decide);
  ``c ? a : b``: the condition plus the dearer branch.
- ``==``, ``!=`` and ordering: a tenth of the smaller operand's size, rounded up (1 for two scalars,
  0 against ``''``); ``in`` on a list: the list's size; on a map: 1.
- string ``+``: a tenth of the result's size; list ``+``: 1.
- ``startsWith``/``endsWith``: a tenth of the argument's size; ``contains``: a tenth of the receiver's
  times a tenth of the argument's; ``matches``/``find``/``findAll``: a tenth of (receiver + 1) times a
  quarter of the pattern's size; ``lowerAscii``/``upperAscii``/``substring``/``trim``: a tenth of the
  receiver's size; ``split``/``replace``: a fifth of it; ``join``: a tenth of the separators' total;
  ``quantity()``/``isQuantity()``/``semver()``/``isSemver()``: a tenth of the argument's size.
- ``isSorted``/``sum``/``min``/``max``/``indexOf``/``lastIndexOf`` on a list: 1 per element (plus a
  tenth of a string element's size); ``sets.*``: the product of the two lists' sizes.
- every other call: 1.
- a comprehension: its range, plus the range's size times the cost of one step, plus the result:
  one step is 3 + the predicate for ``all``, 4 + it for ``exists``, 2 + it for ``exists_one``,
  12 + the transform (+ the filter) for ``map``, 13 + the predicate for ``filter``; ``map`` and
  ``filter`` start from an empty list (10).  ``cel.bind(x, init, body)``: 10 + init + body.

Sizes are maxima, in characters for strings and entries for lists and maps, as Kubernetes declares
them for the estimator: ``device.driver`` 63; ``device.attributes`` and ``device.capacity`` 32 domains
(names up to 63 characters), each a map of 32 ids (up to 32 characters); an attribute value 64;
capacities, numbers and bools are scalars (1).  A string literal's size is its length, a list or map
literal's its entry count; ``map``/``filter`` keep the range's size, ``+`` adds sizes, ``split`` and
``findAll`` return as many entries as the receiver has characters, ``replace`` may multiply the
receiver by the replacement, and anything whose size cel-go would not know is taken as 64 (the
largest value a device holds).  With these sizes the model gives cel-go's figures for the cases in
Kubernetes' DRA ``compile_test.go`` (164 for ``device.attributes.exists_one(x, x == "dra.example.com")``,
85,555,551 for seven nested ``all`` over ten-element lists).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from dra_driver.tools.cel.budget import KUBERNETES_COST_LIMIT
from dra_driver.tools.cel.lookups import DEVICE
from dra_driver.tools.cel.syntax import (
    IN,
    Bind,
    Call,
    Comprehension,
    Has,
    Ident,
    Index,
    ListLit,
    Literal,
    MapLit,
    Node,
    Select,
)

# kube-apiserver rejects a selector above this estimate (resourceapi.CELSelectorExpressionMaxCost).
MAX_ESTIMATED_COST = KUBERNETES_COST_LIMIT

# Kubernetes' declared maxima (k8s.io/api/resource/v1).
MAX_DRIVER_LENGTH = 63  # DriverNameMaxLength
MAX_DOMAIN_LENGTH = 63  # DeviceMaxDomainLength
MAX_ID_LENGTH = 32  # DeviceMaxIDLength
MAX_ATTRIBUTE_VALUE_LENGTH = 64  # DeviceAttributeMaxValueLength
MAX_MAP_ENTRIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice

_TRAVERSAL = 0.1  # cel-go's StringTraversalCostFactor
_REGEX = 0.25  # cel-go's RegexStringLengthCostFactor
_LIST_LITERAL = 10
_MAP_LITERAL = 30


@dataclass(frozen=True, slots=True)
class Size:
    """The largest a value can be: characters of a string, entries of a list or map, 1 for a scalar.

    ``element`` is the size of a list's elements or a map's values, ``key`` of a map's keys (what a
    comprehension over the map binds); ``fields`` the sizes of an object's fields (``device``).
    """

    max: int
    element: Size | None = None
    key: Size | None = None
    fields: Mapping[str, Size] | None = field(default=None, compare=False)


SCALAR = Size(1)
UNKNOWN = Size(MAX_ATTRIBUTE_VALUE_LENGTH)


def _domain_map(value: Size) -> Size:
    return Size(
        MAX_MAP_ENTRIES,
        element=Size(MAX_MAP_ENTRIES, element=value, key=Size(MAX_ID_LENGTH)),
        key=Size(MAX_DOMAIN_LENGTH),
    )


DEVICE_SIZE = Size(
    4,
    fields={
        "driver": Size(MAX_DRIVER_LENGTH),
        "attributes": _domain_map(Size(MAX_ATTRIBUTE_VALUE_LENGTH)),
        "capacity": _domain_map(SCALAR),
        "allowMultipleAllocations": SCALAR,
    },
)


def _element(size: Size) -> Size:
    return size.element if size.element is not None else UNKNOWN


def _iterated(size: Size) -> Size:
    """What a comprehension variable binds: a map's keys, a list's elements."""
    return size.key if size.key is not None else _element(size)


def _union(a: Size, b: Size) -> Size:
    def either(x: Size | None, y: Size | None) -> Size | None:
        if x is None or y is None:
            return x if y is None else y
        return _union(x, y)

    return Size(max(a.max, b.max), either(a.element, b.element), either(a.key, b.key), a.fields or b.fields)


def _factor(size: int, factor: float) -> int:
    """cel-go's ``MultiplyByCostFactor``: rounded up."""
    return math.ceil(size * factor)


@dataclass(frozen=True, slots=True)
class Estimate:
    """The worst-case cost of a node and the size of its value."""

    cost: int
    size: Size


# Per-step overhead of each macro (cel-go's loop condition and step, without the user's predicate),
# the cost of its accumulator's initial value, and of its result expression.
_STEP = {"all": 3, "exists": 4, "exists_one": 2, "map": 12, "filter": 13}
_INIT = {"all": 0, "exists": 0, "exists_one": 0, "map": _LIST_LITERAL, "filter": _LIST_LITERAL}
_RESULT = {"all": 1, "exists": 1, "exists_one": 2, "map": 1, "filter": 1}

_COMPARISONS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
_RECEIVER_SIZED = frozenset({"lowerAscii", "upperAscii", "substring", "trim", "charAt", "strings.quote"})
_LIST_SCANS = frozenset({"isSorted", "sum", "min", "max"})
_PARSERS = frozenset({"quantity", "isQuantity", "semver", "isSemver"})


class _Estimator:
    def __init__(self) -> None:
        self.costs: dict[int, int] = {}  # id(node) -> cost, for reporting the dearest part

    def estimate(self, node: Node, env: Mapping[str, Size]) -> Estimate:
        result = self._estimate(node, env)
        self.costs[id(node)] = result.cost
        return result

    def _estimate(self, node: Node, env: Mapping[str, Size]) -> Estimate:
        if isinstance(node, Literal):
            if node.kind in {"string", "bytes"}:
                return Estimate(0, Size(len(node.value) if isinstance(node.value, str | bytes) else 0))
            return Estimate(0, SCALAR)
        if isinstance(node, Ident):
            return Estimate(1, env.get(node.name, UNKNOWN))
        if isinstance(node, Select):
            operand = self.estimate(node.operand, env)
            return Estimate(operand.cost + 1, self._member(operand.size, node.field))
        if isinstance(node, Index):
            operand = self.estimate(node.operand, env)
            index = self.estimate(node.index, env)
            return Estimate(operand.cost + index.cost + 1, _element(operand.size))
        if isinstance(node, Has):
            return Estimate(self.estimate(node.operand, env).cost, SCALAR)
        if isinstance(node, ListLit):
            elements = [self.estimate(element, env) for element in node.elements]
            element = _union_all([e.size for e in elements])
            return Estimate(_LIST_LITERAL + sum(e.cost for e in elements), Size(len(elements), element=element))
        if isinstance(node, MapLit):
            keys = [self.estimate(key, env) for key, _ in node.entries]
            values = [self.estimate(value, env) for _, value in node.entries]
            cost = _MAP_LITERAL + sum(e.cost for e in keys) + sum(e.cost for e in values)
            size = Size(len(keys), element=_union_all([v.size for v in values]), key=_union_all([k.size for k in keys]))
            return Estimate(cost, size)
        if isinstance(node, Bind):
            init = self.estimate(node.init, env)
            body = self.estimate(node.body, {**env, node.var: init.size})
            return Estimate(_LIST_LITERAL + init.cost + body.cost, body.size)
        if isinstance(node, Comprehension):
            return self._comprehension(node, env)
        if isinstance(node, Call):
            return self._call(node, env)
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    @staticmethod
    def _member(operand: Size, name: str) -> Size:
        if operand.fields is not None:
            return operand.fields.get(name, UNKNOWN)
        return _element(operand)

    def _comprehension(self, node: Comprehension, env: Mapping[str, Size]) -> Estimate:
        source = self.estimate(node.range, env)
        variable = _iterated(source.size)
        inner = {**env, node.var: variable}
        body = self.estimate(node.body, inner)
        step = _STEP[node.macro] + body.cost
        if node.filter is not None:
            step += self.estimate(node.filter, inner).cost
        cost = source.cost + _INIT[node.macro] + source.size.max * step + _RESULT[node.macro]
        if node.macro == "map":
            size = Size(source.size.max, element=body.size)
        elif node.macro == "filter":
            size = Size(source.size.max, element=variable)
        else:
            size = SCALAR
        return Estimate(cost, size)

    def _call(self, node: Call, env: Mapping[str, Size]) -> Estimate:
        function = node.function
        target = self.estimate(node.target, env) if node.target is not None else None
        args = [self.estimate(arg, env) for arg in node.args]
        arguments = (target.cost if target is not None else 0) + sum(a.cost for a in args)
        sizes = [a.size for a in args]
        receiver = target.size if target is not None else None

        if function in {"_&&_", "_||_"}:
            return Estimate(arguments, SCALAR)
        if function == "_?_:_":
            condition, when_true, when_false = args
            return Estimate(
                condition.cost + max(when_true.cost, when_false.cost), _union(when_true.size, when_false.size)
            )
        if function in _COMPARISONS and len(sizes) == 2:
            return Estimate(arguments + _factor(min(sizes[0].max, sizes[1].max), _TRAVERSAL), SCALAR)
        if function == IN and len(sizes) == 2:
            container = sizes[1]
            return Estimate(arguments + (1 if container.key is not None else container.max), SCALAR)
        if function == "_+_" and len(sizes) == 2:
            left, right = sizes
            total = left.max + right.max
            if left.element is not None or right.element is not None:  # lists
                element = _union(_element(left), _element(right))
                return Estimate(arguments + 1, Size(total, element=element))
            return Estimate(arguments + _factor(total, _TRAVERSAL), Size(total))
        if function in {"!_", "-_"}:
            return Estimate(arguments + 1, SCALAR)
        if function == "dyn" and sizes:
            return Estimate(arguments, sizes[0])
        if function in _PARSERS and sizes:
            return Estimate(arguments + _factor(sizes[0].max, _TRAVERSAL), SCALAR)
        if function == "matches" and (receiver is not None or len(sizes) == 2):
            text, pattern = (receiver, sizes[0]) if receiver is not None else (sizes[0], sizes[1])
            return Estimate(arguments + _regex(text, pattern), SCALAR)
        if receiver is not None:
            return self._method(function, receiver, sizes, arguments)
        if function.startswith("sets.") and len(sizes) == 2:
            return Estimate(arguments + 1 + sizes[0].max * sizes[1].max, SCALAR)
        return Estimate(arguments + 1, UNKNOWN if function in {"string", "bytes"} else SCALAR)

    @staticmethod
    def _method(function: str, receiver: Size, sizes: list[Size], arguments: int) -> Estimate:
        if function in {"startsWith", "endsWith"} and sizes:
            return Estimate(arguments + _factor(sizes[0].max, _TRAVERSAL), SCALAR)
        if function == "contains" and sizes:
            product = _factor(receiver.max, _TRAVERSAL) * _factor(sizes[0].max, _TRAVERSAL)
            return Estimate(arguments + product, SCALAR)
        if function in {"find", "findAll"} and sizes:
            size = Size(receiver.max, element=Size(receiver.max)) if function == "findAll" else Size(receiver.max)
            return Estimate(arguments + _regex(receiver, sizes[0]), size)
        if function in _RECEIVER_SIZED:
            return Estimate(arguments + _factor(receiver.max, _TRAVERSAL), Size(receiver.max))
        if function == "split":
            pieces = Size(receiver.max + 1, element=Size(receiver.max))
            return Estimate(arguments + _factor(receiver.max, 2 * _TRAVERSAL), pieces)
        if function == "replace" and len(sizes) >= 2:
            grown = receiver.max * max(1, sizes[1].max) + sizes[1].max
            return Estimate(arguments + _factor(receiver.max, 2 * _TRAVERSAL), Size(grown))
        if function == "join":
            element = _element(receiver)
            separators = max(receiver.max - 1, 0) * (sizes[0].max if sizes else 0)
            joined = receiver.max * element.max + separators
            return Estimate(arguments + _factor(separators, _TRAVERSAL), Size(joined))
        if function == "format":
            total = receiver.max + sum(s.max * _element(s).max for s in sizes)
            return Estimate(arguments + _factor(total, _TRAVERSAL), Size(total))
        if function in _LIST_SCANS or (function in {"indexOf", "lastIndexOf"} and receiver.element is not None):
            element = _element(receiver)
            per_element = 1 + (_factor(element.max, _TRAVERSAL) if element.max > 1 else 0)
            result = element if function in {"sum", "min", "max"} else SCALAR
            return Estimate(arguments + receiver.max * per_element, result)
        if function in {"indexOf", "lastIndexOf"}:
            return Estimate(arguments + _factor(receiver.max, _TRAVERSAL), SCALAR)
        return Estimate(arguments + 1, SCALAR)


def _regex(text: Size, pattern: Size) -> int:
    return _factor(text.max + 1, _TRAVERSAL) * _factor(pattern.max, _REGEX)


def _union_all(sizes: list[Size]) -> Size | None:
    if not sizes:
        return None
    result = sizes[0]
    for size in sizes[1:]:
        result = _union(result, size)
    return result


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """The estimated worst-case cost of a selector and, when it is a comprehension's fault, which one."""

    cost: int
    costliest: Node | None  # the outermost comprehension that costs the most, if any

    @property
    def too_complex(self) -> bool:
        return self.cost > MAX_ESTIMATED_COST


def estimate_cost(tree: Node) -> CostEstimate:
    """The worst-case cost of ``tree`` (a checked selector) under the model in this module's docstring."""
    estimator = _Estimator()
    total = estimator.estimate(tree, {DEVICE: DEVICE_SIZE}).cost
    outermost = _outermost_comprehensions(tree)
    costliest = max(outermost, key=lambda node: estimator.costs.get(id(node), 0), default=None)
    return CostEstimate(total, costliest)


def _outermost_comprehensions(tree: Node) -> list[Node]:
    found: list[Node] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Comprehension):
            found.append(node)
            continue
        stack.extend(node.children())
    return found
