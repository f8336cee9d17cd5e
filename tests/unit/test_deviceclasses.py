"""The shipped DeviceClasses as `migdra plan`, `migdra bench` and the development cluster read them: both
directories, and another driver name put into the CEL selectors only (as the Helm chart does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dra_driver.deviceclasses import deviceclass_documents, substitute_driver
from dra_driver.errors import ConfigurationError
from dra_driver.mig.catalog import load_catalog

REPO = Path(__file__).resolve().parents[2]


def test_deviceclasses_are_installed_from_both_directories_with_the_driver_substituted_in_selectors_only() -> None:
    default = deviceclass_documents(REPO / "deviceclasses", "gpu.migdra.io")
    names = {d["metadata"]["name"] for d in default}
    assert {"mig.migdra.io", "mig-shared.migdra.io", "gpu.migdra.io", "mig-1g-10gb.migdra.io"} <= names
    renamed = deviceclass_documents(REPO / "deviceclasses", "mig.example.com")
    assert {d["metadata"]["name"] for d in renamed} == names
    for document in renamed:
        for selector in document["spec"].get("selectors", []):
            assert "gpu.migdra.io" not in selector["cel"]["expression"]
            assert "mig.example.com" in selector["cel"]["expression"]
    by_name = {d["metadata"]["name"]: d for d in renamed}
    assert by_name["mig-1g-10gb.migdra.io"]["spec"]["extendedResourceName"] == "nvidia.com/mig-1g.10gb"


def test_substituting_the_default_driver_changes_nothing() -> None:
    document = {"spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.migdra.io'"}}]}}
    assert substitute_driver(document, "gpu.migdra.io") == {
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.migdra.io'"}}]}
    }


def test_a_missing_deviceclass_directory_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"DeviceClass directory .*: not found"):
        deviceclass_documents(tmp_path / "nope", "gpu.migdra.io")


def test_the_memory_table_of_the_docs_is_the_catalogs() -> None:
    """docs/deviceclasses.md's table of each profile's exact memory (why a 20Gi request gets a 3g device)
    must say what the shipped MIG catalog says, in MiB, in bytes and against 20Gi."""
    models = {"H100 80GB (SXM5)": "H100-SXM5-80GB", "A100 40GB (SXM4)": "A100-SXM4-40GB"}
    catalog = load_catalog()
    text = (Path(__file__).resolve().parents[2] / "docs" / "deviceclasses.md").read_text()
    rows = re.findall(
        r"^\| (H100 80GB \(SXM5\)|A100 40GB \(SXM4\)) \| (.+?) \| ([\d,]+) \| ([\d,]+) \| (.+?) \|$", text, re.M
    )
    checked = set()
    for gpu, names, mib, size, at_least_20gi in rows:
        model = catalog.model(models[gpu])
        for name in re.findall(r"`([^`]+)`", names):
            profile = model.profile_by_name(name)
            assert profile.memory_size_mb == int(mib.replace(",", "")), (gpu, name)
            assert profile.memory_bytes == int(size.replace(",", "")), (gpu, name)
            assert (profile.memory_bytes >= 20 * 2**30) == at_least_20gi.startswith("yes"), (gpu, name)
            checked.add((models[gpu], name))
    every = {(key, p.name) for key in models.values() for p in catalog.model(key).gpu_instance_profiles}
    assert checked == every, f"profiles missing from the table: {sorted(every - checked)}"
