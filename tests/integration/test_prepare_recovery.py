"""Crash recovery: kill -9 at every step of prepare, restart on the same files, prepare and unprepare.

The child process runs a PrepareService on a shared simulator state file, checkpoint directory and
CDI directory against the KubeApiServer of this test process, and is killed (SIGKILL) by a crash
point of the service or a ``kill_after`` rule of the simulator.  A new service on the same files must
then leave no leaked and no duplicate instance, finish prepare and unprepare, and never touch the
foreign instance created beforehand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.prepare_harness as support
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.errors import CheckpointError
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
DEVICE_A = "gpu-0-mig-1g20gb-15-4"  # GPU 0, 1g.20gb at 4:2 -> GI 5, CI profile 7
DEVICE_B = "gpu-1-mig-3g40gb-9-4"  # GPU 1, 3g.40gb at 4:4 -> GI 2, CI profile 2
EXPECTED = {(0, 5, 15, 4, 7), (1, 2, 9, 4, 2)}  # (GPU, GI, profile, start, CI profile)


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as simulated:
        yield simulated


def run_child(
    node: Node, claims: list[ClaimRef], *, crash_at: str | None = None, faults: Any = None, unprepare: bool = False
) -> subprocess.CompletedProcess[str]:
    arguments = {
        "state_path": str(node.state_path),
        "cdi_dir": str(node.cdi_dir),
        "state_dir": str(node.state_dir),
        "proc_root": str(node.proc_root),
        "kubeconfig": str(node.api.kubeconfig_path),
        "claims": [{"namespace": c.namespace, "name": c.name, "uid": c.uid} for c in claims],
        "unprepare": unprepare,
    }
    env = {k: v for k, v in os.environ.items() if k not in {"MIGDRA_SIM_FAULTS", "MIGDRA_TEST_CRASH_AT"}}
    if crash_at is not None:
        env["MIGDRA_TEST_CRASH_AT"] = crash_at
    if faults is not None:
        env["MIGDRA_SIM_FAULTS"] = json.dumps(faults)
    return subprocess.run(
        [sys.executable, support.__file__, json.dumps(arguments)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def migdra_instances(node: Node, foreign: set[tuple[int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Instances other than the foreign ones: (GPU, GI, profile, start, CI profile) per CI (-1: no CI)."""
    return sorted(
        (gpu, gi, profile, start, ci_profile)
        for gpu, gi, profile, start, cis in node.instances()
        if (gpu, gi) not in foreign
        for ci_profile in ([c[1] for c in cis] or [-1])
    )


def foreign_instances(node: Node) -> set[tuple[int, int]]:
    """An operator's 1g.10gb at 0:1 on each GPU, created before migdra ran."""
    return {(0, node.foreign_instance(0, 19, 0, 1)[0]), (1, node.foreign_instance(1, 19, 0, 1)[0])}


@pytest.mark.parametrize(
    ("crash_at", "faults", "adopted"),
    [
        pytest.param("after-checkpoint-started", None, False, id="after-checkpoint-started"),
        pytest.param("after-checkpoint-requested", None, False, id="after-checkpoint-requested"),
        pytest.param("after-gpu-instance", None, False, id="after-gpu-instance"),
        pytest.param("after-checkpoint-gpu-instance", None, False, id="after-checkpoint-gpu-instance"),
        pytest.param("after-compute-instance", None, False, id="after-compute-instance"),
        pytest.param("after-cdi", None, False, id="after-cdi"),
        pytest.param("after-checkpoint-completed", None, True, id="after-checkpoint-completed"),
        pytest.param(
            None,
            {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 2, "action": "kill_after"}]},
            False,
            id="sim-kill-after-second-gpu-instance",
        ),
        pytest.param(
            None,
            {"rules": [{"symbol": "nvmlGpuInstanceCreateComputeInstance", "nth": 1, "action": "kill_after"}]},
            False,
            id="sim-kill-after-first-compute-instance",
        ),
    ],
)
def test_prepare_survives_kill_9_at_every_step(node: Node, crash_at: str | None, faults: Any, adopted: bool) -> None:
    foreign = foreign_instances(node)
    foreign_before = [i for i in node.instances() if (i[0], i[1]) in foreign]
    ref = node.claim("crashy", [result(DEVICE_A, request="a"), result(DEVICE_B, request="b")])

    child = run_child(node, [ref], crash_at=crash_at, faults=faults)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]

    service = node.service(start=False)
    report = service.start()  # a new plugin on the same files: recovery runs here
    if adopted:
        assert [r.claim_uid for r in report.adopted] == [ref.uid]
        assert migdra_instances(node, foreign) == sorted(EXPECTED)
    else:
        assert [r.claim_uid for r in report.rolled_back] == [ref.uid]
        assert migdra_instances(node, foreign) == []  # nothing leaked
        assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()

    prepared = service.prepare([ref])[ref.uid]
    assert prepared.error == ""
    assert migdra_instances(node, foreign) == sorted(EXPECTED)  # exactly one of each: no duplicates
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).exists()

    assert service.unprepare([ref])[ref.uid].error == ""
    assert migdra_instances(node, foreign) == []
    assert [i for i in node.instances() if (i[0], i[1]) in foreign] == foreign_before
    assert list(node.cdi_dir.iterdir()) == []


def checkpoint_devices(node: Node, ref: ClaimRef) -> list[dict[str, Any]]:
    """The device records of the claim in the checkpoint file, as stored."""
    data = json.loads(node.record_path(ref.uid).read_text())["data"]
    return list(data["claim"]["devices"])


def operator_creates(node: Node, *, with_compute_instance: bool) -> int:
    """An operator's instance of exactly DEVICE_A's profile at exactly its placement; its GI ID."""
    if with_compute_instance:
        return node.foreign_instance(0, 15, 4, 2)[0]
    return node.nvml.create_gpu_instance(node.gpu_uuid(0), 15, Placement(start=4, size=2)).gpu_instance_id


@pytest.mark.parametrize("with_compute_instance", [True, False], ids=["gi-and-ci", "bare-gi"])
def test_an_instance_an_operator_creates_after_a_crash_before_the_gpu_instance_is_never_destroyed(
    node: Node, with_compute_instance: bool
) -> None:
    """docs/prepare.md §7: killed after PrepareStarted, before NVML was asked for anything; meanwhile an
    operator creates the allocated profile at the allocated placement.  Recovery must leave it alone."""
    foreign = foreign_instances(node)
    ref = node.claim("crash-then-operator", [result(DEVICE_A, request="a"), result(DEVICE_B, request="b")])
    child = run_child(node, [ref], crash_at="after-checkpoint-started")
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    assert migdra_instances(node, foreign) == []
    assert [d.get("gpuInstancesBefore") for d in checkpoint_devices(node, ref)] == [None, None]

    operator_gi = operator_creates(node, with_compute_instance=with_compute_instance)
    operator = {(0, operator_gi)}
    theirs = [i for i in node.instances() if (i[0], i[1]) in foreign | operator]

    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.rolled_back] == [ref.uid]  # nothing of migdra's left: record dropped
    assert report.kept == ()
    assert [i for i in node.instances() if (i[0], i[1]) in foreign | operator] == theirs
    assert service.checkpoint.owned().instances == set()

    retry = service.prepare([ref])[ref.uid]  # kubelet retries: a clean, permanent-until-freed error
    assert f"is occupied by GPU instance {operator_gi}" in retry.error
    assert "that migdra did not create" in retry.error
    assert [i for i in node.instances() if (i[0], i[1]) in foreign | operator] == theirs
    assert migdra_instances(node, foreign | operator) == []
    assert service.checkpoint.owned().instances == set()

    # The claim is not blocked for ever: once the operator frees the placement, the next retry works.
    gpu = node.gpu_uuid(0)
    for ci in node.nvml.gpu_instance(gpu, operator_gi).compute_instances:
        node.nvml.destroy_compute_instance(gpu, operator_gi, ci.compute_instance_id)
    node.nvml.destroy_gpu_instance(gpu, operator_gi)
    assert service.prepare([ref])[ref.uid].error == ""
    assert migdra_instances(node, foreign) == sorted(EXPECTED)
    assert service.unprepare([ref])[ref.uid].error == ""
    assert migdra_instances(node, foreign) == []


@pytest.mark.parametrize("with_compute_instance", [True, False], ids=["gi-and-ci", "bare-gi"])
def test_the_remaining_window_a_crash_between_the_recorded_request_and_the_recorded_gi_id(
    node: Node, with_compute_instance: bool
) -> None:
    """docs/prepare.md §7, "The window that remains": killed after the GI request was recorded, before
    NVML created it; meanwhile an operator creates the allocated profile at the allocated placement.
    Recovery cannot tell it from migdra's own unrecorded GI unless it holds a compute instance (migdra
    records the GI ID before it creates one): a GI with a CI survives; an *empty* one is destroyed."""
    foreign = foreign_instances(node)
    ref = node.claim("requested-then-operator", [result(DEVICE_A, request="a"), result(DEVICE_B, request="b")])
    child = run_child(node, [ref], crash_at="after-checkpoint-requested")
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    assert migdra_instances(node, foreign) == []
    recorded = checkpoint_devices(node, ref)
    # GPU 0 held the operator's 1g.10gb (GI 7) when the request was recorded; B was never reached.
    assert [(d.get("gpuInstancesBefore"), d.get("gpuInstanceID")) for d in recorded] == [([7], None), (None, None)]

    operator_gi = operator_creates(node, with_compute_instance=with_compute_instance)
    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.rolled_back] == [ref.uid]
    survivors = {(gpu, gi) for gpu, gi, *_ in node.instances()}
    assert ((0, operator_gi) in survivors) is with_compute_instance
    assert foreign <= survivors
    assert migdra_instances(node, foreign | {(0, operator_gi)}) == []


def test_a_crash_after_the_gpu_instance_id_is_recorded_destroys_exactly_that_gpu_instance(node: Node) -> None:
    foreign = foreign_instances(node)
    ref = node.claim("recorded-gi", [result(DEVICE_A)])
    child = run_child(node, [ref], crash_at="after-checkpoint-gpu-instance")
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    (device,) = checkpoint_devices(node, ref)
    assert (device["gpuInstanceID"], device.get("computeInstanceID")) == (5, None)
    assert migdra_instances(node, foreign) == [(0, 5, 15, 4, -1)]

    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.rolled_back] == [ref.uid]
    assert migdra_instances(node, foreign) == []
    assert len(node.instances()) == 2


def test_unprepare_survives_kill_9_between_compute_and_gpu_instance_destroy(node: Node) -> None:
    foreign = foreign_instances(node)
    ref = node.claim("crashy-unprepare", [result(DEVICE_A, request="a")])
    faults = {"rules": [{"symbol": "nvmlComputeInstanceDestroy", "nth": 1, "action": "kill_after"}]}
    child = run_child(node, [ref], faults=faults, unprepare=True)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    assert migdra_instances(node, foreign) == [(0, 5, 15, 4, -1)]  # the GI is left without its CI

    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.rolled_back] == [ref.uid]  # CI gone: does not verify
    assert migdra_instances(node, foreign) == []
    assert service.unprepare([ref])[ref.uid].error == ""  # kubelet's retry: already done
    assert len(node.instances()) == 2


def test_a_restarted_plugin_adopts_verified_claims_and_rewrites_a_missing_spec(node: Node) -> None:
    service = node.service()
    ref = node.claim("adopted", [result(DEVICE_A)])
    first = service.prepare([ref])[ref.uid]
    service.close()
    spec_path(node.cdi_dir, DRIVER, ref.uid).unlink()

    restarted = node.service(start=False)
    report = restarted.start()
    assert [r.claim_uid for r in report.adopted] == [ref.uid]
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    assert restarted.checkpoint.owned().instances == {(node.gpu_uuid(0), 5)}
    mutations = node.nvml_mutations()
    assert restarted.prepare([ref])[ref.uid] == first
    assert node.nvml_mutations() == mutations  # verified against NVML, nothing created


def test_a_record_that_does_not_verify_is_rolled_back_but_a_stranger_at_its_placement_survives(node: Node) -> None:
    """Someone destroyed our instance and created their own at the same placement while we were down."""
    service = node.service()
    ref = node.claim("replaced", [result(DEVICE_A)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    service.close()
    gpu = node.gpu_uuid(0)
    node.nvml.destroy_compute_instance(gpu, 5, 0)
    node.nvml.destroy_gpu_instance(gpu, 5)
    stranger_gi, stranger_uuid = node.foreign_instance(0, 15, 4, 2)

    restarted = node.service(start=False)
    report = restarted.start()
    assert [r.claim_uid for r in report.rolled_back] == [ref.uid]
    assert node.instances() == [(0, stranger_gi, 15, 4, [(0, 7, stranger_uuid)])]
    assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    assert restarted.checkpoint.owned().instances == set()
    assert restarted.flush_reports()
    assert "devices" not in support.read_claim_json(node.api_client, ref)["status"]


def test_a_corrupt_checkpoint_refuses_to_start_and_destroys_nothing(node: Node) -> None:
    service = node.service()
    ref = node.claim("corrupt", [result(DEVICE_A)])
    assert service.prepare([ref])[ref.uid].error == ""
    service.close()
    record = node.record_path(ref.uid)
    record.write_text(record.read_text().replace('"gpuInstanceID": 5', '"gpuInstanceID": 6'))
    before = node.instances()

    with pytest.raises(CheckpointError, match=f"{record} is corrupt: checksum"):
        node.service()
    assert node.instances() == before
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).exists()


def test_a_checkpoint_of_another_boot_is_discarded_and_foreign_looking_instances_are_left(node: Node) -> None:
    service = node.service()
    ref = node.claim("rebooted", [result(DEVICE_A)])
    assert service.prepare([ref])[ref.uid].error == ""
    service.close()
    before = node.instances()

    after_reboot = node.service(start=False, read_boot_id=lambda: "another-boot")
    report = after_reboot.start()
    assert [r.claim_uid for r in report.discarded] == [ref.uid]
    assert after_reboot.checkpoint.owned().instances == set()
    assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    assert node.instances() == before  # no record names them any more: never destroyed


def test_orphan_spec_files_of_this_driver_are_removed_and_others_kept(node: Node) -> None:
    node.cdi_dir.mkdir(parents=True)
    orphan = spec_path(node.cdi_dir, DRIVER, "9f0e-orphan")
    orphan.write_text("{}")
    other_vendor = node.cdi_dir / "nvidia.com-gpu.json"
    other_vendor.write_text("{}")
    node.service()
    assert not orphan.exists()
    assert other_vendor.exists()
