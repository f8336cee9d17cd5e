"""Kubernetes' DRA CEL environment in Python: device selectors evaluated with kube-scheduler's semantics.

    from dra_driver.tools.cel import compile_selector, CELCompileError, CELRuntimeError
    program = compile_selector("device.attributes['gpu.migdra.io'].profile == '1g.10gb'")
    program.matches(device, driver="gpu.migdra.io")   # bool, or CELRuntimeError

Built on celpy (cel-python); see ``docs/deviceclasses.md`` for what differs from cel-go.  Modules:
``syntax`` (parse, macros), ``checker`` (types, undeclared names, bool result), ``lowering`` (celpy
workarounds), ``functions`` (operators and the Kubernetes libraries), ``quantity``/``semver`` (pure
value types), ``device`` (the ``device`` variable), ``environment`` (celpy runners, budget hooks),
``budget`` (cost limit and wall-clock guard), ``program`` (compile cache, ``CompiledSelector``),
``cost`` (static worst-case cost, as kube-apiserver estimates it), ``explain`` and ``lint`` (tooling),
``documents`` (manifests and slices from files).

The names below load on first use, so ``dra_driver.quantity`` and ``dra_driver.tools.cel.semver`` stay
importable (by API validation, say) without celpy and its parser.  Nothing here imports the
Kubernetes client, NVML or gRPC.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dra_driver.tools.cel.budget import KUBERNETES_COST_LIMIT, Limits
    from dra_driver.tools.cel.device import ActivationCache, DeviceActivation, build_device_activation
    from dra_driver.tools.cel.environment import RunnerKind
    from dra_driver.tools.cel.errors import (
        CELCompileError,
        CELCostLimitError,
        CELError,
        CELRuntimeError,
        DeviceValueError,
    )
    from dra_driver.tools.cel.program import CompiledSelector, ProgramCache, compile_selector
    from dra_driver.tools.cel.semver import Semver, SemverError

_EXPORTS: dict[str, str] = {
    "KUBERNETES_COST_LIMIT": "budget",
    "Limits": "budget",
    "ActivationCache": "device",
    "DeviceActivation": "device",
    "build_device_activation": "device",
    "RunnerKind": "environment",
    "CELCompileError": "errors",
    "CELCostLimitError": "errors",
    "CELError": "errors",
    "CELRuntimeError": "errors",
    "DeviceValueError": "errors",
    "CompiledSelector": "program",
    "ProgramCache": "program",
    "compile_selector": "program",
    "Semver": "semver",
    "SemverError": "semver",
}

__all__ = [
    "KUBERNETES_COST_LIMIT",
    "ActivationCache",
    "CELCompileError",
    "CELCostLimitError",
    "CELError",
    "CELRuntimeError",
    "CompiledSelector",
    "DeviceActivation",
    "DeviceValueError",
    "Limits",
    "ProgramCache",
    "RunnerKind",
    "Semver",
    "SemverError",
    "build_device_activation",
    "compile_selector",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
