"""Open the NVML library the settings ask for, and close it again.

The only place that decides between the real ``libnvidia-ml`` and the simulator: both are used
through the same :class:`~dra_driver.nvml.backend.Nvml` class, because the simulator replaces the
library *beneath* ``pynvml`` rather than the backend.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from dra_driver.nvml.backend import Nvml
from dra_driver.settings import NvmlSettings


@contextmanager
def open_nvml(settings: NvmlSettings) -> Iterator[Nvml]:
    """An initialised :class:`Nvml`; with ``nvml=simulated`` the simulator is installed around it."""
    if settings.nvml == "real":
        with Nvml() as nvml:
            yield nvml
        return
    from dra_driver.nvml import sim  # noqa: PLC0415 -- the simulator is loaded only when asked for

    with ExitStack() as stack:
        state = settings.sim_state
        if state is None:  # a throw-away node for this process only (e.g. `migdra slices --sim-gpus ...`)
            state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="migdra-sim-"))) / "state.json"
        sim.install(state, gpus=list(settings.sim_gpus) or None, mig_enabled=settings.sim_mig_enabled)
        stack.callback(sim.uninstall)
        with Nvml() as nvml:
            yield nvml
