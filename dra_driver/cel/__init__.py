"""Kubernetes' DRA CEL environment in Python: device selectors evaluated with kube-scheduler's semantics.

    from dra_driver.cel import compile_selector, CELCompileError, CELRuntimeError
    program = compile_selector("device.attributes['gpu.migdra.io'].profile == '1g.10gb'")
    program.matches(device, driver="gpu.migdra.io")   # bool, or CELRuntimeError

Built on celpy (cel-python); see ``docs/deviceclasses.md`` for what differs from cel-go.  Modules:
``syntax`` (parse, macros), ``checker`` (types, undeclared names, bool result), ``lowering`` (celpy
workarounds), ``functions`` (operators and the Kubernetes libraries), ``quantity``/``semver`` (pure
value types), ``device`` (the ``device`` variable), ``environment`` (celpy runners, budget hooks),
``budget`` (cost limit and wall-clock guard), ``program`` (compile cache, ``CompiledSelector``),
``explain`` and ``lint`` (tooling).

Nothing here imports the Kubernetes client, NVML or gRPC.
"""

from dra_driver.cel.budget import KUBERNETES_COST_LIMIT, Limits
from dra_driver.cel.device import ActivationCache, DeviceActivation, build_device_activation
from dra_driver.cel.environment import RunnerKind
from dra_driver.cel.errors import (
    CELCompileError,
    CELCostLimitError,
    CELError,
    CELRuntimeError,
    DeviceValueError,
)
from dra_driver.cel.program import CompiledSelector, ProgramCache, compile_selector
from dra_driver.cel.quantity import Quantity, QuantityError
from dra_driver.cel.semver import Semver, SemverError

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
    "Quantity",
    "QuantityError",
    "RunnerKind",
    "Semver",
    "SemverError",
    "build_device_activation",
    "compile_selector",
]
