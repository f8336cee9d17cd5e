"""The PCIe root of a GPU, from a sysfs tree laid out like the kernel's."""

from __future__ import annotations

from pathlib import Path

from dra_driver.host.pci import pcie_root


def _fake_sysfs(root: Path) -> Path:
    device = root / "devices" / "pci0000:17" / "0000:17:00.0" / "0000:18:00.0" / "0000:1b:00.0"
    device.mkdir(parents=True)
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "bus" / "pci" / "devices" / "0000:1b:00.0").symlink_to(device)
    return root


def test_root_complex_of_a_gpu_behind_a_switch(tmp_path: Path) -> None:
    assert pcie_root("0000:1B:00.0", _fake_sysfs(tmp_path)) == "pci0000:17"


def test_unknown_device_or_missing_sysfs_is_none(tmp_path: Path) -> None:
    assert pcie_root("0000:99:00.0", _fake_sysfs(tmp_path)) is None
    assert pcie_root("0000:1b:00.0", tmp_path / "nowhere") is None
