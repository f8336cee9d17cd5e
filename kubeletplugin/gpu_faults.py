"""Watch NVML for GPU faults and keep them as device taints: XIDs (and GPU lost, double-bit ECC) in, a
re-publish out.

:class:`GpuFaultWatcher` owns one NVML event set over the node's GPUs and one thread that waits on it.
An event becomes a :class:`~kubeletplugin.taint_store.StoredFault` (:func:`fault_of_event`, pure but
for the lookup of the GPU instance's placement), is written to the taint store and triggers the publish
loop, which renders the store's faults as taints (:func:`dra_driver.devicemodel.faults.taint_pool`).
Between events, each round (``round_interval``) notices a store an admin changed (``migdra health
clear``) and, with a healthy period (``MIGDRA_HEALTH_CLEAR_AFTER``), drops faults that saw no new event
for that long; either triggers a publish too.  XIDs in ``ignored_xids`` (application errors such as
13, 31, 43, 45, 68, 109: a CUDA program's fault, not the hardware's) are counted and dropped.

The watcher is a :class:`~dra_driver.kube.loop.ControlLoop` without informers: each pass is one round
(it waits in NVML's event set, not on a change counter, so it is due again at once).  Thread safety:
:meth:`faults` is called from the publish loop's thread and the health stream's; it returns an
immutable tuple swapped under a lock.  The watcher never publishes itself (app.py wires it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from dra_driver.devicemodel.faults import ECC_TAINT, GPU_LOST_TAINT, XID_TAINT, GpuFault
from dra_driver.kube.loop import ControlLoop
from dra_driver.nvml.backend import Nvml, NvmlEventWatch
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import NvmlEvent, NvmlEventType
from kubeletplugin.settings import DEFAULT_IGNORED_XIDS
from kubeletplugin.taint_store import StoredFault, TaintStore, TaintStoreError

log = logging.getLogger(__name__)

_TAINT_OF_EVENT = {
    NvmlEventType.XID: XID_TAINT,
    NvmlEventType.GPU_LOST: GPU_LOST_TAINT,
    NvmlEventType.DOUBLE_BIT_ECC: ECC_TAINT,
}


class FaultMetrics(Protocol):
    def observe_nvml_event(self, gpu_uuid: str, event_type: str) -> None: ...


def fault_of_event(
    event: NvmlEvent,
    gpu_index: int,
    now: float,
    ignored_xids: frozenset[int],
    gpu_instance_placement: Callable[[str, int], tuple[int, int] | None],
) -> StoredFault | None:
    """The fault an event means, or None for an ignored XID.

    An XID attributed to a GPU instance is that instance's placement (looked up now: NVML names the GI by
    ID, the devices are placements); one NVML cannot place (the GI is already gone) falls back to the
    whole GPU, the safe side.  GPU lost and double-bit ECC are always the whole GPU.
    """
    if event.event_type is NvmlEventType.XID and event.xid in ignored_xids:
        return None
    placement = None
    if event.event_type is NvmlEventType.XID and event.gpu_instance_id is not None:
        placement = gpu_instance_placement(event.gpu_uuid, event.gpu_instance_id)
    return StoredFault(
        gpu_uuid=event.gpu_uuid,
        gpu_index=gpu_index,
        name=_TAINT_OF_EVENT[event.event_type],
        value=str(event.xid) if event.xid is not None else "",
        placement_start=placement[0] if placement else None,
        placement_size=placement[1] if placement else None,
        gpu_instance_id=event.gpu_instance_id if placement else None,
        compute_instance_id=event.compute_instance_id if placement else None,
        first_seen=now,
        last_seen=now,
    )


class GpuFaultWatcher(ControlLoop):
    """NVML health events -> the taint store -> ``on_change`` (a publish trigger)."""

    def __init__(
        self,
        nvml: Nvml,
        store: TaintStore,
        on_change: Callable[[], None],
        *,
        ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS,
        clear_after: float = 0.0,
        metrics: FaultMetrics | None = None,
        clock: Callable[[], float] = time.time,
        round_interval: float = 1.0,
    ) -> None:
        self._nvml = nvml
        self._store = store
        self._on_change = on_change
        self._ignored = ignored_xids
        self._clear_after = clear_after
        self._metrics = metrics
        self._clock = clock
        self._round_interval = round_interval
        self._lock = threading.Lock()
        self._faults: tuple[GpuFault, ...] = ()
        self._store_key: object = None
        self._indices: dict[str, int] = {}
        self._watch: NvmlEventWatch | None = None
        self._next_round = 0.0  # when the store is looked at again while events keep coming
        self._failed = False  # the last round failed: wait a round before the next
        super().__init__("gpu-faults", resync=round_interval)

    def load(self) -> None:
        """Read the store (before the first publish).  Raises :class:`TaintStoreError` when corrupt."""
        self._store_key = self._store.key()
        stored = self._store.load()
        self._set(stored.faults)
        if stored.faults:
            log.warning(
                "%d GPU fault(s) from before this start keep their devices tainted (%s; `migdra health list`)",
                len(stored.faults),
                self._store.path,
            )

    def faults(self) -> tuple[GpuFault, ...]:
        with self._lock:
            return self._faults

    def start(self, gpus: Iterable[tuple[str, int]] = ()) -> None:
        """Register ``(GPU UUID, NVML index)`` of every GPU on a new event set and start waiting."""
        watch = self._nvml.watch_events()
        for gpu_uuid, index in gpus:
            self._indices[gpu_uuid] = index
            try:
                kinds = watch.register(gpu_uuid)
            except NvmlError as exc:
                log.warning("GPU %s: no NVML health events (%s); its faults are not watched", gpu_uuid, exc)
                continue
            if NvmlEventType.XID not in kinds:
                log.warning("GPU %s does not report XID events; its faults are not watched", gpu_uuid)
        self._watch = watch
        super().start()

    def stop(self) -> None:
        super().stop()  # the pass in NVML's wait ends within a round
        if self._watch is not None:
            try:
                self._watch.close()
            except NvmlError as exc:
                log.debug("freeing the NVML event set: %s", exc)
            self._watch = None

    # -- one round -------------------------------------------------------------------------------

    def handle(self, event: NvmlEvent) -> bool:
        """Count, map and keep one event; True when the store changed (a publish is due)."""
        if self._metrics is not None:
            self._metrics.observe_nvml_event(event.gpu_uuid, event.event_type.value)
        fault = fault_of_event(
            event, self._indices.get(event.gpu_uuid, 0), self._clock(), self._ignored, self._gi_placement
        )
        if fault is None:
            log.info("GPU %s: XID %s is an application error (ignored): no taint", event.gpu_uuid, event.xid)
            return False
        where = (
            f"GPU instance {fault.gpu_instance_id} (memory slices {fault.placement_start}:{fault.placement_size})"
            if fault.placement_start is not None
            else "the whole GPU"
        )
        log.error("GPU %s: %s %s on %s: tainting its devices", event.gpu_uuid, fault.name, fault.value, where)
        self._store.record(fault)
        self.check_store()  # the faults the next publish renders include this one
        return True

    def check_store(self) -> bool:
        """Expire faults past the healthy period and re-read a store someone changed; True if it changed."""
        if self._clear_after > 0:
            for fault in self._store.expire(self._clock(), self._clear_after):
                log.info(
                    "GPU %s: %s %s saw no new event for %g s: taint cleared",
                    fault.gpu_uuid,
                    fault.name,
                    fault.value,
                    self._clear_after,
                )
        key = self._store.key()
        if key == self._store_key:
            return False
        self._store_key = key
        self._set(self._store.load().faults)
        return True

    def _set(self, stored: Iterable[StoredFault]) -> None:
        faults = tuple(fault.to_fault() for fault in stored)
        with self._lock:
            self._faults = faults

    def _gi_placement(self, gpu_uuid: str, gpu_instance_id: int) -> tuple[int, int] | None:
        try:
            placement = self._nvml.gpu_instance(gpu_uuid, gpu_instance_id).placement
        except NvmlError as exc:
            log.warning("GPU %s: GPU instance %d of a fault cannot be read (%s)", gpu_uuid, gpu_instance_id, exc)
            return None
        return placement.start, placement.size

    def next_wake(self) -> float:
        return self._round_interval if self._failed else 0.0

    def sync(self) -> None:
        """One round: wait up to ``round_interval`` for an event; between events, look at the store."""
        watch = self._watch
        assert watch is not None
        changed = False
        self._failed = False
        try:
            event = watch.wait(self._round_interval)
            if event is not None:
                changed = self.handle(event)
            if event is None or time.monotonic() >= self._next_round:
                self._next_round = time.monotonic() + self._round_interval
                changed = self.check_store() or changed
        except TaintStoreError as exc:
            log.error("%s", exc)  # the faults last read stay; an admin must repair the file
            self._failed = True
        except NvmlError as exc:
            log.error("waiting for NVML events failed: %s", exc)
            self._failed = True
        if changed:
            self._on_change()
