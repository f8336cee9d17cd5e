"""Static checking of a DRA selector, standing in for cel-go's type checker (celpy has none).

Owns: the types of the DRA environment (``device`` is ``kubernetes.DRADevice``; attribute values are
``dyn``; capacities are ``kubernetes.Quantity``), the overloads of every function migdra provides,
undeclared names, undefined ``device`` fields, the result-type rule (bool or dyn), and Kubernetes'
literal validators (regex, duration and timestamp literals; homogeneous list and map literals).

Must never: evaluate anything.  Anything it cannot decide (a ``dyn`` operand) it accepts, as cel-go
does; the runtime then decides.

Given ``attribute_types`` (from migdra's vocabulary) the checker also types our own attributes, which
lets ``migdra cel lint`` find comparisons that would fail at runtime on migdra's devices, e.g.
``driverVersion > '580'``.  Those are runtime problems in Kubernetes, not compile errors, so only lint
asks for that mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from dra_driver.tools.cel.errors import CELCompileError
from dra_driver.tools.cel.lookups import DEVICE, DeviceLookup, device_lookup
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
    Span,
)


def _dot(node: Select) -> Node:
    """Where cel-go reports an error of a field selection: at its ``.`` (right after the operand), not
    at the start of the operand."""
    operand = node.operand.span
    offset = operand.end - node.span.start
    return Select(
        node.operand, node.field, Span(operand.end, operand.end + 1, node.span.line, node.span.column + offset)
    )


@dataclass(frozen=True, slots=True)
class CelType:
    """A CEL type; ``param`` marks an overload's type parameter (A, B)."""

    name: str
    params: tuple[CelType, ...] = ()
    param: bool = False

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(str(p) for p in self.params)})"


BOOL = CelType("bool")
INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
NULL = CelType("null_type")
DYN = CelType("dyn")
TYPE = CelType("type")
TIMESTAMP = CelType("google.protobuf.Timestamp")
DURATION = CelType("google.protobuf.Duration")
QUANTITY = CelType("kubernetes.Quantity")
SEMVER = CelType("kubernetes.Semver")
DEVICE_TYPE = CelType("kubernetes.DRADevice")
_A = CelType("A", param=True)
_B = CelType("B", param=True)


def list_of(element: CelType) -> CelType:
    return CelType("list", (element,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


DEVICE_FIELD_TYPES: dict[str, CelType] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, DYN)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}
TYPE_NAMES = frozenset({"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"})


@dataclass(frozen=True, slots=True)
class Overload:
    receiver: CelType | None  # None: a global function
    params: tuple[CelType, ...]
    result: CelType


def _g(params: tuple[CelType, ...], result: CelType) -> Overload:
    return Overload(None, params, result)


def _m(receiver: CelType, params: tuple[CelType, ...], result: CelType) -> Overload:
    return Overload(receiver, params, result)


_NUMBERS = (INT, UINT, DOUBLE)
_ORDERED = (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION)
# CrossTypeNumericComparisons (Kubernetes 1.28+): int/uint/double compare with each other.
_ORDERING = [_g((t, t), BOOL) for t in _ORDERED] + [_g((a, b), BOOL) for a in _NUMBERS for b in _NUMBERS if a != b]
_STRING_ARGS_BOOL = [_m(STRING, (STRING,), BOOL)]
_COMPARABLE_KUBE = [_m(QUANTITY, (QUANTITY,), BOOL), _m(SEMVER, (SEMVER,), BOOL)]

OVERLOADS: dict[str, list[Overload]] = {
    "_==_": [_g((_A, _A), BOOL)],
    "_!=_": [_g((_A, _A), BOOL)],
    "_<_": _ORDERING,
    "_<=_": _ORDERING,
    "_>_": _ORDERING,
    "_>=_": _ORDERING,
    "_+_": [_g((t, t), t) for t in (INT, UINT, DOUBLE, STRING, BYTES)]
    + [
        _g((list_of(_A), list_of(_A)), list_of(_A)),
        _g((TIMESTAMP, DURATION), TIMESTAMP),
        _g((DURATION, TIMESTAMP), TIMESTAMP),
        _g((DURATION, DURATION), DURATION),
    ],
    "_-_": [_g((t, t), t) for t in _NUMBERS]
    + [
        _g((TIMESTAMP, TIMESTAMP), DURATION),
        _g((TIMESTAMP, DURATION), TIMESTAMP),
        _g((DURATION, DURATION), DURATION),
    ],
    "_*_": [_g((t, t), t) for t in _NUMBERS],
    "_/_": [_g((t, t), t) for t in _NUMBERS],
    "_%_": [_g((t, t), t) for t in (INT, UINT)],
    "-_": [_g((INT,), INT), _g((DOUBLE,), DOUBLE)],
    "!_": [_g((BOOL,), BOOL)],
    "_&&_": [_g((BOOL, BOOL), BOOL)],
    "_||_": [_g((BOOL, BOOL), BOOL)],
    IN: [_g((_A, list_of(_A)), BOOL), _g((_A, map_of(_A, _B)), BOOL)],
    "_[_]": [_g((list_of(_A), INT), _A), _g((map_of(_A, _B), _A), _B)],
    # standard functions
    "size": [
        *(_g((t,), INT) for t in (STRING, BYTES, list_of(_A), map_of(_A, _B))),
        *(_m(t, (), INT) for t in (STRING, BYTES, list_of(_A), map_of(_A, _B))),
    ],
    "contains": _STRING_ARGS_BOOL,
    "startsWith": _STRING_ARGS_BOOL,
    "endsWith": _STRING_ARGS_BOOL,
    "matches": [_m(STRING, (STRING,), BOOL), _g((STRING, STRING), BOOL)],
    "int": [_g((t,), INT) for t in (INT, UINT, DOUBLE, STRING, TIMESTAMP)],
    "uint": [_g((t,), UINT) for t in (INT, UINT, DOUBLE, STRING)],
    "double": [_g((t,), DOUBLE) for t in (INT, UINT, DOUBLE, STRING)],
    "string": [_g((t,), STRING) for t in (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION)],
    "bytes": [_g((t,), BYTES) for t in (STRING, BYTES)],
    "bool": [_g((t,), BOOL) for t in (BOOL, STRING)],
    "dyn": [_g((_A,), DYN)],
    "type": [_g((_A,), TYPE)],
    "duration": [_g((STRING,), DURATION)],
    "timestamp": [_g((STRING,), TIMESTAMP)],
    # Kubernetes regex library
    "find": [_m(STRING, (STRING,), STRING)],
    "findAll": [_m(STRING, (STRING,), list_of(STRING)), _m(STRING, (STRING, INT), list_of(STRING))],
    # ext.Strings v2
    "charAt": [_m(STRING, (INT,), STRING)],
    "indexOf": [_m(STRING, (STRING,), INT), _m(STRING, (STRING, INT), INT), _m(list_of(_A), (_A,), INT)],
    "lastIndexOf": [_m(STRING, (STRING,), INT), _m(STRING, (STRING, INT), INT), _m(list_of(_A), (_A,), INT)],
    "lowerAscii": [_m(STRING, (), STRING)],
    "upperAscii": [_m(STRING, (), STRING)],
    "trim": [_m(STRING, (), STRING)],
    "replace": [_m(STRING, (STRING, STRING), STRING), _m(STRING, (STRING, STRING, INT), STRING)],
    "split": [_m(STRING, (STRING,), list_of(STRING)), _m(STRING, (STRING, INT), list_of(STRING))],
    "substring": [_m(STRING, (INT,), STRING), _m(STRING, (INT, INT), STRING)],
    "join": [_m(list_of(STRING), (), STRING), _m(list_of(STRING), (STRING,), STRING)],
    "format": [_m(STRING, (list_of(_A),), STRING)],
    "strings.quote": [_g((STRING,), STRING)],
    # Kubernetes lists library
    "isSorted": [_m(list_of(_A), (), BOOL)],
    "sum": [_m(list_of(_A), (), _A)],
    "min": [_m(list_of(_A), (), _A)],
    "max": [_m(list_of(_A), (), _A)],
    # ext.Sets
    "sets.contains": [_g((list_of(_A), list_of(_A)), BOOL)],
    "sets.equivalent": [_g((list_of(_A), list_of(_A)), BOOL)],
    "sets.intersects": [_g((list_of(_A), list_of(_A)), BOOL)],
    # Kubernetes quantity library
    "quantity": [_g((STRING,), QUANTITY)],
    "isQuantity": [_g((STRING,), BOOL)],
    "sign": [_m(QUANTITY, (), INT)],
    "asApproximateFloat": [_m(QUANTITY, (), DOUBLE)],
    "asInteger": [_m(QUANTITY, (), INT)],
    "isInteger": [_m(QUANTITY, (), BOOL)],
    "add": [_m(QUANTITY, (QUANTITY,), QUANTITY), _m(QUANTITY, (INT,), QUANTITY)],
    "sub": [_m(QUANTITY, (QUANTITY,), QUANTITY), _m(QUANTITY, (INT,), QUANTITY)],
    "isGreaterThan": _COMPARABLE_KUBE,
    "isLessThan": _COMPARABLE_KUBE,
    "compareTo": [_m(QUANTITY, (QUANTITY,), INT), _m(SEMVER, (SEMVER,), INT)],
    # Kubernetes semver library (v1: the normalize flag)
    "semver": [_g((STRING,), SEMVER), _g((STRING, BOOL), SEMVER)],
    "isSemver": [_g((STRING,), BOOL), _g((STRING, BOOL), BOOL)],
    "major": [_m(SEMVER, (), INT)],
    "minor": [_m(SEMVER, (), INT)],
    "patch": [_m(SEMVER, (), INT)],
}
for _getter in ("getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getMonth"):
    OVERLOADS[_getter] = [_m(TIMESTAMP, (), INT), _m(TIMESTAMP, (STRING,), INT)]
for _getter in ("getHours", "getMilliseconds", "getMinutes", "getSeconds"):
    OVERLOADS[_getter] = [_m(TIMESTAMP, (), INT), _m(TIMESTAMP, (STRING,), INT), _m(DURATION, (), INT)]

_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})


@dataclass(frozen=True, slots=True)
class Issue:
    message: str
    span: Span


@dataclass(slots=True)
class CheckResult:
    """The inferred result type and every problem found (empty when the expression compiles)."""

    result_type: CelType
    issues: list[Issue] = field(default_factory=list)


def _unify(param: CelType, actual: CelType, binding: dict[str, CelType]) -> bool:
    if DYN in (param, actual):
        return True
    if param.param:
        bound = binding.get(param.name)
        if bound is None or bound == DYN:
            binding[param.name] = actual
            return True
        return _unify(bound, actual, binding)
    if param.name != actual.name or len(param.params) != len(actual.params):
        return False
    return all(_unify(p, a, binding) for p, a in zip(param.params, actual.params, strict=True))


def _substitute(result: CelType, binding: Mapping[str, CelType]) -> CelType:
    if result.param:
        return binding.get(result.name, DYN)
    if not result.params:
        return result
    return CelType(result.name, tuple(_substitute(p, binding) for p in result.params))


def _display(name: str) -> str:
    return name


class _Checker:
    def __init__(self, attribute_types: Mapping[tuple[str, str], CelType] | None) -> None:
        self.attribute_types = attribute_types
        self.issues: list[Issue] = []
        # List literals passed straight to format() may mix types (cel-go exempts format's arguments).
        self.mixed_lists_allowed: set[int] = set()

    def fail(self, message: str, node: Node) -> CelType:
        self.issues.append(Issue(message, node.span))
        return DYN

    def check(self, node: Node, env: Mapping[str, CelType], aliases: Mapping[str, DeviceLookup]) -> CelType:
        if isinstance(node, Literal):
            return {
                "int": INT,
                "uint": UINT,
                "double": DOUBLE,
                "string": STRING,
                "bytes": BYTES,
                "bool": BOOL,
                "null": NULL,
            }[node.kind]
        if isinstance(node, Ident):
            if node.name in env:
                return env[node.name]
            if node.name in TYPE_NAMES:
                return TYPE
            return self.fail(f"undeclared reference to '{node.name}' (in container '')", node)
        if isinstance(node, (Select, Index)):
            return self.selection(node, env, aliases)
        if isinstance(node, Has):
            operand = self.check(node.operand, env, aliases)
            if operand not in (DYN, DEVICE_TYPE) and operand.name != "map":
                self.fail(f"type '{operand}' does not support field selection", node)
            return BOOL
        if isinstance(node, ListLit):
            elements = [self.check(element, env, aliases) for element in node.elements]
            if id(node) in self.mixed_lists_allowed:
                return list_of(DYN)
            return list_of(self.homogeneous(elements, node.elements))
        if isinstance(node, MapLit):
            keys = [self.check(key, env, aliases) for key, _ in node.entries]
            values = [self.check(value, env, aliases) for _, value in node.entries]
            return map_of(
                self.homogeneous(keys, [k for k, _ in node.entries]),
                self.homogeneous(values, [v for _, v in node.entries]),
            )
        if isinstance(node, Comprehension):
            return self.comprehension(node, env, aliases)
        if isinstance(node, Bind):
            init = self.check(node.init, env, aliases)
            inner_aliases = dict(aliases)
            inner_aliases.pop(node.var, None)
            lookup = device_lookup(node.init, aliases, self.shadowed(env))
            if lookup is not None and lookup.name is None:
                inner_aliases[node.var] = lookup
            return self.check(node.body, {**env, node.var: init}, inner_aliases)
        if isinstance(node, Call):
            return self.call(node, env, aliases)
        raise AssertionError(f"unknown node {node!r}")  # pragma: no cover

    @staticmethod
    def shadowed(env: Mapping[str, CelType]) -> frozenset[str]:
        return frozenset() if env.get(DEVICE) == DEVICE_TYPE else frozenset({DEVICE})

    def homogeneous(self, types: list[CelType], nodes: tuple[Node, ...] | list[Node]) -> CelType:
        """Kubernetes' homogeneous-aggregate-literal validator: one element type per literal."""
        known = [(t, n) for t, n in zip(types, nodes, strict=True) if t != DYN]
        if not known:
            return DYN
        first = known[0][0]
        for element_type, element in known[1:]:
            if not _unify(first, element_type, {}):
                self.fail(f"expected type '{first}' but found '{element_type}'", element)
        return first

    def selection(
        self, node: Select | Index, env: Mapping[str, CelType], aliases: Mapping[str, DeviceLookup]
    ) -> CelType:
        lookup = device_lookup(node, aliases, self.shadowed(env))
        if lookup is not None and lookup.name is not None:
            # Type the operand for its own errors, then give the value its vocabulary type if known.
            self.check(node.operand, env, aliases)
            if isinstance(node, Index):
                self.check(node.index, env, aliases)
            if lookup.kind == "capacity":
                return QUANTITY
            if self.attribute_types is not None:
                return self.attribute_types.get((lookup.domain, lookup.name), DYN)
            return DYN
        operand = self.check(node.operand, env, aliases)
        if isinstance(node, Select):
            if operand == DEVICE_TYPE:
                if node.field not in DEVICE_FIELD_TYPES:
                    return self.fail(f"undefined field '{node.field}'", _dot(node))
                return DEVICE_FIELD_TYPES[node.field]
            if operand == DYN:
                return DYN
            if operand.name == "map":
                if not _unify(operand.params[0], STRING, {}):
                    return self.fail(f"type '{operand}' does not support field selection", _dot(node))
                return operand.params[1]
            return self.fail(f"type '{operand}' does not support field selection", _dot(node))
        index = self.check(node.index, env, aliases)
        if operand == DEVICE_TYPE:
            return self.fail(f"found no matching overload for '_[_]' applied to '({operand}, {index})'", node)
        return self.resolve("_[_]", None, [operand, index], node)

    def comprehension(
        self, node: Comprehension, env: Mapping[str, CelType], aliases: Mapping[str, DeviceLookup]
    ) -> CelType:
        range_type = self.check(node.range, env, aliases)
        if range_type == DYN:
            element = DYN
        elif range_type.name in {"list", "map"}:
            element = range_type.params[0]
        else:
            self.fail(
                f"expression of type '{range_type}' cannot be the range of a comprehension "
                "(must be list, map, or dynamic)",
                node.range,
            )
            element = DYN
        inner_env = {**env, node.var: element}
        inner_aliases = {name: value for name, value in aliases.items() if name != node.var}
        if node.filter is not None:
            self.expect_bool(self.check(node.filter, inner_env, inner_aliases), node.filter)
        body = self.check(node.body, inner_env, inner_aliases)
        if node.macro == "map":
            return list_of(body)
        if node.macro == "filter":
            self.expect_bool(body, node.body)
            return list_of(element)
        self.expect_bool(body, node.body)
        return BOOL

    def expect_bool(self, found: CelType, node: Node) -> None:
        if found not in (BOOL, DYN):
            self.fail(f"expected type 'bool' but found '{found}'", node)

    def call(self, node: Call, env: Mapping[str, CelType], aliases: Mapping[str, DeviceLookup]) -> CelType:
        if node.function == "format":
            self.mixed_lists_allowed.update(id(arg) for arg in node.args if isinstance(arg, ListLit))
        target = self.check(node.target, env, aliases) if node.target is not None else None
        args = [self.check(arg, env, aliases) for arg in node.args]
        if node.function == "_?_:_":
            self.expect_bool(args[0], node.args[0])
            left, right = args[1], args[2]
            if DYN in (left, right):
                return DYN
            if not _unify(left, right, {}):
                return self.fail(f"found no matching overload for '_?_:_' applied to '(bool, {left}, {right})'", node)
            return left
        if node.function not in OVERLOADS:
            return self.fail(f"undeclared reference to '{node.function}' (in container '')", node)
        self.validate_literals(node)
        return self.resolve(node.function, target, args, node)

    def resolve(self, function: str, target: CelType | None, args: list[CelType], node: Node) -> CelType:
        results: list[CelType] = []
        for overload in OVERLOADS[function]:
            if (overload.receiver is None) != (target is None) or len(overload.params) != len(args):
                continue
            binding: dict[str, CelType] = {}
            if target is not None and overload.receiver is not None and not _unify(overload.receiver, target, binding):
                continue
            if all(_unify(p, a, binding) for p, a in zip(overload.params, args, strict=True)):
                results.append(_substitute(overload.result, binding))
        if not results:
            rendered = ", ".join(str(a) for a in args)
            applied = f"{target}.({rendered})" if target is not None else f"({rendered})"
            return self.fail(f"found no matching overload for '{_display(function)}' applied to '{applied}'", node)
        first = results[0]
        return first if all(r == first for r in results) else DYN

    def validate_literals(self, node: Call) -> None:
        """cel-go's AST validators Kubernetes installs: regex, duration and timestamp literals."""
        pattern: Node | None = None
        if node.function in _REGEX_FUNCTIONS and node.target is not None and node.args:
            pattern = node.args[0]
        elif node.function == "matches" and node.target is None and len(node.args) == 2:
            pattern = node.args[1]
        if isinstance(pattern, Literal) and pattern.kind == "string":
            try:
                re2.compile(str(pattern.value))
            except re2.error as exc:
                self.fail(f"invalid {node.function} argument: {exc}", pattern)
        if node.function in {"duration", "timestamp"} and node.args:
            literal = node.args[0]
            if isinstance(literal, Literal) and literal.kind == "string":
                from celpy import celtypes  # noqa: PLC0415 -- only for this rare literal check

                try:
                    (celtypes.DurationType if node.function == "duration" else celtypes.TimestampType)(
                        str(literal.value)
                    )
                except (ValueError, TypeError) as exc:
                    self.fail(f"invalid {node.function} argument: {exc}", literal)


def check(
    tree: Node,
    *,
    attribute_types: Mapping[tuple[str, str], CelType] | None = None,
) -> CheckResult:
    """Infer ``tree``'s type with ``device`` declared; collect every problem instead of stopping."""
    checker = _Checker(attribute_types)
    result = checker.check(tree, {DEVICE: DEVICE_TYPE}, {})
    if result not in (BOOL, DYN):
        checker.issues.append(Issue(f"must evaluate to bool or the unknown type, not {result}", tree.span))
    return CheckResult(result, checker.issues)


def ensure_valid(expression: str, tree: Node) -> CelType:
    """Raise :class:`CELCompileError` for the first problem :func:`check` finds; return the result type."""
    result = check(tree)
    if result.issues:
        issue = result.issues[0]
        raise CELCompileError(expression, issue.message, line=issue.span.line, column=issue.span.column)
    return result.result_type
