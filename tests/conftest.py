"""Shared fixtures: a simulated NVML node in a temporary state file, opened through the real backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.session import open_nvml
from dra_driver.settings import build_nvml_settings

OpenSimulatedNode = Callable[..., AbstractContextManager[Nvml]]


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
