"""The checkpoint: round trip, checksum and schema-version refusal, other boot discarded,
double-allocation guard, one file per claim and the marker naming its layout.  What a change costs on disk
(writes, bytes, fsyncs, re-reads) is pinned in tests/perf/test_prepare_checkpoint_writes.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.devicemodel.pool import OwnedInstances
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.errors import CheckpointError, DeviceConflictError
from kubeletplugin.prepare.records import (
    ClaimRecord,
    ClaimState,
    DeviceIntent,
    DeviceRecord,
    compute_checksum,
)

BOOT = "boot-a"
GPU = "GPU-00000000-0000-0000-0000-000000000000"


def intent(name: str, start: int | None, size: int = 1, admin: bool = False, gpu: str = GPU) -> DeviceIntent:
    mig = start is not None
    return DeviceIntent(
        device_name=name,
        request_names=("gpu",),
        admin_access=admin,
        gpu_uuid=gpu,
        gpu_minor=0,
        profile_id=19 if mig else None,
        profile_name="1g.10gb" if mig else None,
        placement=Placement(start=start, size=size) if mig else None,
        multiprocessor_count=16 if mig else None,
        env={"A": "b"},
    )


def completed(uid: str, *devices: DeviceRecord) -> ClaimRecord:
    return ClaimRecord(claim_uid=uid, namespace="ns", name=uid, state=ClaimState.PREPARE_COMPLETED, devices=devices)


def realized(name: str, start: int, gi: int) -> DeviceRecord:
    return DeviceRecord(
        intent=intent(name, start),
        gpu_instance_id=gi,
        compute_instance_id=0,
        compute_instance_profile_id=0,
        mig_uuid=f"MIG-{gi}",
        cdi_device_ids=(f"gpu.migdra.io/claim=x-{name}",),
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    record = completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13))
    store.put(record)
    started = ClaimRecord(
        claim_uid="uid-2",
        namespace="ns",
        name="two",
        state=ClaimState.PREPARE_STARTED,
        devices=(DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0)),),
    )
    store.put(started)

    reloaded = CheckpointStore(tmp_path, BOOT)
    outcome = reloaded.load()
    assert outcome.discarded == ()
    assert reloaded.get("uid-1") == record
    assert reloaded.get("uid-2") == started
    assert reloaded.owned().instances == {(GPU, 13)}


def rewrite(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Change a stored file's ``data`` and checksum it again, as a newer (or older) migdra would write it."""
    document = json.loads(path.read_text())
    edit(document["data"])
    document["checksum"] = compute_checksum(document["data"])
    path.write_text(json.dumps(document))


def test_checksum_mismatch_refuses_to_load_names_the_file_and_keeps_it(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))
    store.put(completed("uid-2", realized("gpu-0-mig-1g10gb-19-5", 5, 12)))
    path = store.claim_path("uid-1")
    document = json.loads(path.read_text())
    document["data"]["claim"]["devices"][0]["gpuInstanceID"] = 14  # a flipped bit
    path.write_text(json.dumps(document))
    tampered = path.read_bytes()

    with pytest.raises(CheckpointError, match=f"{re.escape(str(path))} is corrupt: checksum"):
        CheckpointStore(tmp_path, BOOT).load()
    assert path.read_bytes() == tampered  # never silently discarded
    assert store.claim_path("uid-2").exists()
    with pytest.raises(CheckpointError, match="corrupt: checksum"):
        store.records()  # the running process fails its calls too


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"{not json", "not valid JSON", id="torn"),
        pytest.param(b'{"data": {}}', "lacks 'data' or 'checksum'", id="no-checksum"),
        pytest.param(
            json.dumps({"checksum": compute_checksum({"schemaVersion": 9}), "data": {"schemaVersion": 9}}).encode(),
            "schema version 9",
            id="future-schema",
        ),
        pytest.param(
            json.dumps({"checksum": compute_checksum({"schemaVersion": 1}), "data": {"schemaVersion": 1}}).encode(),
            "schema version 1; this migdra reads 2",
            id="unreleased-schema",
        ),
    ],
)
@pytest.mark.parametrize("which", ["marker", "record"])
def test_an_unreadable_file_refuses_to_start_naming_it(
    tmp_path: Path, content: bytes, message: str, which: str
) -> None:
    """A record we cannot read could name an instance we own: refusing to start is the safe choice."""
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))
    path = store.path if which == "marker" else store.claim_path("uid-1")
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"{re.escape(str(path))}.*{message}"):
        CheckpointStore(tmp_path, BOOT).load()
    assert path.read_bytes() == content


def test_a_record_file_that_names_another_claim_or_boot_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))
    store.claim_path("uid-1").rename(store.claim_path("uid-9"))
    with pytest.raises(CheckpointError, match="holds claim uid-1"):
        CheckpointStore(tmp_path, BOOT).load()
    store.claim_path("uid-9").rename(store.claim_path("uid-1"))
    rewrite(store.claim_path("uid-1"), lambda data: data.update(nodeBootID="boot-z"))
    with pytest.raises(CheckpointError, match="belongs to boot boot-z"):
        CheckpointStore(tmp_path, BOOT).load()


def test_checksum_covers_the_stored_json_so_unknown_fields_still_verify(tmp_path: Path) -> None:
    """A newer migdra's extra field must not break an older reader (NVIDIA #1080)."""
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))
    rewrite(store.claim_path("uid-1"), lambda data: data["claim"].update(addedLater={"x": 1}))
    rewrite(store.path, lambda data: data.update(addedLater=True))
    assert CheckpointStore(tmp_path, BOOT).load().records[0].claim_uid == "uid-1"


def test_records_of_another_boot_are_discarded(tmp_path: Path) -> None:
    old = CheckpointStore(tmp_path, "boot-before-reboot")
    old.load()
    old.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))

    store = CheckpointStore(tmp_path, BOOT)
    outcome = store.load()
    assert [r.claim_uid for r in outcome.discarded] == ["uid-1"]
    assert outcome.previous_boot_id == "boot-before-reboot"
    assert store.records() == ()
    assert not old.directory.exists()
    assert CheckpointStore(tmp_path, BOOT).load().records == ()


def test_a_torn_record_of_another_boot_is_discarded_never_an_error(tmp_path: Path) -> None:
    """Records are not fsynced: after a crash of the node one may be empty or torn.  It belongs to a boot
    whose instances are gone, so it is removed unread and the plugin starts."""
    old = CheckpointStore(tmp_path, "boot-before-reboot")
    old.load()
    old.put(completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13)))
    old.put(completed("uid-2", realized("gpu-0-mig-1g10gb-19-5", 5, 12)))
    old.claim_path("uid-1").write_bytes(b"")
    old.claim_path("uid-2").write_bytes(old.claim_path("uid-2").read_bytes()[:40])
    (old.directory / ".uid-3.json.1.0123abcd.tmp").write_bytes(b"{")

    outcome = CheckpointStore(tmp_path, BOOT).load()
    assert (outcome.records, outcome.discarded) == ((), ())
    assert not old.directory.exists()


def test_a_placement_held_by_another_claim_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(
        completed(
            "uid-1",
            realized("gpu-0-mig-2g-14-4", 4, 5).model_copy(update={"intent": intent("gpu-0-mig-2g-14-4", 4, 2)}),
        )
    )
    overlapping = ClaimRecord(
        claim_uid="uid-2",
        namespace="ns",
        name="two",
        state=ClaimState.PREPARE_STARTED,
        devices=(DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-5", 5)),),
    )
    with pytest.raises(DeviceConflictError, match="already prepared for claim ns/uid-1"):
        store.begin(overlapping)
    assert store.get("uid-2") is None

    elsewhere = overlapping.model_copy(update={"devices": (DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-6", 6)),)})
    store.begin(elsewhere)
    admin = overlapping.model_copy(
        update={"claim_uid": "uid-3", "devices": (DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-5", 5, admin=True)),)}
    )
    store.begin(admin)  # admin access never conflicts
    whole_gpu = overlapping.model_copy(
        update={"claim_uid": "uid-4", "devices": (DeviceRecord(intent=intent("gpu-0", None)),)}
    )
    with pytest.raises(DeviceConflictError):
        store.begin(whole_gpu)


def started(uid: str, *devices: DeviceRecord) -> ClaimRecord:
    return ClaimRecord(claim_uid=uid, namespace="ns", name=uid, state=ClaimState.PREPARE_STARTED, devices=devices)


def test_each_step_of_a_prepare_is_on_disk_and_owned_from_the_moment_the_gpu_instance_exists(tmp_path: Path) -> None:
    """PrepareStarted -> GI requested (+ the GIs standing) -> GI ID, each written before prepare goes on."""
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    first, second = DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0)), DeviceRecord(intent=intent("d1", 1))
    store.begin(started("uid-1", first, second))
    assert store.owned() == OwnedInstances()  # nothing asked of NVML yet

    requested = store.update_device("uid-1", 0, first.model_copy(update={"gpu_instances_before": (3, 9)}))
    assert requested.devices == (first.model_copy(update={"gpu_instances_before": (3, 9)}), second)
    assert store.owned().placements == {(GPU, 19, Placement(start=0, size=1))}
    assert store.owned().instances == set()
    assert CheckpointStore(tmp_path, BOOT).load().records == (requested,)  # durable before the NVML call

    created = store.update_device("uid-1", 0, requested.devices[0].model_copy(update={"gpu_instance_id": 13}))
    assert store.owned().instances == {(GPU, 13)}  # a started record's GI is migdra's: never foreign
    assert store.owned().placements == set()
    assert CheckpointStore(tmp_path, BOOT).load().records == (created,)
    assert created.devices[0].gpu_instances_before == (3, 9)


def test_admin_access_and_whole_gpus_are_never_owned_placements(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(
        started(
            "uid-1",
            DeviceRecord(intent=intent("a", 2, admin=True), gpu_instances_before=()),
            DeviceRecord(intent=intent("gpu-0", None), gpu_instances_before=()),
        )
    )
    assert store.owned() == OwnedInstances()


def test_a_checkpoint_written_before_gpu_instances_before_existed_still_loads(tmp_path: Path) -> None:
    """Records of an older migdra lack the field: it reads as "NVML never asked", never as a guess."""
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    store.put(started("uid-1", DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0))))
    rewrite(store.claim_path("uid-1"), lambda data: data["claim"]["devices"][0].pop("gpuInstancesBefore"))
    (record,) = CheckpointStore(tmp_path, BOOT).load().records
    assert record.devices[0].gpu_instances_before is None
    assert not record.devices[0].creation_requested


def test_two_plugin_processes_share_one_checkpoint_without_losing_a_record(tmp_path: Path) -> None:
    """The old and the new pod of a rolling update: each change is made to the file as it is now."""
    old, new = CheckpointStore(tmp_path, BOOT), CheckpointStore(tmp_path, BOOT)
    old.load()
    new.load()
    old.begin(started("uid-old", DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0))))
    new.begin(started("uid-new", DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-1", 1))))
    assert {r.claim_uid for r in old.records()} == {r.claim_uid for r in new.records()} == {"uid-old", "uid-new"}

    with pytest.raises(DeviceConflictError, match="already prepared for claim ns/uid-old"):
        new.begin(started("uid-double", DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0))))
    new.update_device("uid-old", 0, DeviceRecord(intent=intent("gpu-0-mig-1g10gb-19-0", 0), gpu_instance_id=7))
    assert old.owned().instances == {(GPU, 7)}  # the other process's step, seen by this one's publisher
    old.drop("uid-new")
    assert [r.claim_uid for r in new.records()] == ["uid-old"]
    assert [r.claim_uid for r in CheckpointStore(tmp_path, BOOT).load().records] == ["uid-old"]
    old.close()
    new.close()


# -- one file per claim ------------------------------------------------------------------------------


def test_a_fresh_state_directory_gets_the_marker_naming_layout_and_version(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    marker = json.loads(store.path.read_text())
    assert marker["data"] == {"schemaVersion": 2, "claimsDirectory": "claims"}
    assert marker["checksum"] == compute_checksum(marker["data"])  # a reader of another version verifies, then refuses
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json", "claims", "prepare.lock"]


def test_two_stores_see_each_others_changes_through_get(tmp_path: Path) -> None:
    one, two = CheckpointStore(tmp_path, BOOT), CheckpointStore(tmp_path, BOOT)
    one.load()
    two.load()
    record = completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13))
    one.put(record)
    assert two.get("uid-1") == record
    two.drop("uid-1")
    assert one.get("uid-1") is None
    assert one.records() == ()
    one.close()
    two.close()
