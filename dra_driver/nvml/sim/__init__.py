"""The simulated NVML: a fake ``libnvidia-ml`` installed beneath the real ``pynvml``.

``install()`` points ``pynvml.nvmlLib`` at a :class:`SimulatedNvmlLibrary` over one state file, so
every pynvml wrapper — and therefore the production NVML backend — runs unchanged against simulated
GPUs; ``uninstall()`` puts the previous library back.  The state file is the simulated machine: it
survives process restarts and SIGKILL, and several processes may share it (each call is one locked
transaction).  :class:`SimulatedHardware` (and ``reset_gpu`` / ``set_busy`` / ``snapshot``) act on that
machine from outside NVML, as an operator with nvidia-smi would.

Modules: ``state`` (persisted models, store, lock), ``hardware`` (MIG rules, pure), ``abi`` (ctypes
arguments and handles), ``library`` (the C symbols), ``faults`` (fault plans), ``latency`` (latency
profiles from recordings of real GPUs), ``admin`` (operator verbs), ``errors``.  This package is one
of the two places allowed to import ``pynvml``; nothing here may be imported by production code paths
except through ``dra_driver.nvml.session`` (and its settings, which check a latency profile when
``MIGDRA_SIM_LATENCY_PROFILE`` asks for one).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pynvml

from dra_driver.mig.catalog import GpuModel, load_catalog
from dra_driver.nvml.sim import hardware
from dra_driver.nvml.sim.admin import SimulatedHardware, reset_gpu, set_busy, snapshot
from dra_driver.nvml.sim.errors import (
    FaultPlanError,
    HardwareRefusedError,
    LatencyProfileError,
    SimulatorError,
    StateFileError,
    StateFileMissingError,
    StateLockTimeout,
    StateMismatchError,
)
from dra_driver.nvml.sim.faults import (
    ANY_SYMBOL,
    FaultInjector,
    FaultPlan,
    FaultRule,
    check_symbols,
    parse_fault_plan,
    validate_fault_plan,
)
from dra_driver.nvml.sim.latency import recorded_latency
from dra_driver.nvml.sim.library import SimulatedNvmlLibrary
from dra_driver.nvml.sim.state import SimState, StateStore

__all__ = [
    "DEFAULT_CUDA_DRIVER_VERSION",
    "DEFAULT_DRIVER_VERSION",
    "FAULTS_ENV",
    "FaultPlan",
    "FaultPlanError",
    "FaultRule",
    "HardwareRefusedError",
    "LatencyProfileError",
    "SimState",
    "SimulatedHardware",
    "SimulatedNvmlLibrary",
    "SimulatorError",
    "StateFileError",
    "StateFileMissingError",
    "StateLockTimeout",
    "StateMismatchError",
    "install",
    "recorded_latency",
    "reset_gpu",
    "set_busy",
    "snapshot",
    "uninstall",
]

FAULTS_ENV = "MIGDRA_SIM_FAULTS"
"""The setting that carries a JSON :class:`FaultPlan` (``NvmlSettings.sim_faults``); ``install`` names it
in the errors of a plan given as JSON text.  The simulator itself never reads the environment."""

DEFAULT_DRIVER_VERSION = "580.65.06"
DEFAULT_CUDA_DRIVER_VERSION = 13000

# Each install pushes (the nvmlLib it replaced, the simulator it installed); uninstall pops one.
_installed: list[tuple[Any, SimulatedNvmlLibrary]] = []
_installed_lock = threading.Lock()


def install(
    state_path: str | os.PathLike[str],
    gpus: Sequence[str] | None = None,
    mig_enabled: bool = False,
    *,
    faults: FaultPlan | Mapping[str, Any] | str | None = None,
    latency: Mapping[str, float] | None = None,
    latency_profile: Mapping[str, float] | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_driver_version: int = DEFAULT_CUDA_DRIVER_VERSION,
) -> SimulatedNvmlLibrary:
    """Make ``pynvml`` talk to the simulated machine stored at ``state_path``.

    If the file does not exist it is created with ``gpus`` (catalog keys or aliases) at NVML indices
    0, 1, …, MIG mode current and pending both ``mig_enabled``, and the given driver versions (the
    file's directory is created too).  If it exists it is loaded as it is: ``mig_enabled`` and the
    versions are ignored, and ``gpus``, when given, must name the same models in the same order (else
    :class:`StateMismatchError`).  Without ``gpus`` a missing file is :class:`StateFileMissingError`.

    ``faults`` (a plan, its mapping, or its JSON text as ``MIGDRA_SIM_FAULTS`` carries it, which errors
    then name; default: none) and ``latency`` (seconds per C
    symbol, ``"*"`` for all; added to the plan's) apply to this process only; a plan naming a symbol
    the simulator does not implement is :class:`FaultPlanError`.  ``latency_profile`` (seconds per
    symbol, e.g. :func:`recorded_latency` of a real GPU) lies beneath both: a symbol they name keeps
    their latency, and with a ``"*"`` among them the profile is not used at all (explicit wins).

    Everything is validated before the state file is touched; a refused state file is left as it is.
    """
    path = Path(state_path)
    models = _models(gpus) if gpus is not None else None
    plan, source = _fault_plan(faults, latency, latency_profile)
    store = StateStore(path)
    library = SimulatedNvmlLibrary(store, FaultInjector(plan))
    check_symbols(plan, {name for name in vars(library) if name.startswith("nvml")}, source)

    def build() -> SimState:
        assert models is not None
        return hardware.new_machine(str(path.resolve()), models, mig_enabled, driver_version, cuda_driver_version)

    state, created = store.initialise(build if models is not None else None)
    if not created and models is not None:
        wanted = [m.key for m in models]
        present = [g.model for g in state.gpus]
        if wanted != present:
            raise StateMismatchError(path, present, wanted)
    with _installed_lock, pynvml.libLoadLock:
        _installed.append((pynvml.nvmlLib, library))
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return library


def uninstall() -> None:
    """Undo the latest :func:`install`: restore the previous ``pynvml.nvmlLib``.  No-op if none."""
    with _installed_lock, pynvml.libLoadLock:
        if not _installed:
            return
        previous, _ = _installed.pop()
        pynvml.nvmlLib = previous
        # pynvml caches resolved symbols; stale entries would keep calling the simulator.
        pynvml._nvmlGetFunctionPointer_cache.clear()


def _models(names: Sequence[str]) -> list[GpuModel]:
    if isinstance(names, str):
        raise TypeError("gpus must be a sequence of model names, not one string")
    if not names:
        raise ValueError("gpus must name at least one GPU model")
    catalog = load_catalog()
    try:
        return [catalog.model(name) for name in names]
    except KeyError as e:
        raise ValueError(e.args[0]) from e


def _fault_plan(
    faults: FaultPlan | Mapping[str, Any] | str | None,
    latency: Mapping[str, float] | None,
    latency_profile: Mapping[str, float] | None,
) -> tuple[FaultPlan, str]:
    """The plan for this process and where it came from (for error messages)."""
    if faults is None or faults == "":
        plan, source = FaultPlan(), "fault plan"
    elif isinstance(faults, str):
        plan, source = parse_fault_plan(faults, FAULTS_ENV), FAULTS_ENV
    elif isinstance(faults, FaultPlan):
        plan, source = faults, "fault plan"
    else:
        plan, source = validate_fault_plan(dict(faults), "fault plan"), "fault plan"
    explicit = {**plan.latency, **(latency or {})}
    merged = explicit if ANY_SYMBOL in explicit else {**(latency_profile or {}), **explicit}
    if merged != plan.latency:
        plan = validate_fault_plan({"rules": plan.rules, "latency": merged}, "latency")
    return plan, source
