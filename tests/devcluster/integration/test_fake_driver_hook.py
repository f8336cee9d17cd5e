"""The fake driver root's ``nvidia-cdi-hook`` does what runc asks of NVIDIA's: run as runc runs a
``createContainer`` hook (the OCI state on stdin, the arguments of migdra's CDI spec), it makes the soname
links and the loader configuration in the container's root file system, nowhere else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from migdra_devcluster.realnode.driver_root import build_fake_driver_root


def run_hook(hook: Path, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    state = {"ociVersion": "1.2.0", "id": "c", "status": "creating", "pid": 1, "bundle": str(bundle)}
    return subprocess.run(
        [str(hook), *args], input=json.dumps(state), capture_output=True, text=True, timeout=30, check=False
    )


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    return bundle


def test_create_symlinks_makes_each_link_inside_the_containers_root(tmp_path: Path, bundle: Path) -> None:
    hook = build_fake_driver_root(tmp_path / "driver") / "usr/bin/nvidia-cdi-hook"
    lib = "/usr/lib/x86_64-linux-gnu"
    done = run_hook(
        hook, bundle, "create-symlinks", "--link", f"libcuda.so.1::{lib}/libcuda.so", "--link", f"x.so.9::{lib}/x.so.1"
    )
    assert done.returncode == 0, done.stderr
    assert (bundle / f"rootfs{lib}/libcuda.so").readlink() == Path("libcuda.so.1")
    assert (bundle / f"rootfs{lib}/x.so.1").readlink() == Path("x.so.9")
    assert not Path(f"{lib}/x.so.1").is_symlink()  # not on the host


def test_update_ldcache_writes_the_folders_into_the_containers_loader_configuration(
    tmp_path: Path, bundle: Path
) -> None:
    hook = build_fake_driver_root(tmp_path / "driver") / "usr/bin/nvidia-cdi-hook"
    done = run_hook(hook, bundle, "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu", "--folder", "/opt/lib")
    assert done.returncode == 0, done.stderr
    conf = bundle / "rootfs/etc/ld.so.conf.d/00-migdra-cdi.conf"
    assert conf.read_text() == "/usr/lib/x86_64-linux-gnu\n/opt/lib\n"


def test_an_unknown_command_fails_the_hook(tmp_path: Path, bundle: Path) -> None:
    hook = build_fake_driver_root(tmp_path / "driver") / "usr/bin/nvidia-cdi-hook"
    done = run_hook(hook, bundle, "chmod", "--path", "/dev/x")
    assert done.returncode != 0
    assert "unknown command chmod" in done.stderr
