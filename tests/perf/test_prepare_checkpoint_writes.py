"""What a checkpoint change costs on disk: writes, bytes and fsyncs that do not grow with the claims the
node holds (one file per claim), no rewrite of another claim's file, and a reader that re-reads only the
files that changed.  The records' own round trip and refusals are tests/unit/test_prepare_checkpoint.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import kubeletplugin.prepare.checkpoint as checkpoint_module
from kubeletplugin.prepare.checkpoint import CheckpointStore, CheckpointWriteStats
from kubeletplugin.prepare.records import (
    ClaimFile,
    ClaimRecord,
    ClaimState,
    DeviceRecord,
    build_claim_file,
    parse_claim_file,
)
from tests.unit.test_prepare_checkpoint import BOOT, GPU, completed, intent, realized, started


def prepare_steps(store: CheckpointStore, uid: str, start: int, gpu: str) -> list[ClaimRecord]:
    """The four writes of a one-device prepare, as the service makes them; the records written."""
    device = DeviceRecord(intent=intent(f"gpu-mig-1g10gb-19-{start}", start, gpu=gpu))
    begun = started(uid, device)
    store.begin(begun)
    requested = store.update_device(uid, 0, device.model_copy(update={"gpu_instances_before": (1, 2)}))
    created = store.update_device(uid, 0, requested.devices[0].model_copy(update={"gpu_instance_id": 7}))
    done = created.model_copy(
        update={
            "state": ClaimState.PREPARE_COMPLETED,
            "devices": (realized(device.intent.device_name, start, 7).model_copy(update={"intent": device.intent}),),
        }
    )
    store.put(done)
    return [begun, requested, created, done]


def test_the_disk_work_of_a_prepare_does_not_depend_on_the_claims_held(tmp_path: Path) -> None:
    """The 1st and the 50th claim of a node cost the same writes and fsyncs, and bytes that are exactly
    their own records' -- never a rewrite of the other claims' records."""
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    spent: list[tuple[CheckpointWriteStats, int]] = []
    for number in range(50):
        before = store.write_stats()
        written = prepare_steps(store, f"uid-{number:02d}", number % 7, f"GPU-{number // 7}")
        spent.append((store.write_stats() - before, sum(len(build_claim_file(BOOT, r)) for r in written)))

    (first, first_own), (last, last_own) = spent[0], spent[-1]
    assert first == CheckpointWriteStats(writes=4, bytes=first_own, fsyncs=0)
    assert last == CheckpointWriteStats(writes=4, bytes=last_own, fsyncs=0)
    assert abs(last.bytes - first.bytes) == abs(last_own - first_own)  # the records' own size difference
    assert len(store.records()) == 50


def test_a_change_of_one_claim_never_rewrites_another_claims_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, BOOT)
    store.load()
    prepare_steps(store, "uid-a", 0, GPU)
    a = store.claim_path("uid-a").stat()
    prepare_steps(store, "uid-b", 1, GPU)
    store.drop("uid-b")
    after = store.claim_path("uid-a").stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (a.st_ino, a.st_mtime_ns, a.st_size)
    assert not store.claim_path("uid-b").exists()
    assert store.write_stats().removals == 1


def test_write_statistics_count_what_is_written_and_the_metric_sees_every_change(tmp_path: Path) -> None:
    seconds: list[float] = []
    store = CheckpointStore(tmp_path, BOOT, observe_write=seconds.append)
    store.load()  # a fresh state directory: the marker, fsynced (file and directory), once
    assert store.write_stats() == CheckpointWriteStats(writes=1, bytes=len(store.path.read_bytes()), fsyncs=2)
    record = completed("uid-1", realized("gpu-0-mig-1g10gb-19-6", 6, 13))
    store.put(record)
    store.put(record)  # the file already says so: nothing is written
    store.drop("uid-1")
    store.drop("uid-1")  # no record: nothing is removed
    assert store.write_stats() - CheckpointWriteStats(writes=1, bytes=len(store.path.read_bytes()), fsyncs=2) == (
        CheckpointWriteStats(writes=1, bytes=len(build_claim_file(BOOT, record)), fsyncs=0, removals=1)
    )
    assert len(seconds) == 3  # marker, put, drop
    reloaded = CheckpointStore(tmp_path, BOOT)
    reloaded.load()
    assert reloaded.write_stats() == CheckpointWriteStats()  # the marker is there: a restart writes nothing


def test_a_reader_re_reads_only_the_files_that_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = CheckpointStore(tmp_path, BOOT), CheckpointStore(tmp_path, BOOT)
    writer.load()
    for number in range(5):
        prepare_steps(writer, f"uid-{number}", number, GPU)
    reader.load()
    parsed: list[Path] = []

    def parse(raw: bytes, source: Path) -> ClaimFile:
        parsed.append(source)
        return parse_claim_file(raw, source)

    monkeypatch.setattr(checkpoint_module, "parse_claim_file", parse)
    assert len(reader.records()) == 5
    assert parsed == []
    writer.update_device("uid-3", 0, realized("gpu-mig-1g10gb-19-3", 3, 8))
    assert reader.get("uid-3") == writer.get("uid-3")
    assert len(reader.records()) == 5
    assert parsed == [writer.claim_path("uid-3")]  # once, by get(); records() saw it was read already
