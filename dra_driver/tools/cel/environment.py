"""The celpy side of the DRA environment: runners, activations, the budget hooks, error translation.

Owns everything that depends on celpy's internals, in one place:

- :class:`CompiledRunner`: celpy's Transpiler turns the lowered expression into Python source once;
  we compile that source into a *private* namespace and keep its entry function.  celpy's own
  ``CompiledRunner.evaluate`` re-``exec``s the code into celpy's module globals on every call, which
  is slower and not thread-safe; ours is neither.
- :class:`InterpretedRunner`: celpy's tree-walking Evaluator, with macros that return errors as values
  (celpy's raise past ``&&``/``||``, which would stop ``false && cel.bind(...)`` from absorbing them).
- Short-circuit evaluation on both runners: celpy evaluates both operands of ``&&``/``||`` (and, in
  the CompiledRunner, all three of ``?:``) before calling the operator.  Both runners here hand
  ``&&``/``||`` (``functions/operators.py``) the right operand as a thunk and evaluate only the branch
  of ``?:`` that ``choose`` picks, so ``false && <anything>`` never evaluates, charges or raises from its
  right side, as in cel-go.
- :class:`BudgetActivation`: celpy creates one nested activation per comprehension step in both
  runners; charging the budget there bounds every loop.
- :func:`translate_error`: celpy's error values and labels -> Kubernetes' wording.

Must never: let celpy's process-wide state (its parser singleton, its module globals) change, or
import anything above it (``program.py`` drives it).
"""

from __future__ import annotations

import enum
import functools
import importlib.metadata
import re
import sys
from collections.abc import Callable
from string import Template
from typing import Any, cast

import lark
from celpy import celtypes, evaluation
from celpy.evaluation import CELEvalError

import dra_driver
from dra_driver.tools.cel import budget
from dra_driver.tools.cel.device import DeviceActivation
from dra_driver.tools.cel.errors import CELRuntimeError
from dra_driver.tools.cel.functions import FUNCTIONS, kind_of
from dra_driver.tools.cel.functions.operators import choose

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


# celpy's templates for ``?:``, ``||`` and ``&&`` evaluate every operand before calling the operator.
# Ours pass ``&&``/``||`` the right operand as a thunk and let ``?:`` pick the branch to evaluate:
#   ex_7_0 = lambda activation: <left>
#   ex_7_1 = lambda activation: <right>
#   ex_7 = lambda activation: <and>(result(activation, ex_7_0), lambda: result(activation, ex_7_1))
#   ex_9 = lambda activation: result(activation, <branch>(result(activation, ex_9_0), ex_9_1, ex_9_2))
# The branch is evaluated from ``ex_9`` itself (not inside a function) so that ``a ? x : b ? y : ...``
# nests no deeper in Python than celpy's own code for it; ``&&``/``||`` only nest to the right through
# parentheses, which the parser's depth limit keeps shallow.
_RESULT = "celpy.evaluation.result(activation, ex_${n}_%d)"
_BRANCH = "__migdra_branch"


def _operands(count: int) -> list[str]:
    return [f"ex_${{n}}_{i} = lambda activation: ${{operand_{i}}}" for i in range(count)]


_LAZY_TEMPLATES = {
    "_?_:_": Template(
        "\n".join(
            [
                "# expr:",
                *_operands(3),
                f"ex_${{n}} = lambda activation: celpy.evaluation.result(activation, "
                f"{_BRANCH}({_RESULT % 0}, ex_${{n}}_1, ex_${{n}}_2))",
            ]
        )
    ),
    "_||_": Template(
        "\n".join(
            [
                "# conditionalor:",
                *_operands(2),
                f"ex_${{n}} = lambda activation: ${{func_name}}({_RESULT % 0}, lambda: {_RESULT % 1})",
            ]
        )
    ),
}
_LAZY_TEMPLATES["_&&_"] = Template(_LAZY_TEMPLATES["_||_"].template.replace("# conditionalor:", "# conditionaland:"))


def _branch(condition: Any, when_true: Callable[[Any], Any], when_false: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The branch of ``?:`` to evaluate, as the generated code calls it (an error: a constant branch)."""
    chosen = choose(condition, when_true, when_false)
    if isinstance(chosen, CELEvalError):
        return functools.partial(_constant, chosen)
    return chosen


def _constant(value: Any, _activation: Any) -> Any:
    return value


class _Phase1Transpiler(evaluation.Phase1Transpiler):
    """celpy's first transpiler pass with short-circuiting ``?:``, ``||`` and ``&&``."""

    def _lazy(self, tree: evaluation.TranspilerTree, function: str) -> None:
        children = cast(list[evaluation.TranspilerTree], tree.children)
        if len(children) == 1:
            tree.transpiled = children[0].transpiled
            return
        bindings: dict[str, Callable[[evaluation.TranspilerTree], str]] = {
            f"operand_{index}": functools.partial(_transpiled_child, index=index) for index in range(len(children))
        }
        bindings["n"] = lambda node: str(node.expr_number)
        bindings["func_name"] = lambda node: self.func_name(function)
        tree.checked_exception = (_LAZY_TEMPLATES[function], bindings)
        tree.transpiled = f"ex_{tree.expr_number}(activation)"

    def expr(self, tree: evaluation.TranspilerTree) -> None:
        self._lazy(tree, "_?_:_")

    def conditionalor(self, tree: evaluation.TranspilerTree) -> None:
        self._lazy(tree, "_||_")

    def conditionaland(self, tree: evaluation.TranspilerTree) -> None:
        self._lazy(tree, "_&&_")


def _transpiled_child(tree: evaluation.TranspilerTree, *, index: int) -> str:
    return cast(evaluation.TranspilerTree, tree.children[index]).transpiled


def _transpile(tree: evaluation.TranspilerTree) -> str:
    """celpy's two transpiler passes, with our first pass; the Python source (not yet compiled)."""
    facade = evaluation.Transpiler(ast=tree, activation=BudgetActivation(functions=FUNCTIONS))
    _Phase1Transpiler(facade).visit(tree)
    phase_2 = evaluation.Phase2Transpiler(facade)
    phase_2.visit(tree)
    return "\n".join(phase_2.statements(tree))


class CompiledRunner:
    """celpy's transpiler, compiled once into a private namespace (thread-safe, no exec per call)."""

    kind = RunnerKind.COMPILED

    def __init__(self, tree: evaluation.TranspilerTree) -> None:
        source_text = _transpile(tree)
        lines = source_text.rstrip("\n").split("\n")
        last = _LAST_LINE.match(lines[-1])
        if last is None:  # pragma: no cover -- guards against a celpy upgrade changing its output
            raise RuntimeError(f"unexpected celpy transpiler output: {lines[-1]!r}")
        lines[-1] = f"{_ENTRY} = {last.group('entry')}"
        namespace = _transpiled_namespace()
        namespace[_BRANCH] = _branch
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

    # celpy visits both operands of ``&&``/``||`` before calling the operator; ours pass the right one
    # as a thunk, and ``?:`` visits only the branch ``choose`` picks, so only what decides the result
    # is evaluated.

    def _lazy(self, tree: lark.Tree[Any], function: str) -> Any:
        left, right = cast(list[lark.Tree[Any]], tree.children)
        try:
            return self.activation.resolve_function(function)(self.visit(left), functools.partial(self.visit, right))
        except TypeError as exc:
            return _overload_error(exc, tree)

    def expr(self, tree: lark.Tree[Any]) -> Any:
        if len(tree.children) == 1:
            return self.visit(tree.children[0])
        condition, when_true, when_false = cast(list[lark.Tree[Any]], tree.children)
        try:
            chosen = choose(self.visit(condition), when_true, when_false)
        except TypeError as exc:
            return _overload_error(exc, tree)
        return chosen if isinstance(chosen, CELEvalError) else self.visit(chosen)

    def conditionalor(self, tree: lark.Tree[Any]) -> Any:
        return self.visit(tree.children[0]) if len(tree.children) == 1 else self._lazy(tree, "_||_")

    def conditionaland(self, tree: lark.Tree[Any]) -> Any:
        return self.visit(tree.children[0]) if len(tree.children) == 1 else self._lazy(tree, "_&&_")


def _overload_error(exc: TypeError, tree: lark.Tree[Any]) -> CELEvalError:
    error = CELEvalError("no such overload", type(exc), exc.args, tree=tree)
    error.__cause__ = exc
    return error


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
