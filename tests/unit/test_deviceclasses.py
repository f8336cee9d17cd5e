"""The shipped DeviceClasses as `migdra plan`, `migdra bench` and the development cluster read them: both
directories, and another driver name put into the CEL selectors only (as the Helm chart does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.deviceclasses import deviceclass_documents, substitute_driver
from dra_driver.errors import ConfigurationError

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
