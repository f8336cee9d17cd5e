"""A prepared claim's CDI spec carries the driver's files, through the real prepare service and settings.

A fake driver root laid out like a GPU Operator driver container's (read here at ``<tmp>/driver-root``,
``/run/nvidia/driver`` on the host): every claim's spec mounts its libraries, binaries and firmware
read-only from host paths, runs ``nvidia-cdi-hook`` for the soname links and the ld cache, and keeps
its device nodes and ``NVIDIA_VISIBLE_DEVICES=void``; with device nodes off it has none; the spec
written again after a restart is the same.  Each spec must pass the CDI specification's rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from dra_driver.kube.client import Client
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.driver_files import load_driver_edits
from kubeletplugin.prepare.service import PrepareService, service_from_settings
from kubeletplugin.settings import PrepareSettings
from migdra_devcluster.realnode.driver_root import LIBRARIES as FAKE_LIBRARIES
from migdra_devcluster.realnode.driver_root import VERSION, build_fake_driver_root
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import BOOT_ID, DRIVER, NODE, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
DEVICES = ("gpu-0-mig-1g20gb-15-6", "gpu-0-mig-1g20gb-15-4")  # two 1g.20gb of one claim
HOST_ROOT = PurePosixPath("/run/nvidia/driver")
LIB = "/usr/lib/x86_64-linux-gnu"
RO = ["ro", "nosuid", "nodev", "bind"]
HOOK = f"{HOST_ROOT}/usr/bin/nvidia-cdi-hook"
# The CDI specification's rules (container-device-interface, pkg/cdi and specs-go) a runtime applies.
CDI_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0")
VENDOR = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
CLASS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path / "node", [H100], api=api_server) as simulated:
        yield simulated


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    root = build_fake_driver_root(tmp_path / "driver-root")
    (root / "tmp/nvidia-mps").mkdir(parents=True)  # MPS control daemon running: its pipe directory
    return root


def start_service(node: Node, driver_root: Path, **settings: Any) -> PrepareService:
    """The service as the node process builds it: settings, driver files discovered once, then from_settings."""
    prepare = PrepareSettings(
        cdi_dir=node.cdi_dir,
        state_dir=node.state_dir,
        plugin_data_dir=node.state_dir,
        proc_root=node.proc_root,
        prepare_workers=2,
        state_lock_timeout=5.0,
        driver_root=driver_root,
        host_driver_root=Path(str(HOST_ROOT)),
        **settings,
    )
    loaded = load_driver_edits(prepare, simulated=True)
    assert loaded is not None
    service = service_from_settings(
        prepare,
        nvml=node.nvml,
        client=Client(api_client=node.api_client),
        node_name=NODE,
        driver_name=DRIVER,
        read_boot_id=lambda: BOOT_ID,
        driver_edits=loaded[1],
    )
    node.services.append(service)
    service.start()
    return service


def check_cdi_rules(spec: dict[str, Any], driver_root: Path) -> None:
    """What a CDI runtime refuses a spec for, plus: every host path is a file of the driver root."""
    assert spec["cdiVersion"] in CDI_VERSIONS
    vendor, cls = spec["kind"].split("/")
    assert VENDOR.match(vendor)
    assert CLASS.match(cls)
    assert spec["devices"]
    for device in spec["devices"]:
        assert DEVICE_NAME.match(device["name"])
        assert device["containerEdits"], "a device without edits is invalid"
    for edits in [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]:
        assert all("=" in entry for entry in edits.get("env", []))
        assert all(PurePosixPath(n["path"]).is_absolute() for n in edits.get("deviceNodes", []))
        for mount in edits.get("mounts", []):
            assert PurePosixPath(mount["containerPath"]).is_absolute()
            host = PurePosixPath(mount["hostPath"])
            if host.is_relative_to(HOST_ROOT):  # a driver file (else a device metadata file, checked elsewhere)
                assert (driver_root / host.relative_to(HOST_ROOT)).exists(), mount
        for hook in edits.get("hooks", []):
            assert hook["hookName"] in HOOK_NAMES
            assert PurePosixPath(hook["path"]).is_absolute()
            assert hook["args"][0] == PurePosixPath(hook["path"]).name  # args[0]: the program's name


def read_spec(node: Node, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(spec_path(node.cdi_dir, DRIVER, uid).read_text())
    return spec


def expected_mounts() -> list[dict[str, Any]]:
    libraries = FAKE_LIBRARIES
    paths = [
        *(f"{LIB}/{stem}.so.{VERSION}" for stem in libraries),
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump",
        "/usr/bin/nvidia-persistenced",
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
        "/tmp/nvidia-mps",
    ]
    return [{"hostPath": f"{HOST_ROOT}{path}", "containerPath": path, "options": RO} for path in paths]


def expected_hooks() -> list[dict[str, Any]]:
    sonames = (
        ("libcuda", "1"),
        ("libcudadebugger", "1"),
        ("libnvidia-allocator", "1"),
        ("libnvidia-cfg", "1"),
        ("libnvidia-ml", "1"),
        ("libnvidia-nvvm", "4"),
        ("libnvidia-opencl", "1"),
        ("libnvidia-ptxjitcompiler", "1"),
    )
    links = [f"{stem}.so.{VERSION}::{LIB}/{stem}.so.{soname}" for stem, soname in sonames]
    links.append(f"libcuda.so.1::{LIB}/libcuda.so")
    return [
        {
            "hookName": "createContainer",
            "path": HOOK,
            "args": ["nvidia-cdi-hook", "create-symlinks", *(a for link in links for a in ("--link", link))],
        },
        {"hookName": "createContainer", "path": HOOK, "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB]},
    ]


def test_a_claims_spec_mounts_the_driver_from_host_paths_and_runs_the_hooks(node: Node, driver_root: Path) -> None:
    service = start_service(node, driver_root)
    ref = node.claim("cuda", [result(DEVICES[0], request="a"), result(DEVICES[1], request="b")])
    assert service.prepare([ref])[ref.uid].error == ""

    spec = read_spec(node, ref.uid)
    check_cdi_rules(spec, driver_root)
    common = spec["containerEdits"]
    assert common["mounts"] == expected_mounts()  # once per claim, not once per device
    assert common["hooks"] == expected_hooks()
    assert common["env"][0] == "NVIDIA_VISIBLE_DEVICES=void"
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    for device in spec["devices"]:
        edits = device["containerEdits"]
        assert edits["deviceNodes"][0] == {"path": "/dev/nvidia0"}
        assert all("metadata.json" in m["hostPath"] for m in edits.get("mounts", []))  # only its metadata files

    # After a restart a missing spec is written again from the checkpoint: the same driver files.
    written = spec_path(node.cdi_dir, DRIVER, ref.uid).read_bytes()
    service.close()
    spec_path(node.cdi_dir, DRIVER, ref.uid).unlink()
    start_service(node, driver_root)
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).read_bytes() == written


def test_without_device_nodes_the_spec_names_none(node: Node, driver_root: Path) -> None:
    service = start_service(node, driver_root, cdi_device_nodes=False)
    ref = node.claim("kind", [result(DEVICES[0])])
    assert service.prepare([ref])[ref.uid].error == ""

    spec = read_spec(node, ref.uid)
    check_cdi_rules(spec, driver_root)
    assert "deviceNodes" not in spec["containerEdits"]
    assert all("deviceNodes" not in d["containerEdits"] for d in spec["devices"])
    assert spec["containerEdits"]["mounts"] == expected_mounts()
