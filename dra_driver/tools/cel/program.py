"""Compile once, evaluate many: :func:`compile_selector` and :class:`CompiledSelector`.

Owns: the compile pipeline (parse -> check -> lower -> celpy runner), the cache of compiled programs
keyed by expression text, the cache of device activations, and the evaluation contract: a selector
returns a bool for a device or raises; it never turns an error into "no match" (Kubernetes aborts the
scheduling attempt on any CEL runtime error, and so must every caller).

Must never: read files or the cluster, print, or swallow a runtime error.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from celpy.evaluation import CELEvalError

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.tools.cel import budget, checker, lowering, syntax
from dra_driver.tools.cel.budget import BudgetExhausted, Limits
from dra_driver.tools.cel.checker import CelType
from dra_driver.tools.cel.device import ActivationCache, DeviceActivation
from dra_driver.tools.cel.environment import (
    BudgetActivation,
    Runner,
    RunnerKind,
    as_bool,
    build_runner,
    device_activation,
    translate_error,
    type_name,
)
from dra_driver.tools.cel.errors import CELCompileError, CELCostLimitError, CELRuntimeError, DeviceValueError

DEFAULT_PROGRAM_CACHE_SIZE = 4096

Device = Mapping[str, Any] | DeviceActivation


class CompiledSelector:
    """One checked, compiled selector expression.  Thread-safe; reuse it for every device."""

    def __init__(self, expression: str, *, runner: RunnerKind = RunnerKind.COMPILED, limits: Limits | None = None):
        self.expression = expression
        self.tree = syntax.parse(expression)
        self.result_type: CelType = checker.ensure_valid(expression, self.tree)
        self.lowered = lowering.lower(self.tree, select_as_function=runner is RunnerKind.COMPILED)
        try:
            self._runner: Runner = build_runner(syntax.parse_tree(self.lowered), runner)
        except CELCompileError as exc:
            raise CELCompileError(expression, exc.message) from exc
        except RecursionError as exc:
            raise CELCompileError(expression, "expression nesting is too deep to compile") from exc
        self.runner = runner
        self.limits = limits or Limits()

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r}, runner={self.runner.value})"

    def matches(
        self,
        device: Device,
        *,
        driver: str | None = None,
        limits: Limits | None = None,
        activations: ActivationCache | None = None,
    ) -> bool:
        """Whether the selector accepts ``device`` (a ResourceSlice v1 device dict, or an activation).

        ``driver`` is the slice's ``spec.driver`` (default ``gpu.migdra.io``); bare attribute names
        belong to its domain.  Raises :class:`CELRuntimeError` on any runtime error.
        """
        activation = self._activation(device, driver, activations)
        value = self._run(device_activation(activation), limits)
        result = as_bool(value)
        if result is None:
            raise CELRuntimeError(
                self.expression, f"CEL result of type {type_name(value)} could not be converted to bool"
            )
        return result

    def _activation(self, device: Device, driver: str | None, activations: ActivationCache | None) -> DeviceActivation:
        if isinstance(device, DeviceActivation):
            if driver is not None and driver != device.driver:
                raise ValueError(f"activation was built for driver {device.driver!r}, not {driver!r}")
            return device
        try:
            return (activations if activations is not None else DEFAULT_ACTIVATIONS).get(
                device, driver or DEFAULT_DRIVER_NAME
            )
        except DeviceValueError as exc:
            raise DeviceValueError(self.expression, exc.message) from exc

    def _run(self, activation: BudgetActivation, limits: Limits | None) -> Any:
        previous = budget.set_current(budget.Budget(limits or self.limits))
        try:
            value = self._runner.run(activation)
        except BudgetExhausted as exc:
            raise CELCostLimitError(self.expression, exc.message) from None
        except RecursionError:
            raise CELRuntimeError(self.expression, "max recursion depth exceeded") from None
        except CELEvalError as exc:
            raise translate_error(self.expression, exc) from None
        except Exception as exc:  # celpy internals (e.g. field selection on a scalar) -> a CEL error
            raise CELRuntimeError(self.expression, f"evaluation error: {type(exc).__name__}: {exc}") from exc
        finally:
            budget.set_current(previous)
        if isinstance(value, CELEvalError):
            raise translate_error(self.expression, value)
        return value


class ProgramCache:
    """Expression text -> :class:`CompiledSelector`, least recently used out (like cel-go's cache)."""

    def __init__(self, maxsize: int = DEFAULT_PROGRAM_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._programs: OrderedDict[tuple[str, RunnerKind], CompiledSelector] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, expression: str, runner: RunnerKind) -> CompiledSelector:
        key = (expression, runner)
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self._programs.move_to_end(key)
                return program
        program = CompiledSelector(expression, runner=runner)  # compile errors are not cached
        with self._lock:
            self._programs[key] = program
            while len(self._programs) > self.maxsize:
                self._programs.popitem(last=False)
        return program

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()

    def __len__(self) -> int:
        return len(self._programs)


DEFAULT_PROGRAMS = ProgramCache()
DEFAULT_ACTIVATIONS = ActivationCache()


def compile_selector(
    expression: str, *, runner: RunnerKind | str = RunnerKind.COMPILED, cache: ProgramCache | None = None
) -> CompiledSelector:
    """Compile ``expression`` in the DRA environment (cached); :class:`CELCompileError` if invalid."""
    return (cache if cache is not None else DEFAULT_PROGRAMS).get(expression, RunnerKind(runner))
