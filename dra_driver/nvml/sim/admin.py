"""Acting on the simulated machine from outside NVML, as an operator with nvidia-smi would.

This module owns the operator's verbs: reset a GPU (``nvidia-smi -r``, which applies a pending MIG
mode), start or stop a process that holds a GPU or MIG device, and read the machine's state.  Each
verb is one store transaction over the rules in ``hardware.py``.  It never installs the simulator
and never goes through ``pynvml``: tests use it to arrange what no NVML call can do.
"""

from __future__ import annotations

import os
from pathlib import Path

from dra_driver.nvml.sim import hardware
from dra_driver.nvml.sim.library import EVENT_KINDS
from dra_driver.nvml.sim.state import MAX_KEPT_EVENTS, SimEvent, SimGpu, SimState, StateStore

NOT_ATTRIBUTED = 0xFFFFFFFF


class SimulatedHardware:
    """The operator's view of one simulated machine (one state file)."""

    def __init__(self, state_path: str | os.PathLike[str]) -> None:
        self._store = StateStore(Path(state_path))

    def reset_gpu(self, index: int) -> None:
        """``nvidia-smi -r -i <index>``: apply the pending MIG mode.

        Raises :class:`~dra_driver.nvml.sim.errors.HardwareRefusedError` while the GPU has GPU
        instances or a process holds it.
        """
        with self._store.transaction() as change:
            hardware.reset_gpu(change.gpu(_gpu(change.state, index).index))

    def set_busy(self, device_uuid: str, busy: bool) -> None:
        """A process starts (``busy=True``) or stops holding a GPU (``GPU-…``) or MIG device (``MIG-…``).

        While held: destroying that compute instance, or any instance on a held GPU, answers IN_USE,
        and SetMigMode reports IN_USE in its activationStatus.
        """
        with self._store.transaction() as change:
            gpu = hardware.gpu_of_device(change.state, device_uuid)  # found read-only, then changed in a copy
            hardware.set_busy(change.gpu(gpu.index), device_uuid, busy)

    def inject_event(
        self,
        gpu: int | str,
        event_type: int | str,
        event_data: int = 0,
        gpu_instance_id: int | None = None,
        compute_instance_id: int | None = None,
    ) -> SimEvent:
        """An NVML event happens on GPU ``gpu`` (index or ``GPU-…`` UUID), e.g. an XID: every event set
        registered for it (in any process) returns it once.  ``gpu_instance_id`` / ``compute_instance_id``
        attribute it to a MIG instance (None: the whole GPU); the instance need not exist, as a fault may
        be reported for an instance being destroyed.  ``event_type``: an ``nvmlEventType*`` bit or one
        of :data:`~dra_driver.nvml.sim.library.EVENT_KINDS` (``xid``, ``double-bit-ecc``, ``gpu-lost``)."""
        if isinstance(event_type, str):
            event_type = EVENT_KINDS[event_type]
        with self._store.transaction() as change:
            state = change.state
            index = gpu if isinstance(gpu, int) else hardware.gpu_of_device(state, gpu).index
            _gpu(state, index)
            serial = state.event_serial + 1
            event = SimEvent(
                serial=serial,
                gpu_index=index,
                event_type=event_type,
                event_data=event_data,
                gpu_instance_id=NOT_ATTRIBUTED if gpu_instance_id is None else gpu_instance_id,
                compute_instance_id=NOT_ATTRIBUTED if compute_instance_id is None else compute_instance_id,
            )
            state.events = [*state.events, event][-MAX_KEPT_EVENTS:]
            state.event_serial = serial
        return event

    def snapshot(self) -> SimState:
        """A private copy of the persisted state (mutating it changes nothing)."""
        return self._store.read().model_copy(deep=True)


def _gpu(state: SimState, index: int) -> SimGpu:
    if not 0 <= index < len(state.gpus):
        raise IndexError(f"no simulated GPU {index}; the machine has {len(state.gpus)}")
    return state.gpus[index]


def reset_gpu(state_path: str | os.PathLike[str], index: int) -> None:
    SimulatedHardware(state_path).reset_gpu(index)


def set_busy(state_path: str | os.PathLike[str], device_uuid: str, busy: bool) -> None:
    SimulatedHardware(state_path).set_busy(device_uuid, busy)


def snapshot(state_path: str | os.PathLike[str]) -> SimState:
    return SimulatedHardware(state_path).snapshot()
