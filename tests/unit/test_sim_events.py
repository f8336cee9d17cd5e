"""The simulator's NVML event sets, through the real pynvml wrappers: events injected by an operator
(another store object, as `migdra sim xid` in another process) reach every set registered for them,
once, and never events from before the set existed."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from dra_driver.nvml import sim
from dra_driver.nvml.sim.state import MAX_KEPT_EVENTS
from tests.conftest import Boot

XID = pynvml.nvmlEventTypeXidCriticalError


def test_an_injected_xid_is_returned_once_with_its_attribution(boot: Boot, state_path: Path) -> None:
    boot(["H100-SXM5-80GB", "H100-SXM5-80GB"])
    gpu0, gpu1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(gpu1) & XID
    operator = sim.SimulatedHardware(state_path)
    operator.inject_event(1, "xid", 48)  # before the set exists: NVML does not replay it
    event_set = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(gpu1, XID, event_set)
    operator.inject_event(0, "xid", 79)  # GPU 0 is not registered: never returned
    operator.inject_event(1, "xid", 94, gpu_instance_id=3, compute_instance_id=0)
    data = pynvml.nvmlEventSetWait_v2(event_set, 1000)
    assert (data.eventType, data.eventData, data.gpuInstanceId, data.computeInstanceId) == (XID, 94, 3, 0)
    assert pynvml.nvmlDeviceGetIndex(data.device) == 1
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 30)
    pynvml.nvmlDeviceRegisterEvents(gpu0, XID, event_set)
    with pytest.raises(pynvml.NVMLError_Timeout):  # the GPU 0 XID came before GPU 0 was registered
        pynvml.nvmlEventSetWait_v2(event_set, 30)
    pynvml.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait_v2(event_set, 0)


def test_an_unattributed_event_says_0xffffffff_and_unsupported_types_are_refused(boot: Boot, state_path: Path) -> None:
    gpu0 = boot()
    event_set = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(gpu0, pynvml.nvmlEventTypePState, event_set)
    pynvml.nvmlDeviceRegisterEvents(gpu0, XID | pynvml.nvmlEventTypeDoubleBitEccError, event_set)
    sim.SimulatedHardware(state_path).inject_event(0, "double-bit-ecc")
    data = pynvml.nvmlEventSetWait_v2(event_set, 1000)
    assert data.eventType == pynvml.nvmlEventTypeDoubleBitEccError
    assert (data.gpuInstanceId, data.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)
    pynvml.nvmlEventSetFree(event_set)


def test_the_state_file_keeps_the_latest_events_and_stays_loadable(boot: Boot, state_path: Path) -> None:
    boot()
    operator = sim.SimulatedHardware(state_path)
    gpu_uuid = operator.snapshot().gpus[0].uuid  # a GPU named by UUID, as an operator may
    for number in range(MAX_KEPT_EVENTS + 3):
        operator.inject_event(gpu_uuid, "xid", number)
    state = operator.snapshot()
    assert len(state.events) == MAX_KEPT_EVENTS
    assert state.event_serial == MAX_KEPT_EVENTS + 3
    assert state.events[0].event_data == 3
    with pytest.raises(IndexError):
        operator.inject_event(5, "xid", 79)
