"""Opening NVML as the settings ask: without an NVIDIA driver, the error says how to go on without one.

The simulator's own refusals re-worded in flag words are covered by ``tests/integration/badinput``; this machine
may or may not have a GPU, so the missing library is staged here.
"""

from __future__ import annotations

import pytest

from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlLibraryUnavailable
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings

LIBRARY_NOT_FOUND = 12  # NVML_ERROR_LIBRARY_NOT_FOUND


def test_no_driver_points_at_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library(self: Nvml) -> None:
        raise NvmlLibraryUnavailable("nvmlInit", LIBRARY_NOT_FOUND, "NVML Shared Library Not Found")

    monkeypatch.setattr(Nvml, "init", no_library)
    for name in ("MIGDRA_NVML", "MIGDRA_SIM_STATE", "MIGDRA_SIM_GPUS", "MIGDRA_SIM_MIG_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NvmlLibraryUnavailable) as info, open_nvml(build_nvml_settings()):
        pass
    assert str(info.value) == (
        "nvmlInit: NVML Shared Library Not Found: no usable NVIDIA driver (libnvidia-ml.so.1) on this machine; "
        "to try migdra without a GPU use --sim-gpus H100-SXM5-80GB:8 (NVML error 12)"
    )
    assert info.value.code == LIBRARY_NOT_FOUND
