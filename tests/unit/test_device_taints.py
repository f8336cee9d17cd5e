"""GPU faults as device taints: which devices a fault concerns, how they render in slices (their
acceptance by the local API server is tests/integration/test_device_taints_published.py), the taint store
(round trip, corruption, admin clear), the fault watcher's event mapping, ignored XIDs and the healthy
period on a fake clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.faults import GpuFault, taint_pool, tainted_devices
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import NvmlEvent, NvmlEventType
from kubeletplugin.device_health import NvmlDeviceHealth
from kubeletplugin.gpu_faults import GpuFaultWatcher, fault_of_event
from kubeletplugin.metrics import FaultMetrics
from kubeletplugin.settings import DEFAULT_IGNORED_XIDS
from kubeletplugin.taint_store import StoredFault, TaintStore, TaintStoreError
from tests.conftest import OpenSimulatedNode

DRIVER = "gpu.migdra.io"


@pytest.fixture
def pool(simulated_node: OpenSimulatedNode) -> Iterator[NodePool]:
    with simulated_node("H100-SXM5-80GB:2") as nvml:
        yield build_pool(read_inventory(nvml), DeviceModelConfig())


def _uuid(pool: NodePool, minor: int) -> str:
    return next(d.gpu_uuid for d in pool.devices if d.gpu_minor == minor)


def _stored(gpu_uuid: str, name: str = "xid", value: str = "79", at: float = 1000.0, **where: int) -> StoredFault:
    return StoredFault(gpu_uuid=gpu_uuid, gpu_index=1, name=name, value=value, first_seen=at, last_seen=at, **where)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [((0, 1), (0, 1), True), ((0, 1), (1, 1), False), ((0, 4), (3, 1), True), ((4, 4), (0, 4), False)],
    ids=["same", "beside", "inside", "other-half"],
)
def test_overlap_of_memory_slices(a: tuple[int, int], b: tuple[int, int], expected: bool) -> None:
    assert Placement(start=a[0], size=a[1]).overlaps(Placement(start=b[0], size=b[1])) is expected


@pytest.mark.parametrize(
    ("shared_devices", "per_gpu"), [(False, 25), (True, 25 + 7)], ids=["default", "shared-devices"]
)
def test_a_whole_gpu_fault_taints_every_device_of_that_gpu_only(
    simulated_node: OpenSimulatedNode, shared_devices: bool, per_gpu: int
) -> None:
    """Every device of the GPU: its 25 exclusive ones, and with ``sharedDevices: true`` its 7 shared ones."""
    with simulated_node("H100-SXM5-80GB:2") as nvml:
        pool = build_pool(read_inventory(nvml), DeviceModelConfig(shared_devices=shared_devices))
    assert sum(d.shared for d in pool.devices) == (2 * 7 if shared_devices else 0)
    fault = GpuFault(_uuid(pool, 1), "xid", "79", "2026-12-02T00:00:00Z")
    tainted = taint_pool(pool, [fault])
    names = {d.name for d in tainted.devices if d.taints}
    assert names == {d.name for d in pool.devices if d.gpu_minor == 1}
    device = next(d for d in tainted.devices if d.taints)
    assert device.to_api()["taints"] == [
        {"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-12-02T00:00:00Z"}
    ]
    assert tainted_devices(tainted) == {(_uuid(pool, 1), f"{DRIVER}/xid"): per_gpu}
    assert taint_pool(pool, []) is pool


def test_a_gpu_instance_fault_taints_the_devices_overlapping_its_placement(pool: NodePool) -> None:
    fault = GpuFault(_uuid(pool, 0), "xid", "94", "2026-12-02T00:00:00Z", Placement(start=2, size=2))
    tainted = {d.name for d in taint_pool(pool, [fault]).devices if d.taints}
    expected = {
        d.name
        for d in pool.devices
        if d.gpu_minor == 0 and d.placement is not None and d.placement.overlaps(Placement(start=2, size=2))
    }
    assert tainted == expected
    assert {"gpu-0-mig-2g20gb-14-2", "gpu-0-mig-7g80gb-0-0"} <= tainted
    assert not {"gpu-0-mig-1g10gb-19-0", "gpu-0-mig-2g20gb-14-4"} & tainted


def test_repeated_faults_are_one_taint_with_the_earliest_time(pool: NodePool) -> None:
    gpu = _uuid(pool, 1)
    faults = [GpuFault(gpu, "xid", "79", "2026-12-02T00:00:09Z"), GpuFault(gpu, "xid", "79", "2026-12-02T00:00:01Z")]
    device = next(d for d in taint_pool(pool, faults).devices if d.taints)
    assert [(t.value, t.time_added) for t in device.taints] == [("79", "2026-12-02T00:00:01Z")]


def test_the_health_stream_reports_tainted_devices_unhealthy(simulated_node: OpenSimulatedNode) -> None:
    with simulated_node("H100-SXM5-80GB:2") as nvml:
        pool = build_pool(read_inventory(nvml), DeviceModelConfig())
        tainted = taint_pool(pool, [GpuFault(_uuid(pool, 1), "xid", "79", "2026-12-02T00:00:00Z")])
        report = NvmlDeviceHealth(nvml, "node-a", lambda: tainted)()
    unhealthy = {name for _, name, healthy in report if not healthy}
    assert unhealthy == {d.name for d in pool.devices if d.gpu_minor == 1}


# -- the taint store -------------------------------------------------------------------------------


def test_the_store_round_trips_and_a_repeat_moves_last_seen(tmp_path: Path) -> None:
    store = TaintStore(tmp_path)
    assert store.load().faults == []
    assert store.key() is None
    assert store.record(_stored("GPU-a", at=10)) is True
    assert store.record(_stored("GPU-a", at=20)) is False
    assert store.record(_stored("GPU-a", value="94", at=30, placement_start=2, placement_size=2)) is True
    loaded = TaintStore(tmp_path).load()
    assert loaded.generation == 3  # every write, a repeat's too
    assert [(f.value, f.first_seen, f.last_seen) for f in loaded.faults] == [("79", 10, 20), ("94", 30, 30)]
    assert loaded.faults[1].to_fault().placement == Placement(start=2, size=2)
    assert json.loads((tmp_path / "device-taints.json").read_text())["schema_version"] == 1
    # root's alone, like the checkpoint (docs/security.md)
    assert (tmp_path / "device-taints.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "device-taints.json.lock").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"schema_version": 2, "faults": []}', b'{"schema_version": 1, "faults": [{"gpu_uuid": 1}]}'],
    ids=["not-json", "newer-schema", "bad-fault"],
)
def test_a_corrupt_store_is_one_clear_error_and_only_clear_all_replaces_it(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "device-taints.json").write_bytes(content)
    store = TaintStore(tmp_path)
    with pytest.raises(TaintStoreError, match=r"device-taints.json is corrupt .*migdra health clear"):
        store.load()
    with pytest.raises(TaintStoreError):
        store.record(_stored("GPU-a"))
    with pytest.raises(TaintStoreError):
        store.clear("GPU-a")
    assert (tmp_path / "device-taints.json").read_bytes() == content  # never dropped by itself
    assert store.clear() == []
    assert store.load().faults == []


def test_admin_clear_by_gpu_uuid_index_and_xid(tmp_path: Path) -> None:
    store = TaintStore(tmp_path)
    store.record(_stored("GPU-a", value="79"))
    store.record(_stored("GPU-a", value="94"))
    store.record(_stored("GPU-b", name="gpu-lost", value="").model_copy(update={"gpu_index": 2}))
    assert [f.value for f in store.clear("GPU-a", xid=94)] == ["94"]
    assert [f.gpu_uuid for f in store.clear("2")] == ["GPU-b"]
    assert [f.value for f in store.load().faults] == ["79"]


# -- the watcher -----------------------------------------------------------------------------------


class _Placements:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __call__(self, gpu_uuid: str, gpu_instance_id: int) -> tuple[int, int] | None:
        self.asked.append((gpu_uuid, gpu_instance_id))
        return (4, 2) if gpu_instance_id == 5 else None  # GI 5 exists at 4:2; any other is gone


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (NvmlEvent("GPU-a", NvmlEventType.XID, xid=79), ("xid", "79", None)),
        (NvmlEvent("GPU-a", NvmlEventType.XID, xid=94, gpu_instance_id=5, compute_instance_id=0), ("xid", "94", 4)),
        (NvmlEvent("GPU-a", NvmlEventType.XID, xid=94, gpu_instance_id=9, compute_instance_id=0), ("xid", "94", None)),
        (NvmlEvent("GPU-a", NvmlEventType.GPU_LOST, gpu_instance_id=5), ("gpu-lost", "", None)),
        (NvmlEvent("GPU-a", NvmlEventType.DOUBLE_BIT_ECC), ("double-bit-ecc", "", None)),
        (NvmlEvent("GPU-a", NvmlEventType.XID, xid=13), None),
        (NvmlEvent("GPU-a", NvmlEventType.XID, xid=43, gpu_instance_id=5), None),
    ],
    ids=["xid-whole-gpu", "xid-of-a-gi", "xid-of-a-gone-gi", "gpu-lost", "dbe", "ignored-13", "ignored-43-in-a-gi"],
)
def test_an_event_maps_to_its_fault(event: NvmlEvent, expected: tuple[str, str, int | None] | None) -> None:
    fault = fault_of_event(event, 1, 100.0, DEFAULT_IGNORED_XIDS, _Placements())
    assert (None if fault is None else (fault.name, fault.value, fault.placement_start)) == expected


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_watcher_keeps_faults_clears_them_after_the_healthy_period_and_sees_admin_clears(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    clock, registry, changes = _Clock(), CollectorRegistry(), []
    store = TaintStore(tmp_path)
    watcher = GpuFaultWatcher(
        None,  # type: ignore[arg-type]  # no event here needs NVML (none attributed to a GI)
        store,
        lambda: changes.append(1),
        clear_after=60,
        metrics=FaultMetrics(registry),
        clock=clock,
        ignored_xids=frozenset({31}),
    )
    watcher.load()
    assert watcher.handle(NvmlEvent("GPU-a", NvmlEventType.XID, xid=31)) is False
    assert watcher.handle(NvmlEvent("GPU-a", NvmlEventType.XID, xid=79)) is True
    assert watcher.handle(NvmlEvent("GPU-b", NvmlEventType.XID, xid=79)) is True
    assert [f.gpu_uuid for f in watcher.faults()] == ["GPU-a", "GPU-b"]
    assert registry.get_sample_value("migdra_nvml_events_total", {"gpu_uuid": "GPU-a", "type": "xid"}) == 2

    clock.now += 50
    watcher.handle(NvmlEvent("GPU-b", NvmlEventType.XID, xid=79))  # GPU-b is still failing
    clock.now += 20  # GPU-a quiet for 70 s, GPU-b for 20 s
    assert watcher.check_store() is True
    assert [f.gpu_uuid for f in watcher.faults()] == ["GPU-b"]
    assert watcher.check_store() is False  # nothing changed since

    TaintStore(tmp_path).clear("GPU-b")  # the admin, another process
    assert watcher.check_store() is True
    assert watcher.faults() == ()


def test_a_restarted_watcher_loads_the_faults_and_refuses_a_corrupt_store(tmp_path: Path) -> None:
    TaintStore(tmp_path).record(_stored("GPU-a"))
    watcher = GpuFaultWatcher(None, TaintStore(tmp_path), lambda: None)  # type: ignore[arg-type]
    watcher.load()
    assert [(f.gpu_uuid, f.value, f.time_added) for f in watcher.faults()] == [("GPU-a", "79", "1970-01-01T00:16:40Z")]
    (tmp_path / "device-taints.json").write_text("[]")
    with pytest.raises(TaintStoreError):
        GpuFaultWatcher(None, TaintStore(tmp_path), lambda: None).load()  # type: ignore[arg-type]
