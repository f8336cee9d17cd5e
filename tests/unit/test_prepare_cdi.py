"""CDI specs: names, device nodes (formula and procfs minors), environment, atomic writes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from kubeletplugin.prepare.cdi import (
    CdiDevice,
    CommonEdits,
    DeviceNode,
    build_cdi_spec,
    claim_uid_of_spec,
    compute_cap_minor,
    compute_cdi_device_id,
    delete_cdi_spec,
    list_cdi_spec_claims,
    read_caps_major,
    read_cdi_spec_device_names,
    read_mig_device_nodes,
    spec_path,
    write_cdi_spec,
)

DRIVER = "gpu.migdra.io"
UID = "0c4f1a2e-1111-2222-3333-444455556666"


@pytest.mark.parametrize(
    ("gpu", "gi", "ci", "minor"),
    [
        pytest.param(0, 0, None, 3, id="gpu0-gi0"),
        pytest.param(0, 0, 0, 4, id="gpu0-gi0-ci0"),
        pytest.param(0, 1, 2, 15, id="user-guide-gi1-ci2"),
        pytest.param(3, 6, None, 462, id="gpu3-gi6"),
        pytest.param(31, 14, 7, 4322, id="last-listed"),
    ],
)
def test_cap_minor_formula_matches_mig_minors(gpu: int, gi: int, ci: int | None, minor: int) -> None:
    assert compute_cap_minor(gpu, gi, ci) == minor


def test_mig_device_nodes_use_the_formula_without_capability_files(tmp_path: Path) -> None:
    nodes = read_mig_device_nodes(tmp_path, gpu_minor=1, gpu_instance_id=13, compute_instance_id=0, caps_major=None)
    assert [n.to_cdi() for n in nodes] == [
        {"path": "/dev/nvidia1"},
        {"path": "/dev/nvidia-caps/nvidia-cap255"},  # 3 + 135 + 9*13
        {"path": "/dev/nvidia-caps/nvidia-cap256"},
    ]


def test_mig_device_nodes_read_minors_from_capability_files(tmp_path: Path) -> None:
    gi_dir = tmp_path / "driver/nvidia/capabilities/gpu1/mig/gi13"
    (gi_dir / "ci0").mkdir(parents=True)
    (gi_dir / "access").write_text("DeviceFileMinor: 900\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (gi_dir / "ci0" / "access").write_text("DeviceFileMinor: 901\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (tmp_path / "devices").write_text(
        "Character devices:\n195 nvidia-frontend\n508 nvidia-caps\n\nBlock devices:\n  8 sd\n"
    )
    major = read_caps_major(tmp_path)
    assert major == 508
    nodes = read_mig_device_nodes(tmp_path, gpu_minor=1, gpu_instance_id=13, compute_instance_id=0, caps_major=major)
    assert [n.to_cdi() for n in nodes] == [
        {"path": "/dev/nvidia1"},
        {"path": "/dev/nvidia-caps/nvidia-cap900", "type": "c", "major": 508, "minor": 900, "fileMode": 292},
        {"path": "/dev/nvidia-caps/nvidia-cap901", "type": "c", "major": 508, "minor": 901, "fileMode": 292},
    ]


def test_spec_content() -> None:
    device = CdiDevice(
        "gpu-0-mig-1g20gb-15-6",
        (
            DeviceNode("/dev/nvidia0"),
            DeviceNode("/dev/nvidia-caps/nvidia-cap57"),
            DeviceNode("/dev/nvidia-caps/nvidia-cap58"),
        ),
        {"MIGDRA_MIG_UUID": "MIG-a", "NCCL_DEBUG": "INFO"},
    )
    spec = build_cdi_spec(DRIVER, UID, [device], ["MIG-a"])
    assert spec == {
        "cdiVersion": "0.5.0",  # the device name starts with a digit
        "kind": "gpu.migdra.io/claim",
        "devices": [
            {
                "name": f"{UID}-gpu-0-mig-1g20gb-15-6",
                "containerEdits": {
                    "env": ["MIGDRA_MIG_UUID=MIG-a", "NCCL_DEBUG=INFO"],
                    "deviceNodes": [
                        {"path": "/dev/nvidia0"},
                        {"path": "/dev/nvidia-caps/nvidia-cap57"},
                        {"path": "/dev/nvidia-caps/nvidia-cap58"},
                    ],
                },
            }
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "MIGDRA_MIG_UUIDS=MIG-a"],
            "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia-uvm-tools"}],
        },
    }
    assert (
        compute_cdi_device_id(DRIVER, UID, "gpu-0-mig-1g20gb-15-6")
        == f"gpu.migdra.io/claim={UID}-gpu-0-mig-1g20gb-15-6"
    )


@pytest.mark.parametrize(
    ("uid", "common", "version"),
    [
        pytest.param("abc", CommonEdits(), "0.3.0", id="letter"),
        pytest.param("9bc", CommonEdits(), "0.5.0", id="digit"),
        pytest.param("abc", CommonEdits(dev_root="/srv/dev-root"), "0.5.0", id="host-path"),
        pytest.param("abc", CommonEdits(device_nodes=False, dev_root="/srv/dev-root"), "0.3.0", id="no-nodes"),
    ],
)
def test_cdi_version_is_the_lowest_that_accepts_the_spec(uid: str, common: CommonEdits, version: str) -> None:
    """A device name starting with a digit and a device node's hostPath came with CDI 0.5.0: containerd's
    CDI library refuses a spec that declares less ("the spec version must be at least v0.5.0")."""
    spec = build_cdi_spec(DRIVER, uid, [CdiDevice("gpu-0", (DeviceNode("/dev/nvidia0"),))], [], common=common)
    assert spec["cdiVersion"] == version


def test_write_replaces_atomically_and_delete_is_idempotent(tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    first = build_cdi_spec(DRIVER, UID, [CdiDevice("gpu-0", (DeviceNode("/dev/nvidia0"),))], [])
    second = build_cdi_spec(DRIVER, UID, [CdiDevice("gpu-1", (DeviceNode("/dev/nvidia1"),))], [])
    path = write_cdi_spec(cdi_dir, DRIVER, UID, first)
    assert path == cdi_dir / f"gpu.migdra.io-claim_{UID}.json"
    with path.open() as old:
        write_cdi_spec(cdi_dir, DRIVER, UID, second)
        # replaced by a rename, not rewritten in place: a reader holding the old file keeps the old content
        assert os.fstat(old.fileno()).st_ino != path.stat().st_ino
        assert json.load(old) == first

    # A reader racing the replacement sees the old or the new document, never a partial one.
    seen: set[str] = set()
    stop = threading.Event()

    def read_continuously() -> None:
        while not stop.is_set():
            seen.add(json.loads(path.read_text())["devices"][0]["name"])

    reader = threading.Thread(target=read_continuously)
    reader.start()
    try:
        for _ in range(50):
            write_cdi_spec(cdi_dir, DRIVER, UID, second)
            write_cdi_spec(cdi_dir, DRIVER, UID, first)
    finally:
        stop.set()
        reader.join()
    assert seen <= {f"{UID}-gpu-0", f"{UID}-gpu-1"}
    assert sorted(os.listdir(cdi_dir)) == [path.name]  # no temporary files left behind

    assert list_cdi_spec_claims(cdi_dir, DRIVER) == {UID}
    assert delete_cdi_spec(cdi_dir, DRIVER, UID)
    assert not delete_cdi_spec(cdi_dir, DRIVER, UID)
    assert list_cdi_spec_claims(cdi_dir, DRIVER) == set()


def test_only_this_drivers_spec_files_are_recognised(tmp_path: Path) -> None:
    assert claim_uid_of_spec(spec_path(tmp_path, DRIVER, UID), DRIVER) == UID
    assert claim_uid_of_spec(tmp_path / "k8s.gpu.nvidia.com-claim_abc.json", DRIVER) is None
    assert claim_uid_of_spec(tmp_path / f".gpu.migdra.io-claim_{UID}.json.1.ab.tmp", DRIVER) is None


def test_the_devices_a_spec_names_are_read_back_and_nothing_for_a_missing_or_broken_spec(tmp_path: Path) -> None:
    """What an unprepare whose spec could not be deleted had released: its retry says so from the spec."""
    cdi_dir = tmp_path / "cdi"
    assert read_cdi_spec_device_names(cdi_dir, DRIVER, UID) == ()
    devices = [CdiDevice(name, (DeviceNode("/dev/nvidia0"),)) for name in ("gpu-0-mig-1g20gb-15-6", "gpu-1")]
    write_cdi_spec(cdi_dir, DRIVER, UID, build_cdi_spec(DRIVER, UID, devices, []))
    assert read_cdi_spec_device_names(cdi_dir, DRIVER, UID) == ("gpu-0-mig-1g20gb-15-6", "gpu-1")
    spec_path(cdi_dir, DRIVER, UID).write_text('{"devices": [')
    assert read_cdi_spec_device_names(cdi_dir, DRIVER, UID) == ()
