"""Fault injection and latency for the simulated NVML library, per C symbol.

This module owns the fault plan's schema (:class:`FaultPlan`, :class:`FaultRule`: pydantic, so a plan
travels to a subprocess as JSON in ``MIGDRA_SIM_FAULTS``) and :class:`FaultInjector`, which counts
calls per symbol in this process and says, per call, how long to wait and whether to fail or crash.
It never touches the state file or ctypes; the library applies its verdicts.

Example plan (the 2nd and 3rd ``nvmlDeviceCreateGpuInstance`` calls fail, every GI create waits
half a second, and the first CI destroy kills the process after it is persisted)::

    {"rules": [
        {"symbol": "nvmlDeviceCreateGpuInstance", "nth": 2, "count": 2, "error": "InsufficientResources"},
        {"symbol": "nvmlComputeInstanceDestroy", "action": "kill_after"}],
     "latency": {"nvmlDeviceCreateGpuInstance": 0.5}}
"""

from __future__ import annotations

import difflib
import json
import os
import signal
import threading
from collections.abc import Collection
from typing import Any, Literal

import pynvml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dra_driver.nvml.sim.errors import FaultPlanError, describe_validation_error

ANY_SYMBOL = "*"

# Injected latency is a sleep in every call of a symbol: a bound keeps a typo (1e9) from hanging a test.
MAX_LATENCY_S = 60.0


def nvml_error_code(value: int | str) -> int:
    """An NVML return code from ``23``, ``"23"``, ``"NVML_ERROR_INSUFFICIENT_RESOURCES"``,
    ``"InsufficientResources"`` or ``"NVMLError_InsufficientResources"``; only codes pynvml knows."""
    known: dict[int, type[Exception]] = pynvml.NVMLError._valClassMapping
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            value = int(text)
        elif text.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, text, None), int):
            value = int(getattr(pynvml, text))
        else:
            by_class = {cls.__name__.removeprefix("NVMLError_").lower(): code for code, cls in known.items()}
            code = by_class.get(text.removeprefix("NVMLError_").lower())
            if code is None:
                raise ValueError(f"unknown NVML error {text!r}; use e.g. 'InsufficientResources' or 23")
            value = code
    if value == pynvml.NVML_SUCCESS or value not in known:
        raise ValueError(f"{value} is not an NVML error code")
    return value


class FaultRule(BaseModel):
    """Fail (or crash) the ``nth`` … ``nth + count - 1`` calls of one NVML C symbol in this process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    symbol: str = Field(description="NVML C symbol, e.g. nvmlDeviceCreateGpuInstanceWithPlacement")
    nth: int = Field(default=1, ge=1, description="first affected call, 1-based, counted per process")
    count: int = Field(default=1, ge=1, description="consecutive calls affected")
    error: int | None = Field(default=None, description="NVML return code for action 'fail'")
    action: Literal["fail", "kill_before", "kill_after"] = Field(
        default="fail",
        description="fail: return `error` without doing anything; kill_before: SIGKILL this process before "
        "the call; kill_after: let the call succeed and persist, then SIGKILL this process",
    )

    @field_validator("error", mode="before")
    @classmethod
    def _parse_error(cls, value: object) -> int | None:
        if value is None:
            return None
        if isinstance(value, int | str) and not isinstance(value, bool):
            return nvml_error_code(value)
        raise ValueError(f"error must be an NVML error name or code, got {value!r}")

    @model_validator(mode="after")
    def _error_for_fail(self) -> FaultRule:
        if self.action == "fail" and self.error is None:
            raise ValueError(f"fault rule for {self.symbol}: action 'fail' needs an error")
        return self

    def applies_to(self, call_number: int) -> bool:
        return self.nth <= call_number < self.nth + self.count


class FaultPlan(BaseModel):
    """All injected faults and latencies of one simulated library."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: tuple[FaultRule, ...] = ()
    latency: dict[str, float] = Field(
        default_factory=dict, description=f"seconds added to each call of a symbol; {ANY_SYMBOL!r} = every symbol"
    )

    @field_validator("latency")
    @classmethod
    def _bounded(cls, value: dict[str, float]) -> dict[str, float]:
        negative = [symbol for symbol, seconds in value.items() if seconds < 0]
        if negative:
            raise ValueError(f"negative latency for {negative}")
        endless = [symbol for symbol, seconds in value.items() if not seconds <= MAX_LATENCY_S]
        if endless:
            raise ValueError(f"more than {MAX_LATENCY_S:g} s per call for {endless}; no NVML call takes that long")
        return value


def parse_fault_plan(text: str, source: str) -> FaultPlan:
    """A plan from its JSON text; ``source`` (e.g. ``MIGDRA_SIM_FAULTS``) leads every error message."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise FaultPlanError(
            f"{source} is not JSON (line {e.lineno}, column {e.colno}: {e.msg}); expected a fault plan such as "
            '{"rules": [{"symbol": "nvmlDeviceCreateGpuInstance", "error": "InsufficientResources"}]}'
        ) from e
    return validate_fault_plan(raw, source)


def validate_fault_plan(raw: Any, source: str) -> FaultPlan:
    try:
        return FaultPlan.model_validate(raw)
    except ValidationError as e:
        keys = ""
        if any(error["type"] == "extra_forbidden" for error in e.errors()):
            keys = f" (a plan has {', '.join(FaultPlan.model_fields)}; a rule has {', '.join(FaultRule.model_fields)})"
        raise FaultPlanError(f"{source}: {describe_validation_error(e)}{keys}") from e


def check_symbols(plan: FaultPlan, implemented: Collection[str], source: str) -> None:
    """Refuse a plan naming a symbol the simulated library does not implement: such a rule would
    never fire, and the test relying on it would pass without testing anything."""
    named = [(f"rules.{position}.symbol", rule.symbol) for position, rule in enumerate(plan.rules)]
    named += [("latency", symbol) for symbol in plan.latency if symbol != ANY_SYMBOL]
    for where, symbol in named:
        if symbol in implemented:
            continue
        close = difflib.get_close_matches(symbol, sorted(implemented), n=1, cutoff=0.75)
        hint = (
            f"did you mean {close[0]}?"
            if close
            else "the simulator's symbols are the nvml* methods of dra_driver/nvml/sim/library.py"
        )
        raise FaultPlanError(f"{source}: {where}: {symbol!r} is not an NVML symbol the simulator implements; {hint}")


class FaultInjector:
    """Applies a :class:`FaultPlan` in one process: per-symbol call counters, thread-safe."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def on_call(self, symbol: str) -> FaultRule | None:
        """Count a call of ``symbol``; the first rule that hits this call, if any."""
        with self._lock:
            number = self._calls.get(symbol, 0) + 1
            self._calls[symbol] = number
        return next((r for r in self.plan.rules if r.symbol == symbol and r.applies_to(number)), None)

    def latency(self, symbol: str) -> float:
        return self.plan.latency.get(symbol, self.plan.latency.get(ANY_SYMBOL, 0.0))

    def calls(self, symbol: str) -> int:
        """How many times ``symbol`` was called in this process (tests and diagnostics)."""
        with self._lock:
            return self._calls.get(symbol, 0)


def kill_this_process() -> None:
    """Die the way ``kill -9`` kills: no cleanup, no exception handlers, no atexit."""
    os.kill(os.getpid(), signal.SIGKILL)
