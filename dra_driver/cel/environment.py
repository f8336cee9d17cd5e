"""The celpy side of the DRA environment: runners, activations, the budget hooks, error translation.

Owns everything that depends on celpy's internals, in one place:

- :class:`CompiledRunner`: celpy's Transpiler turns the lowered expression into Python source once;
  we compile that source into a *private* namespace and keep its entry function.  celpy's own
  ``CompiledRunner.evaluate`` re-``exec``s the code into celpy's module globals on every call, which
  is slower and not thread-safe; ours is neither.
- :class:`InterpretedRunner`: celpy's tree-walking Evaluator, with macros that return errors as values
  (celpy's raise past ``&&``/``||``, which would stop ``false && cel.bind(...)`` from absorbing them).
- :class:`BudgetActivation`: celpy creates one nested activation per comprehension step in both
  runners; charging the budget there bounds every loop.
- :func:`translate_error`: celpy's error values and labels -> Kubernetes' wording.

Must never: let celpy's process-wide state (its parser singleton, its module globals) change, or
import anything above it (``program.py`` drives it).
"""

from __future__ import annotations

import enum
import importlib.metadata
import re
import sys
from typing import Any

import lark
from celpy import celtypes, evaluation
from celpy.evaluation import CELEvalError

import dra_driver
from dra_driver.cel import budget
from dra_driver.cel.device import DeviceActivation
from dra_driver.cel.errors import CELRuntimeError
from dra_driver.cel.functions import FUNCTIONS, kind_of

# celpy's evaluators recurse once per grammar level; celpy.Environment raises the limit to 2500 for the
# same reason.  We never lower it.
_RECURSION_LIMIT = 2500
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)


class RunnerKind(enum.StrEnum):
    """Which celpy runner evaluates a program."""

    COMPILED = "compiled"  # transpiled to Python: 5-10x faster per evaluation; the default
    INTERPRETED = "interpreted"  # walks the parse tree: slower, simpler; kept for cross-checking


_ACTIVATION_FIELDS = frozenset({"identifiers", "functions", "package"})


class BudgetActivation(evaluation.Activation):
    """A celpy Activation that charges the thread's budget for every comprehension step.

    celpy builds nested activations with ``Activation(...)`` and ``clone()`` with ``Activation()``;
    both are overridden so every level stays a BudgetActivation.
    """

    def nested_activation(self, annotations: Any = None, vars: Any = None) -> BudgetActivation:
        current = budget.current()
        if current is not None:
            current.charge(1)
        return BudgetActivation(
            annotations=annotations, vars=vars, functions=self.functions, package=self.package, based_on=self
        )

    def __getattr__(self, name: str) -> Any:
        """``activation.device`` in transpiled code.  celpy's version builds ``typing.Union`` objects on
        every call, a third of an evaluation; this is the same lookup without them."""
        if name.startswith("__") or name in _ACTIVATION_FIELDS:
            raise AttributeError(name)  # not yet set (during construction): never a CEL variable
        referent = dict.get(self.identifiers, name)
        if referent is not None and referent._value_set:
            return referent._value
        try:
            referent = self.identifiers.resolve_name(self.package, name)
        except KeyError:
            return self.functions[name]
        if referent._value_set:
            return referent.value
        if referent.container:
            return referent.container
        return referent.annotation

    get = __getattr__

    def clone(self) -> BudgetActivation:
        current = budget.current()
        if current is not None:
            current.charge(1)
        clone = BudgetActivation.__new__(BudgetActivation)
        clone.identifiers = self.identifiers.clone()
        clone.functions = self.functions  # shared: functions never change during an evaluation
        clone.package = self.package
        return clone


def device_activation(device: DeviceActivation) -> BudgetActivation:
    """The celpy activation of a device, built once and kept on the DeviceActivation."""
    runtime = device.runtime
    if not isinstance(runtime, BudgetActivation):
        runtime = BudgetActivation(functions=FUNCTIONS, vars=device.context)
        device.runtime = runtime
    return runtime


# -- runners ----------------------------------------------------------------------------------------

_ENTRY = "__migdra_entry__"
_LAST_LINE = re.compile(r"^CEL = celpy\.evaluation\.result\(base_activation, (?P<entry>.*)\)$")


def _transpiled_namespace() -> dict[str, Any]:
    """A copy of the globals celpy's generated code expects, plus our package for our functions."""
    namespace = dict(evaluation.result.__globals__)
    namespace["dra_driver"] = dra_driver
    return namespace


class CompiledRunner:
    """celpy's transpiler, compiled once into a private namespace (thread-safe, no exec per call)."""

    kind = RunnerKind.COMPILED

    def __init__(self, tree: evaluation.TranspilerTree) -> None:
        transpiler = evaluation.Transpiler(ast=tree, activation=BudgetActivation(functions=FUNCTIONS))
        transpiler.transpile()
        lines = transpiler.source_text.rstrip("\n").split("\n")
        last = _LAST_LINE.match(lines[-1])
        if last is None:  # pragma: no cover -- guards against a celpy upgrade changing its output
            raise RuntimeError(f"unexpected celpy transpiler output: {lines[-1]!r}")
        lines[-1] = f"{_ENTRY} = {last.group('entry')}"
        namespace = _transpiled_namespace()
        self.source_text = _hoist_literals("\n".join(lines), namespace)
        exec(compile(self.source_text, "<cel>", "exec"), namespace)
        self._entry = namespace[_ENTRY]

    def run(self, activation: BudgetActivation) -> Any:
        """The result value, or a celpy ``CELEvalError`` value; other exceptions propagate."""
        return evaluation.result(activation, self._entry)


# celpy emits every literal as a constructor call (``celpy.celtypes.IntType(0)``) evaluated on every run;
# IntType's constructor alone costs microseconds.  Literal values are immutable, so build each once.
_LITERAL = re.compile(
    r"celpy\.celtypes\.(?P<type>StringType|IntType|UintType|DoubleType|BoolType)\("
    r"(?P<arg>'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|-?[0-9][0-9a-fA-FxX.eE+-]*|True|False)\)"
)


def _hoist_literals(source: str, namespace: dict[str, Any]) -> str:
    """Replace literal constructor calls with names bound, once, in ``namespace``."""
    constants: dict[str, str] = {}

    def constant(match: re.Match[str]) -> str:
        text = match.group(0)
        if text not in constants:
            name = f"__migdra_literal_{len(constants)}"
            namespace[name] = eval(text, namespace)
            constants[text] = name
        return constants[text]

    return _LITERAL.sub(constant, source)


class _Evaluator(evaluation.Evaluator):
    """celpy's Evaluator, but macro bodies return errors as values instead of raising past ``&&``."""

    def sub_evaluator(self, ast: lark.Tree[Any]) -> _Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def build_macro_eval(self, child: lark.Tree[Any]) -> Any:
        return self.build_ss_macro_eval(child)


class InterpretedRunner:
    """celpy's tree-walking evaluator over the same lowered tree."""

    kind = RunnerKind.INTERPRETED

    def __init__(self, tree: evaluation.TranspilerTree) -> None:
        self.tree = tree

    def run(self, activation: BudgetActivation) -> Any:
        try:
            return _Evaluator(self.tree, activation=activation).evaluate()
        except CELEvalError as error:
            return error


Runner = CompiledRunner | InterpretedRunner


def build_runner(tree: evaluation.TranspilerTree, kind: RunnerKind) -> Runner:
    return CompiledRunner(tree) if kind is RunnerKind.COMPILED else InterpretedRunner(tree)


# -- results and errors -----------------------------------------------------------------------------


def as_bool(value: Any) -> bool | None:
    """The Python bool of a CEL bool result (celpy's BoolType or a plain bool), else None."""
    if isinstance(value, bool | celtypes.BoolType):
        return bool(value)
    return None


def type_name(value: Any) -> str:
    """CEL's name for a result's type, for the non-bool-result error."""
    return kind_of(value)


_SELECTION_ON = re.compile(r"celtypes\.(?P<type>\w+?)Type'>'? does not support field selection")
_KEY_IN_MESSAGE = re.compile(r"no such member in mapping: (?P<key>.+)$")


def translate_error(expression: str, error: CELEvalError) -> CELRuntimeError:
    """A celpy error value as Kubernetes words it (``no such key: numaNode``, ``no such overload``)."""
    message = str(error.args[0]) if error.args else "evaluation error"
    exc_class = error.args[1] if len(error.args) > 1 else None
    exc_args = error.args[2] if len(error.args) > 2 else None
    detail = str(exc_args[0]) if isinstance(exc_args, tuple) and exc_args else ""
    if isinstance(exc_class, type) and issubclass(exc_class, KeyError):
        key: Any = exc_args[0] if isinstance(exc_args, tuple) and exc_args else None
        if key is None:
            found = _KEY_IN_MESSAGE.search(message)
            key = found.group("key").strip("'\"") if found else "?"
        return CELRuntimeError(expression, f"no such key: {key}")
    if isinstance(exc_class, type) and issubclass(exc_class, TypeError):
        if detail.startswith(("found no matching overload", "type '")):
            return CELRuntimeError(expression, detail)
        selected = _SELECTION_ON.search(message)
        if selected:  # the InterpretedRunner's own wording for a field selection on a scalar
            return CELRuntimeError(
                expression, f"type '{selected.group('type').lower()}' does not support field selection"
            )
        return CELRuntimeError(expression, f"no such overload{': ' + detail if detail else ''}")
    if isinstance(exc_class, type) and issubclass(exc_class, ZeroDivisionError):
        return CELRuntimeError(expression, "modulus by zero" if detail == "modulus by zero" else "division by zero")
    if isinstance(exc_class, type) and issubclass(exc_class, (ValueError, IndexError, OverflowError)):
        if detail in {"", "overflow"} or issubclass(exc_class, OverflowError):
            return CELRuntimeError(expression, "return error for overflow")
        return CELRuntimeError(expression, detail)
    return CELRuntimeError(expression, message)


def celpy_version() -> str:
    """The installed cel-python version, for benchmark reports."""
    try:
        return importlib.metadata.version("cel-python")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
