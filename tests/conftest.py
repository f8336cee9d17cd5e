"""Shared fixtures: a simulated NVML node in a temporary state file, opened through the real backend."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import HealthCheck, settings

from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings

OpenSimulatedNode = Callable[..., AbstractContextManager[Nvml]]
Boot = Callable[..., Any]

# Hypothesis' per-example deadline and its too-slow health check are timings: on a loaded machine they
# fail properties that hold.  A property is judged by its assertions alone.
settings.register_profile("migdra", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("migdra")


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "state.json"


@pytest.fixture
def boot(state_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Boot]:
    """``boot(gpus, mig_enabled=True, **install_kwargs)``: install the simulator into a fresh state file,
    ``nvmlInit``, and return GPU 0's raw pynvml handle; always shut down and uninstall afterwards."""
    monkeypatch.delenv(sim.FAULTS_ENV, raising=False)
    installs = 0

    def _boot(gpus: list[str] | None = None, mig_enabled: bool = True, **kwargs: Any) -> Any:
        nonlocal installs
        sim.install(state_path, gpus=gpus or ["H100-SXM5-80GB"], mig_enabled=mig_enabled, **kwargs)
        installs += 1
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)

    yield _boot
    for _ in range(installs):
        with contextlib.suppress(pynvml.NVMLError):  # a test may have shut NVML down itself
            pynvml.nvmlShutdown()
        sim.uninstall()


@pytest.fixture
def simulated_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OpenSimulatedNode:
    """``with simulated_node("H100-SXM5-80GB:2", mig_enabled=True) as nvml: ...`` on a fresh state file."""
    monkeypatch.delenv("MIGDRA_SIM_FAULTS", raising=False)

    @contextmanager
    def open_node(gpus: str, *, mig_enabled: bool = True, state: Path | None = None) -> Iterator[Nvml]:
        settings = build_nvml_settings(
            nvml="simulated", sim_state=state or tmp_path / "nvml-sim.json", sim_gpus=gpus, sim_mig_enabled=mig_enabled
        )
        with open_nvml(settings) as nvml:
            yield nvml

    return open_node


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """A test must stop every thread it started (servers, loops, executors): leaks fail the test."""
    before = set(threading.enumerate())
    yield
    # A thread told to stop may still be returning: join it (bounded) rather than judge it mid-exit.
    deadline = time.monotonic() + 5.0
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaked = [t for t in started if t.is_alive()]
    assert not leaked, f"threads left running: {sorted(t.name for t in leaked)}"
