"""Open the NVML library the settings ask for, and close it again.

The only place that decides between the real ``libnvidia-ml`` and the simulator: both are used
through the same :class:`~dra_driver.nvml.backend.Nvml` class, because the simulator replaces the
library *beneath* ``pynvml`` rather than the backend.  It also speaks for the settings: the simulator's
own errors name its Python arguments (``gpus``), and here they are re-worded to name the flags and
variables a user set (``--sim-gpus``, ``MIGDRA_SIM_GPUS``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from dra_driver.errors import ConfigurationError
from dra_driver.nvml.backend import CallObserver, Nvml
from dra_driver.nvml.errors import NvmlLibraryUnavailable
from dra_driver.nvml.settings import NvmlSettings

# What to try on a machine without the NVIDIA driver (a developer's laptop, a CI runner).
SIMULATOR_HINT = "to try migdra without a GPU use --sim-gpus H100-SXM5-80GB:8"


@contextmanager
def open_nvml(settings: NvmlSettings, observe_call: CallObserver | None = None) -> Iterator[Nvml]:
    """An initialised :class:`Nvml`; with ``nvml=simulated`` the simulator is installed around it.

    ``observe_call`` is told of every NVML call (the plugin's latency metric).
    """
    if settings.nvml == "real":
        with _real_nvml(observe_call) as nvml:
            yield nvml
        return
    from dra_driver.nvml import sim  # noqa: PLC0415 -- the simulator is loaded only when asked for

    with ExitStack() as stack:
        state = settings.sim_state
        if state is None:  # a throw-away node for this process only (e.g. `migdra slices --sim-gpus ...`)
            state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="migdra-sim-"))) / "state.json"
        profile = settings.sim_latency_profile
        try:
            sim.install(
                state,
                gpus=list(settings.sim_gpus) or None,
                mig_enabled=settings.sim_mig_enabled,
                faults=settings.sim_faults,
                latency_profile=sim.recorded_latency(profile) if profile is not None else None,
            )
        except sim.LatencyProfileError as exc:
            raise ConfigurationError(f"MIGDRA_SIM_LATENCY_PROFILE: {exc}") from exc
        except sim.StateFileMissingError as exc:
            raise ConfigurationError(
                f"--sim-state (MIGDRA_SIM_STATE) {exc.path} does not exist; add --sim-gpus MODEL:N "
                "(MIGDRA_SIM_GPUS) to create it, e.g. --sim-gpus H100-SXM5-80GB:8"
            ) from exc
        except sim.StateMismatchError as exc:
            raise ConfigurationError(
                f"--sim-gpus (MIGDRA_SIM_GPUS) asks for {exc.wanted} but {exc.path} holds {exc.present}; "
                "leave out --sim-gpus to use that state file as it is, or name another --sim-state (MIGDRA_SIM_STATE)"
            ) from exc
        except sim.StateFileError as exc:
            raise ConfigurationError(f"--sim-state (MIGDRA_SIM_STATE): {exc}") from exc
        stack.callback(sim.uninstall)
        with Nvml(observe_call) as nvml:
            yield nvml


@contextmanager
def _real_nvml(observe_call: CallObserver | None) -> Iterator[Nvml]:
    nvml = Nvml(observe_call)
    try:
        nvml.init()
    except NvmlLibraryUnavailable as exc:
        raise NvmlLibraryUnavailable(
            exc.operation,
            exc.code,
            f"{exc.nvml_message}: no usable NVIDIA driver (libnvidia-ml.so.1) on this machine; {SIMULATOR_HINT}",
            exc.gpu,
        ) from exc
    try:
        yield nvml
    finally:
        nvml.shutdown()
