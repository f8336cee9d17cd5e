"""The GPU fault watcher on its own thread over the real backend and the simulated NVML: an XID that
another process reports for a GPU instance becomes a fault at that instance's placement, kept in the
taint store, and the publish trigger fires; the watcher stops its thread and frees its event set."""

from __future__ import annotations

import threading
from pathlib import Path

from dra_driver.mig.catalog import Placement
from dra_driver.nvml import sim
from kubeletplugin.gpu_faults import GpuFaultWatcher
from kubeletplugin.taint_store import TaintStore
from tests.conftest import OpenSimulatedNode

PROFILE_2G_20GB = 14  # H100 80GB


def test_an_xid_of_a_gpu_instance_taints_its_placement_and_triggers_a_publish(
    simulated_node: OpenSimulatedNode, tmp_path: Path
) -> None:
    state = tmp_path / "nvml.json"
    with simulated_node("H100-SXM5-80GB:2", state=state) as nvml:
        gpus = nvml.list_gpus()
        gi = nvml.create_gpu_instance(gpus[1].uuid, PROFILE_2G_20GB, Placement(start=4, size=2))
        changed = threading.Event()
        watcher = GpuFaultWatcher(nvml, TaintStore(tmp_path), changed.set, round_interval=0.2)
        watcher.load()
        watcher.start((gpu.uuid, gpu.index) for gpu in gpus)
        try:
            sim.SimulatedHardware(state).inject_event(1, "xid", 13)  # an application error: ignored
            sim.SimulatedHardware(state).inject_event(1, "xid", 94, gpu_instance_id=gi.gpu_instance_id)
            assert changed.wait(10), "the watcher never triggered a publish"
        finally:
            watcher.stop()
        assert [(f.gpu_uuid, f.value, f.placement) for f in watcher.faults()] == [
            (gpus[1].uuid, "94", Placement(start=4, size=2))
        ]
        (kept,) = TaintStore(tmp_path).load().faults
        assert (kept.gpu_index, kept.gpu_instance_id, kept.compute_instance_id) == (1, gi.gpu_instance_id, None)
