"""Pure rules of the kinds of device (prepare/kinds/): which GI, at a recorded placement but without a recorded GI ID,
migdra may destroy; whether a device's placement is taken, and by whose instance (each kind's plan step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.types import ComputeInstanceInfo, GpuInstanceInfo
from kubeletplugin.prepare.kinds import kind_of
from kubeletplugin.prepare.kinds.gpu_instances import find_unrecorded_gpu_instance
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord

GPU = "GPU-00000000-0000-0000-0000-000000000000"
PLACEMENT = Placement(start=4, size=2)


def device(before: tuple[int, ...] | None) -> DeviceRecord:
    return DeviceRecord(
        intent=DeviceIntent(
            device_name="gpu-0-mig-1g20gb-15-4",
            request_names=("gpu",),
            gpu_uuid=GPU,
            gpu_minor=0,
            profile_id=15,
            profile_name="1g.20gb",
            placement=PLACEMENT,
            multiprocessor_count=26,
        ),
        gpu_instances_before=before,
    )


def gi(gi_id: int, profile: int = 15, placement: Placement = PLACEMENT, cis: int = 0) -> GpuInstanceInfo:
    return GpuInstanceInfo(
        gpu_uuid=GPU,
        gpu_instance_id=gi_id,
        profile_id=profile,
        placement=placement,
        compute_instances=tuple(
            ComputeInstanceInfo(
                gpu_uuid=GPU,
                gpu_instance_id=gi_id,
                compute_instance_id=i,
                profile_id=7,
                placement=Placement(start=0, size=1),
                multiprocessor_count=26,
                mig_uuid=f"MIG-{gi_id}-{i}",
            )
            for i in range(cis)
        ),
    )


def test_an_empty_gi_created_after_the_recorded_request_is_migdras() -> None:
    ours = gi(5)
    assert find_unrecorded_gpu_instance(device((7,)), [gi(7, 19, Placement(start=0, size=1)), ours]) == (ours, None)


@pytest.mark.parametrize(
    ("record", "instance", "why"),
    [
        pytest.param(device(None), gi(5), "stopped before it asked NVML", id="never-requested"),
        pytest.param(device(None), gi(5, cis=1), "stopped before it asked NVML", id="never-requested-with-ci"),
        pytest.param(device((5,)), gi(5), "already stood on the GPU", id="standing-before"),
        pytest.param(device(()), gi(5, cis=1), "holds compute instance(s) MIG-5-0", id="has-a-ci"),
    ],
)
def test_a_gi_the_record_does_not_prove_migdras_is_a_stranger(
    record: DeviceRecord, instance: GpuInstanceInfo, why: str
) -> None:
    ours, stranger = find_unrecorded_gpu_instance(record, [instance])
    assert ours is None
    assert stranger is not None
    assert stranger[0] == instance
    assert why in stranger[1]


@pytest.mark.parametrize(
    "instance",
    [
        pytest.param(gi(5, profile=14), id="other-profile"),
        pytest.param(gi(5, placement=Placement(start=4, size=4)), id="other-placement"),
    ],
)
def test_a_gi_not_at_exactly_the_recorded_profile_and_placement_is_not_considered(instance: GpuInstanceInfo) -> None:
    assert find_unrecorded_gpu_instance(device(()), [instance]) == (None, None)


def record(uid: str, *devices: DeviceRecord) -> ClaimRecord:
    return ClaimRecord(claim_uid=uid, namespace="ns", name=uid, state=ClaimState.PREPARE_STARTED, devices=devices)


OTHER_PLACEMENT = Placement(start=6, size=2)
WANTED = device(None).intent


@pytest.mark.parametrize(
    ("instances", "records", "expected"),
    [
        pytest.param([], [], None, id="free"),
        pytest.param([gi(5, placement=OTHER_PLACEMENT)], [], None, id="free-beside-another"),
        pytest.param([gi(5, placement=Placement(start=5, size=1))], [], (5, None), id="overlapped-by-a-stranger"),
        pytest.param(
            [gi(5)], [record("b", device(None).model_copy(update={"gpu_instance_id": 5}))], (5, "b"), id="by-gi-id"
        ),
        pytest.param([gi(5)], [record("b", device((1,)))], (5, "b"), id="by-a-creation-in-flight"),
        pytest.param([gi(5)], [record("b", device(None))], (5, None), id="a-record-nvml-was-never-asked-for"),
        pytest.param(
            [gi(5)], [record("a", device(None).model_copy(update={"gpu_instance_id": 5}))], (5, None), id="own-claim"
        ),
    ],
)
def test_compute_placement_conflict(
    instances: list[GpuInstanceInfo], records: list[ClaimRecord], expected: tuple[int, str | None] | None
) -> None:
    conflict = kind_of(WANTED).plan(instances, WANTED, records, claim_uid="a")
    found = (
        None if conflict is None else (conflict.occupant.gpu_instance_id, conflict.holder and conflict.holder.claim_uid)
    )
    assert found == expected


def test_admin_access_and_whole_gpus_never_conflict() -> None:
    admin = WANTED.model_copy(update={"admin_access": True})
    whole = WANTED.model_copy(update={"profile_id": None, "placement": None})
    assert kind_of(admin).plan([gi(5)], admin, [], "a") is None
    assert kind_of(whole).plan([gi(5)], whole, [], "a") is None


SHARED_DEVICE = "gpu-0-shared-1g20gb-15-4"


def share_device(
    before: tuple[int, ...] | None, gi_id: int | None = None, *, name: str = SHARED_DEVICE
) -> DeviceRecord:
    """A share of the shared device ``name`` (1g.20gb at 4:2), as its record stands at a step of its prepare."""
    base = device(before)
    intent = base.intent.model_copy(
        update={"device_name": name, "share_id": "8a2e3c1e-0b4f-4b8e-9a57-3f2b1c0d9e8f", "share_size": 1}
    )
    return base.model_copy(update={"intent": intent, "gpu_instance_id": gi_id})


SHARE = share_device(None).intent


@pytest.mark.parametrize(
    ("instances", "records", "expected"),
    [
        pytest.param([gi(5)], [record("b", share_device((1,), 5))], None, id="the-gi-a-share-names"),
        # the race of a share with the share creating its GI: NVML shows the GI, the record no ID yet
        pytest.param([gi(5)], [record("b", share_device((1,)))], None, id="the-gi-a-share-is-creating"),
        pytest.param([gi(5)], [record("b", device((1,)))], (5, "b"), id="an-exclusive-creation-in-flight"),
        pytest.param(
            [gi(5)], [record("b", share_device((1,), name="gpu-0-shared-1g20gb-15-4x"))], (5, "b"), id="another-device"
        ),
        pytest.param([gi(5)], [record("b", share_device(None))], (5, None), id="a-share-nvml-was-never-asked-for"),
        pytest.param([gi(5)], [record("a", share_device((1,), 5))], (5, None), id="own-claim"),
        pytest.param(
            [gi(5, profile=14, placement=Placement(start=4, size=4))],
            [record("b", share_device((1,), 5))],
            (5, "b"),
            id="not-the-devices-profile-and-placement",
        ),
        pytest.param(
            [gi(5, placement=Placement(start=5, size=1))],
            [record("b", share_device((1,)))],
            (5, None),
            id="overlapped-beside-a-creation-in-flight",
        ),
    ],
)
def test_compute_placement_conflict_of_a_share(
    instances: list[GpuInstanceInfo], records: list[ClaimRecord], expected: tuple[int, str | None] | None
) -> None:
    """A share joins its device's shared GI -- named by another share's record or being created by one -- and
    nothing else; the locked find_shared_gpu_instance (in create) decides for real."""
    conflict = kind_of(SHARE).plan(instances, SHARE, records, claim_uid="a")
    found = (
        None if conflict is None else (conflict.occupant.gpu_instance_id, conflict.holder and conflict.holder.claim_uid)
    )
    assert found == expected


def test_one_place_creates_a_gpu_instance() -> None:
    """Both kinds that create instances go through kinds/gpu_instances.py (request recorded, then NVML): a second
    call site of NVML's GPU-instance creation in the node plugin would be a second, unrecorded way."""
    root = Path(__file__).resolve().parents[2] / "kubeletplugin"
    callers = sorted(
        str(path.relative_to(root)) for path in root.rglob("*.py") if ".create_gpu_instance(" in path.read_text()
    )
    assert callers == ["prepare/kinds/gpu_instances.py"]
