"""PrepareService against the simulated NVML and the local API server (official client).

Idempotency, repeated devices, parallelism across GPUs, per-claim errors, occupied placements, the
SM check of compute instances, busy devices on unprepare, admin access, whole GPUs and CDI files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kubelet.calls import ClaimRef, PrepareResult
from dra_driver.mig.catalog import Placement
from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.types import ComputeInstanceInfo, ComputeInstanceProfileInfo, GpuInstanceInfo
from kubeletplugin.prepare import claim_files as claim_files_module
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.metadata import METADATA_DIR
from kubeletplugin.settings import PrepareSettings
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, Node, mig_config, opaque, read_only_directory, result, simulated_node

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-40GB"
ONE_G_20 = "gpu-0-mig-1g20gb-15-6"  # H100 1g.20gb at 6:2: CI profile 7, 26 SMs


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as simulated:
        yield simulated


def spec_of(node: Node, ref: ClaimRef) -> dict[str, Any]:
    return json.loads(spec_path(node.cdi_dir, DRIVER, ref.uid).read_text())


def test_second_prepare_returns_the_same_devices_and_changes_nothing(node: Node) -> None:
    service = node.service()
    ref = node.claim("idempotent", [result(ONE_G_20)])
    first = service.prepare([ref])[ref.uid]
    assert first.error == ""
    instances = node.instances()
    mutations = node.nvml_mutations()

    again = service.prepare([ref])[ref.uid]
    assert again == first
    assert node.nvml_mutations() == mutations  # the record is verified against NVML: reads only
    assert node.instances() == instances


def test_a_device_listed_twice_is_one_instance_serving_both_requests(node: Node) -> None:
    service = node.service()
    ref = node.claim("twice", [result(ONE_G_20, request="train"), result(ONE_G_20, request="eval")])
    prepared = service.prepare([ref])[ref.uid]
    assert prepared.error == ""
    (device,) = prepared.devices
    assert device.request_names == ("train", "eval")
    assert device.cdi_device_ids == (f"{DRIVER}/claim={ref.uid}-{ONE_G_20}",)
    assert len(node.instances()) == 1


class MeetingNvml(Nvml):
    """GPU-instance creation that proves creations on different GPUs overlap, without timing them.

    The first creation on each GPU of ``gpus`` holds until the first creation on every one of them has
    begun, at most ``timeout`` seconds.  If creations were serialised across GPUs, the other GPU's could
    not begin while this one holds, and ``met`` records False for it.
    """

    def __init__(self, gpus: Collection[str], timeout: float = 30.0) -> None:
        super().__init__()
        self.timeout = timeout
        self.met: dict[str, bool] = {}
        self._gpus = frozenset(gpus)
        self._begun: set[str] = set()
        self._all_begun = threading.Event()
        self._lock = threading.Lock()

    def create_gpu_instance(self, gpu_uuid: str, profile_id: int, placement: Placement) -> GpuInstanceInfo:
        with self._lock:
            first_on_this_gpu = gpu_uuid in self._gpus and gpu_uuid not in self._begun
            if first_on_this_gpu:
                self._begun.add(gpu_uuid)
                if self._begun == self._gpus:
                    self._all_begun.set()
        if first_on_this_gpu:
            self.met[gpu_uuid] = self._all_begun.wait(self.timeout)
        return super().create_gpu_instance(gpu_uuid, profile_id, placement)


def test_claims_of_an_idle_gpu_do_not_queue_behind_a_busy_one(api_server: KubeApiServer, tmp_path: Path) -> None:
    """Seven claims on GPU 0 listed before one on GPU 1: GPU 1's instance is made while GPU 0's first is."""
    with simulated_node(tmp_path, [H100, H100], api=api_server) as node:
        gpus = [node.gpu_uuid(0), node.gpu_uuid(1)]
        meeting = MeetingNvml(gpus)
        meeting.init()
        try:
            service = node.service(nvml=meeting, workers=PrepareSettings().prepare_workers)
            busy = [node.claim(f"busy-{s}", [result(f"gpu-0-mig-1g10gb-19-{s}")]) for s in range(7)]
            idle = node.claim("idle", [result("gpu-1-mig-1g10gb-19-6")])
            results = service.prepare([*busy, idle])
            assert meeting.met == dict.fromkeys(gpus, True), "GPU 1's creation waited for GPU 0's"
            assert all(r.error == "" for r in results.values())
        finally:
            meeting.shutdown()


@pytest.mark.parametrize("calls", ["one-call", "concurrent-calls"])
def test_claims_on_different_gpus_are_created_in_parallel(
    api_server: KubeApiServer, tmp_path: Path, calls: str
) -> None:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as node:
        gpus = [node.gpu_uuid(0), node.gpu_uuid(1)]
        meeting = MeetingNvml(gpus)
        meeting.init()
        try:
            service = node.service(nvml=meeting)
            first = node.claim(f"gpu0-{calls}", [result("gpu-0-mig-3g40gb-9-0")])
            second = node.claim(f"gpu1-{calls}", [result("gpu-1-mig-3g40gb-9-0")])
            if calls == "one-call":
                results = service.prepare([first, second])
            else:
                results = {}
                threads = [
                    threading.Thread(target=lambda r=ref: results.update(service.prepare([r])))
                    for ref in (first, second)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
            assert meeting.met == dict.fromkeys(gpus, True), "one GPU's creation waited for the other's"
            assert [results[r.uid].error for r in (first, second)] == ["", ""]
        finally:
            meeting.shutdown()


def test_one_bad_claim_never_fails_the_others(node: Node) -> None:
    service = node.service()
    good = node.claim("good", [result("gpu-1-mig-1g10gb-19-0")])
    real = node.claim("renamed", [result("gpu-0-mig-1g10gb-19-1")])
    wrong_uid = ClaimRef(real.namespace, real.name, "00000000-0000-0000-0000-000000000000")
    other_pool = node.claim("other-pool", [result("gpu-0-mig-1g10gb-19-2", pool="node-b")])
    no_gpu = node.claim("no-gpu", [result("gpu-7-mig-1g10gb-19-0")])
    illegal = node.claim("illegal-start", [result("gpu-0-mig-1g20gb-15-1")])
    bad_config = node.claim(
        "bad-config",
        [result("gpu-0-mig-1g10gb-19-3")],
        [opaque(mig_config(A="b")), opaque({**mig_config(), "sharing": {"strategy": "MPS"}})],
    )
    results = service.prepare([good, wrong_uid, other_pool, no_gpu, illegal, bad_config])

    assert results[good.uid].error == ""
    assert results[wrong_uid.uid].error == (
        f"claim default/renamed has UID {real.uid}, kubelet asked for 00000000-0000-0000-0000-000000000000"
    )
    assert results[other_pool.uid].error.startswith("claim default/other-pool: status.allocation.devices.results[0]")
    assert "pool 'node-b'" in results[other_pool.uid].error
    assert results[no_gpu.uid].error.startswith("claim default/no-gpu: device gpu-7-mig-1g10gb-19-0: no GPU with minor")
    assert results[illegal.uid].error.startswith(
        "claim default/illegal-start: device gpu-0-mig-1g20gb-15-1: start 1 is not a legal placement of 1g.20gb"
    )
    assert results[bad_config.uid].error == (
        "claim default/bad-config: config[1].opaque.parameters.sharing: extra fields not permitted"
    )
    # Only the good claim created anything.
    assert [(gpu, start) for gpu, _, _, start, _ in node.instances()] == [(1, 0)]
    assert service.checkpoint.owned().instances == {(node.gpu_uuid(1), 7)}


def test_a_claim_with_several_problems_names_every_one_in_one_error_and_creates_nothing(node: Node) -> None:
    """What only the node can know (its GPUs, legal placements) and what the admission policy may have
    missed (a cluster without the chart's policy): one failed prepare says everything that must change."""
    service = node.service()
    ref = node.claim(
        "everything-wrong",
        [
            result("gpu-7-mig-1g10gb-19-0"),
            result("gpu-0-mig-1g20gb-15-1", request="second"),
            result("gpu-1-mig-1g10gb-19-0"),
        ],
        [opaque({"apiVersion": "gpu.migdra.io/v9", "kind": "MigDeviceConfig", "env": {"MIGDRA_X": "1"}})],
    )
    error = service.prepare([ref])[ref.uid].error
    assert error.startswith("claim default/everything-wrong: config[0].opaque.parameters.apiVersion: unsupported")
    for problem in (
        "config[0].opaque.parameters.env.MIGDRA_X: reserved",
        "device gpu-7-mig-1g10gb-19-0: no GPU with minor",
        "device gpu-0-mig-1g20gb-15-1: start 1 is not a legal placement of 1g.20gb",
    ):
        assert problem in error, problem
    assert "gpu-1-mig-1g10gb-19-0" not in error  # the good device is not a problem
    assert node.instances() == []  # nothing is created while anything is wrong


def test_other_drivers_results_are_ignored(node: Node) -> None:
    service = node.service()
    ref = node.claim(
        "mixed",
        [result("eth0", request="nic", driver="net.example.com", pool="rack-1"), result("gpu-0-mig-1g10gb-19-0")],
    )
    prepared = service.prepare([ref])[ref.uid]
    assert prepared.error == ""
    assert [d.device_name for d in prepared.devices] == ["gpu-0-mig-1g10gb-19-0"]


@pytest.mark.parametrize(
    ("foreign", "device"),
    [
        pytest.param((19, 6, 1), "gpu-0-mig-1g10gb-19-6", id="same-placement"),
        pytest.param((19, 5, 1), "gpu-0-mig-2g20gb-14-4", id="overlapping-placement"),
    ],
)
def test_a_placement_held_by_a_foreign_instance_is_an_error_and_it_survives(
    node: Node, foreign: tuple[int, int, int], device: str
) -> None:
    profile_id, start, size = foreign
    foreign_gi, foreign_uuid = node.foreign_instance(0, profile_id, start, size)
    service = node.service()
    ref = node.claim("occupied", [result(device)])
    error = service.prepare([ref])[ref.uid].error
    assert error.startswith(f"claim default/occupied: device {device}: placement")
    assert f"occupied by GPU instance {foreign_gi}" in error
    assert "that migdra did not create; migdra never falls back to another placement" in error
    assert node.instances() == [(0, foreign_gi, profile_id, start, [(0, 0, foreign_uuid)])]
    assert service.checkpoint.owned().instances == set()

    # After a restart the failed claim is not recorded, so nothing is rolled back either.
    service.close()
    node.service()
    assert node.instances() == [(0, foreign_gi, profile_id, start, [(0, 0, foreign_uuid)])]


def test_an_occupied_placement_reported_by_nvml_destroys_nothing(api_server: KubeApiServer, tmp_path: Path) -> None:
    """The placement was free when checked, but NVML refuses the create (someone was faster)."""
    faults = {
        "rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 2, "error": "InsufficientResources"}]
    }
    with simulated_node(tmp_path, [H100], api=api_server, faults=faults) as node:
        foreign_gi, foreign_uuid = node.foreign_instance(0, 19, 0, 1)  # the first create call
        service = node.service()
        ref = node.claim("raced", [result(ONE_G_20)])
        error = service.prepare([ref])[ref.uid].error
        assert "placement 6:2 of 1g.20gb is occupied" in error
        assert "migdra never falls back to another placement" in error
        assert node.instances() == [(0, foreign_gi, 19, 0, [(0, 0, foreign_uuid)])]
        assert service.checkpoint.owned().instances == set()


class ShortchangingNvml(Nvml):
    """A driver that creates compute instances with fewer SMs than the GI profile advertises."""

    def create_compute_instance(
        self, gpu_uuid: str, gpu_instance_id: int, ci_profile_index: int
    ) -> ComputeInstanceInfo:
        created = super().create_compute_instance(gpu_uuid, gpu_instance_id, ci_profile_index)
        return dataclasses.replace(created, multiprocessor_count=created.multiprocessor_count - 10)


class NoFullProfileNvml(Nvml):
    """A GI whose CI profiles all deliver fewer SMs than the GI profile (NVIDIA #1454)."""

    def compute_instance_profiles(self, gpu_uuid: str, gpu_instance_id: int) -> list[ComputeInstanceProfileInfo]:
        return [p for p in super().compute_instance_profiles(gpu_uuid, gpu_instance_id) if p.multiprocessor_count < 26]


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        pytest.param(
            ShortchangingNvml,
            "1g.20gb advertises 26 SMs, but compute instance 0 (CI profile 7) of GI 6 delivers 16",
            id="ci-delivers-fewer-sms",
        ),
        pytest.param(
            NoFullProfileNvml,
            "1g.20gb advertises 26 SMs, but no compute-instance profile of GI 6 delivers 26 (offered: 0 (16 SMs))",
            id="no-ci-profile-covers-the-gi",
        ),
    ],
)
def test_a_compute_instance_short_of_sms_fails_loudly_and_leaves_nothing(
    node: Node, backend: type[Nvml], message: str
) -> None:
    nvml = backend()
    nvml.init()
    try:
        service = node.service(nvml=nvml)
        ref = node.claim("short", [result(ONE_G_20)])
        error = service.prepare([ref])[ref.uid].error
        assert error == f"claim default/short: device {ONE_G_20}: GPU {node.gpu_uuid(0)} {message}"
        assert node.instances() == []
        assert service.checkpoint.owned().instances == set()
        assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    finally:
        nvml.shutdown()


def test_a_failed_device_rolls_back_the_claims_other_devices(api_server: KubeApiServer, tmp_path: Path) -> None:
    faults = {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 2, "error": "Unknown"}]}
    with simulated_node(tmp_path, [H100, H100], api=api_server, faults=faults) as node:
        service = node.service()
        ref = node.claim("half", [result("gpu-1-mig-1g10gb-19-0", request="a"), result(ONE_G_20, request="b")])
        error = service.prepare([ref])[ref.uid].error
        assert error.startswith(
            f"claim default/half: device {ONE_G_20}: GPU {node.gpu_uuid(0)}: creating the GPU instance"
        )
        assert node.instances() == []  # the first device's instance was destroyed again
        assert service.checkpoint.owned().instances == set()
        assert service.prepare([ref])[ref.uid].error == ""  # kubelet's retry
        assert len(node.instances()) == 2


def test_a_rollback_that_fails_is_recorded_and_finished_by_the_next_prepare(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    """NVIDIA #1452: GI created, CI failed, and the GI could not be destroyed -- it must not leak."""
    faults = {
        "rules": [
            {"symbol": "nvmlGpuInstanceCreateComputeInstance", "nth": 1, "error": "Unknown"},
            {"symbol": "nvmlGpuInstanceDestroy", "nth": 1, "error": "InUse"},
        ]
    }
    with simulated_node(tmp_path, [H100], api=api_server, faults=faults) as node:
        service = node.service()
        ref = node.claim("leaky", [result(ONE_G_20)])
        error = service.prepare([ref])[ref.uid].error
        assert "creating the compute instance failed" in error
        assert "rolling back GI 6 failed" in error
        assert [(gi, cis) for _, gi, _, _, cis in node.instances()] == [(6, [])]
        assert service.checkpoint.owned().instances == {(node.gpu_uuid(0), 6)}  # still ours, still published as ours

        prepared = service.prepare([ref])[ref.uid]
        assert prepared.error == ""
        ((_, gi, profile, start, [(_, ci_profile, _)]),) = node.instances()
        assert (gi, profile, start, ci_profile) == (6, 15, 6, 7)


def test_busy_device_fails_unprepare_until_released(node: Node) -> None:
    service = node.service()
    ref = node.claim("busy", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    ((_, gi, _, _, [(_, _, mig_uuid)]),) = node.instances()
    sim.set_busy(node.state_path, mig_uuid, True)

    error = service.unprepare([ref])[ref.uid].error
    assert error.startswith(
        f"claim default/busy: device {ONE_G_20}: GPU {node.gpu_uuid(0)}: the MIG device is still in use"
    )
    assert [i[1] for i in node.instances()] == [gi]
    assert service.checkpoint.owned().instances == {(node.gpu_uuid(0), gi)}
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).exists()

    sim.set_busy(node.state_path, mig_uuid, False)
    assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == []
    assert service.checkpoint.owned().instances == set()
    assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    assert service.unprepare([ref])[ref.uid].error == ""  # idempotent


@pytest.mark.parametrize("read_only", ["cdi", "device-metadata"])
def test_a_read_only_directory_fails_prepare_in_one_line_naming_the_file_and_rolls_the_instance_back(
    node: Node, read_only: str
) -> None:
    """The CDI directory (or the device metadata directory) on a read-only mount -- a real EROFS, which
    root meets too (``read_only_directory``).  The claim's error is one line naming the claim, the file
    and the reason, as every per-claim error is (never "unexpected error ...: OSError(30, ...)"); the
    MIG instance this prepare created is destroyed and nothing of the claim is recorded or left on
    disk, as for any failed prepare; once the directory is writable, kubelet's retry prepares it."""
    service = node.service()
    metadata_dir = node.state_dir / METADATA_DIR
    for directory in (node.cdi_dir, metadata_dir):
        directory.mkdir(parents=True, exist_ok=True)
    ref = node.claim("read-only", [result(ONE_G_20)])
    spec = spec_path(node.cdi_dir, DRIVER, ref.uid)
    created = node.library.faults.calls("nvmlDeviceCreateGpuInstanceWithPlacement")
    destroyed = node.library.faults.calls("nvmlGpuInstanceDestroy")

    with read_only_directory(node.cdi_dir if read_only == "cdi" else metadata_dir):
        error = service.prepare([ref])[ref.uid].error
    if read_only == "cdi":
        assert error == f"claim default/read-only: CDI spec {spec}: Read-only file system (EROFS)"
    else:
        assert error == (
            f"claim default/read-only: device metadata {metadata_dir / 'default_read-only'}: "
            "Read-only file system (EROFS)"
        )
    assert node.library.faults.calls("nvmlDeviceCreateGpuInstanceWithPlacement") == created + 1
    assert node.library.faults.calls("nvmlGpuInstanceDestroy") == destroyed + 1
    assert node.instances() == []
    assert service.checkpoint.get(ref.uid) is None
    assert service.checkpoint.owned().instances == set()
    assert not spec.exists()
    assert list(metadata_dir.iterdir()) == []

    assert service.prepare([ref])[ref.uid].error == ""  # kubelet's retry, the directory writable again
    ((_, _, profile, start, _),) = node.instances()
    assert (profile, start) == (15, 6)
    assert spec.exists()


@pytest.mark.parametrize(
    "raised",
    [RuntimeError("boom"), ConnectionResetError(104, "Connection reset by peer")],
    ids=["bug", "socket-oserror"],
)
def test_an_error_nobody_foresaw_is_still_an_unexpected_per_claim_error(
    node: Node, monkeypatch: pytest.MonkeyPatch, raised: Exception
) -> None:
    """Only the file system's OSErrors are named as a node file; a socket's (an OSError too) or a bug
    stays "unexpected", with its repr, and the instance is rolled back all the same."""

    def failing(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(claim_files_module, "write_claim_spec", failing)
    ref = node.claim("unforeseen", [result(ONE_G_20)])
    error = node.service().prepare([ref])[ref.uid].error
    assert error == f"claim default/unforeseen: unexpected error while preparing: {raised!r}"
    assert node.instances() == []


def test_cdi_spec_has_the_devices_nodes_config_env_and_is_deleted_on_unprepare(node: Node) -> None:
    caps = node.proc_root / "driver/nvidia/capabilities/gpu0/mig/gi6"
    (caps / "ci0").mkdir(parents=True)
    (caps / "access").write_text("DeviceFileMinor: 1001\nDeviceFileMode: 292\n")
    (caps / "ci0" / "access").write_text("DeviceFileMinor: 1002\nDeviceFileMode: 292\n")
    (node.proc_root / "devices").write_text("Character devices:\n195 nvidia-frontend\n508 nvidia-caps\n")
    service = node.service()
    ref = node.claim(
        "cdi",
        [result(ONE_G_20, request="train"), result("gpu-1-mig-1g10gb-19-3", request="eval")],
        [
            opaque(mig_config(NCCL_DEBUG="WARN", TEAM="ml"), source="FromClass"),
            opaque(mig_config(NCCL_DEBUG="INFO"), requests=["train"]),
        ],
    )
    prepared = service.prepare([ref])[ref.uid]
    assert prepared.error == ""
    spec = spec_of(node, ref)
    assert spec["kind"] == "gpu.migdra.io/claim"
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert set(by_name) == {f"{ref.uid}-{ONE_G_20}", f"{ref.uid}-gpu-1-mig-1g10gb-19-3"}
    train = by_name[f"{ref.uid}-{ONE_G_20}"]
    assert train["deviceNodes"] == [
        {"path": "/dev/nvidia0"},
        {"path": "/dev/nvidia-caps/nvidia-cap1001", "type": "c", "major": 508, "minor": 1001, "fileMode": 292},
        {"path": "/dev/nvidia-caps/nvidia-cap1002", "type": "c", "major": 508, "minor": 1002, "fileMode": 292},
    ]
    eval_ = by_name[f"{ref.uid}-gpu-1-mig-1g10gb-19-3"]
    # no capability files for GPU 1: the formula (GI 10 = 7 + start 3): 3 + 135 + 90 = 228, CI 0 = 229
    assert eval_["deviceNodes"] == [
        {"path": "/dev/nvidia1"},
        {"path": "/dev/nvidia-caps/nvidia-cap228", "type": "c", "major": 508, "minor": 228},
        {"path": "/dev/nvidia-caps/nvidia-cap229", "type": "c", "major": 508, "minor": 229},
    ]
    ((_, _, _, _, [(_, _, train_uuid)]), (_, _, _, _, [(_, _, eval_uuid)])) = node.instances()
    assert train["env"] == [
        "MIGDRA_GPU_UUID=" + node.gpu_uuid(0),
        f"MIGDRA_MIG_UUID={train_uuid}",
        "NCCL_DEBUG=INFO",
        "TEAM=ml",
    ]
    assert eval_["env"] == [
        "MIGDRA_GPU_UUID=" + node.gpu_uuid(1),
        f"MIGDRA_MIG_UUID={eval_uuid}",
        "NCCL_DEBUG=WARN",
        "TEAM=ml",
    ]
    assert spec["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=void",
        f"MIGDRA_MIG_UUIDS={train_uuid},{eval_uuid}",
    ]
    assert {d.cdi_device_ids[0] for d in prepared.devices} == {f"gpu.migdra.io/claim={name}" for name in by_name}

    assert service.unprepare([ref])[ref.uid].error == ""
    assert list(node.cdi_dir.iterdir()) == []


def test_whole_gpu_needs_nothing_created(api_server: KubeApiServer, tmp_path: Path) -> None:
    with simulated_node(tmp_path, [A100], api=api_server, mig_enabled=False) as node:
        service = node.service()
        ref = node.claim("whole", [result("gpu-0")])
        prepared = service.prepare([ref])[ref.uid]
        assert prepared.error == ""
        assert node.instances() == []
        (device,) = spec_of(node, ref)["devices"]
        assert device["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
        mig = node.claim("mig-on-whole", [result("gpu-0-mig-1g5gb-19-0")])
        assert "MIG mode is disabled on GPU" in service.prepare([mig])[mig.uid].error
        assert service.unprepare([ref])[ref.uid].error == ""


def test_admin_access_creates_nothing_and_sees_what_exists(node: Node) -> None:
    service = node.service()
    owner = node.claim("owner", [result(ONE_G_20)])
    assert service.prepare([owner])[owner.uid].error == ""
    before = node.instances()
    ((_, gi, _, _, [(_, _, mig_uuid)]),) = before

    admin = node.claim("admin", [result(ONE_G_20, adminAccess=True), result("gpu-1-mig-1g10gb-19-0", adminAccess=True)])
    prepared = service.prepare([admin])[admin.uid]
    assert prepared.error == ""
    assert node.instances() == before
    by_name = {d["name"]: d["containerEdits"] for d in spec_of(node, admin)["devices"]}
    assert by_name[f"{admin.uid}-{ONE_G_20}"]["deviceNodes"] == [
        {"path": "/dev/nvidia0"},
        {"path": f"/dev/nvidia-caps/nvidia-cap{3 + 9 * gi}"},
        {"path": f"/dev/nvidia-caps/nvidia-cap{3 + 9 * gi + 1}"},
    ]
    assert f"MIGDRA_MIG_UUID={mig_uuid}" in by_name[f"{admin.uid}-{ONE_G_20}"]["env"]
    assert by_name[f"{admin.uid}-gpu-1-mig-1g10gb-19-0"]["deviceNodes"] == [{"path": "/dev/nvidia1"}]

    assert service.unprepare([admin])[admin.uid].error == ""
    assert node.instances() == before  # the owner's instance is never the admin claim's to destroy
    assert service.checkpoint.owned().instances == {(node.gpu_uuid(0), gi)}


@pytest.mark.parametrize("field", ["namespace", "name", "uid"])
def test_a_claim_sent_with_an_empty_field_fails_in_one_line_naming_the_field(node: Node, field: str) -> None:
    service = node.service()
    real = node.claim("named", [result(ONE_G_20)])
    ref = dataclasses.replace(real, **{field: ""})
    for error in (service.prepare([ref])[ref.uid].error, service.unprepare([ref])[ref.uid].error):
        assert error.startswith(f"kubelet sent a claim with an empty {field} ")
        assert "\n" not in error
    assert node.instances() == []


def test_a_claim_uid_that_could_name_a_file_elsewhere_is_refused(node: Node) -> None:
    service = node.service()
    ref = ClaimRef("default", "escape", "../../etc/x")
    error = service.unprepare([ref])[ref.uid].error
    assert error.startswith("kubelet sent claim default/escape with uid '../../etc/x', which is not a Kubernetes UID")


def test_a_claim_with_only_other_drivers_devices_succeeds_and_says_so(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    service = node.service()
    ref = node.claim("nics-only", [result("eth0", request="nic", driver="net.example.com", pool="rack-1")])
    with caplog.at_level(logging.INFO, logger="kubeletplugin.prepare.claim_path"):
        prepared = service.prepare([ref])[ref.uid]
    assert prepared == PrepareResult()
    said = [r.getMessage() for r in caplog.records if ref.uid in r.getMessage()]
    assert said == [
        f"claim default/nics-only (UID {ref.uid}) has no device of {DRIVER} (allocated by net.example.com only): "
        "nothing to prepare"
    ]


def replace_behind_migdras_back(node: Node, *, recreate: bool) -> tuple[int, str] | None:
    """An operator destroys migdra's instance on GPU 0 (and creates the same profile at the same place)."""
    gpu = node.gpu_uuid(0)
    ((_, gi, _, _, [(ci, _, _)]),) = node.instances()
    node.nvml.destroy_compute_instance(gpu, gi, ci)
    node.nvml.destroy_gpu_instance(gpu, gi)
    return node.foreign_instance(0, 15, 6, 2) if recreate else None


def test_re_preparing_a_claim_whose_instance_an_operator_replaced_fails_cleanly_and_keeps_theirs(node: Node) -> None:
    service = node.service()
    ref = node.claim("replaced", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    replacement = replace_behind_migdras_back(node, recreate=True)
    assert replacement is not None
    theirs = node.instances()

    error = service.prepare([ref])[ref.uid].error  # kubelet prepares again (a restarted pod, say)
    assert f"is occupied by GPU instance {replacement[0]}" in error
    assert "that migdra did not create" in error
    assert node.instances() == theirs  # same GI ID, profile and placement, but not migdra's: left alone
    assert service.checkpoint.owned().instances == set()
    assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()  # no stale MIG UUID for the runtime


def test_re_preparing_a_claim_whose_instance_an_operator_destroyed_creates_it_again(node: Node) -> None:
    service = node.service()
    ref = node.claim("destroyed", [result(ONE_G_20)])
    first = service.prepare([ref])[ref.uid]
    ((_, _, _, _, [(_, _, old_uuid)]),) = node.instances()
    replace_behind_migdras_back(node, recreate=False)

    again = service.prepare([ref])[ref.uid]
    assert again == first  # same device and CDI IDs ...
    ((_, _, _, start, [(_, _, new_uuid)]),) = node.instances()
    assert start == 6
    assert new_uuid != old_uuid  # ... backed by a new instance, and the spec names it
    assert f"MIGDRA_MIG_UUID={new_uuid}" in spec_of(node, ref)["devices"][0]["containerEdits"]["env"]
