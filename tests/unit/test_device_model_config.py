"""The device model configuration as an administrator writes it: refused in one line naming the key.

Table-driven over :func:`dra_driver.device_config.load_device_model_config`, the one loader behind
``migdra slices --config`` and ``migdra kubelet-plugin --device-config``; the same mistakes through the
CLI are in ``tests/integration/badinput/cases/config.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_driver.device_config import check_excluded_gpus_exist, load_device_model_config
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.errors import ConfigurationError

GPUS = [
    ("GPU-40c1900a-1b1c-51be-a0eb-2d99e1f097db", "00000000:1B:00.0"),
    ("GPU-8f1e6357-20e3-5915-8584-43cc54fc5167", "00000000:2B:00.0"),
]


def load(tmp_path: Path, text: str | bytes, **flags: object) -> DeviceModelConfig:
    path = tmp_path / "config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return load_device_model_config(path, **flags)  # type: ignore[arg-type]


def test_aliases_name_catalog_models_and_both_key_spellings_work(tmp_path: Path) -> None:
    config = load(tmp_path, "driver_name: gpu.example.com\nprofiles:\n  h100: {allow: ['1g.*']}\n")
    assert config.driver_name == "gpu.example.com"
    assert set(config.profiles) == {"H100-SXM5-80GB"}
    assert config.profile_filter("H100-SXM5-80GB").allow == ("1g.*",)


def test_an_empty_file_configures_nothing(tmp_path: Path) -> None:
    assert load(tmp_path, "# nothing yet\n") == DeviceModelConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("driverName: a.io\ndriver_name: b.io\n", r"'driverName' and 'driver_name' are the same key \(driverName\)"),
        ("excludeGpus:\n- 0000:1b:00.0\n- 0000:1b:00.0\n", None),
        ("excludeGpus: [MIG-0f3b1c59-6a52-5b44-8f6a-3bd3c1f3a001]\n", "is a MIG device UUID; exclude whole GPUs"),
        (
            "profiles:\n  '*': {allow: ['1G.*']}\n",
            r"allow pattern '1G\.\*' of '\*' matches no profile of any GPU model",
        ),
        (
            "profiles:\n  A30: {deny: ['7g.*']}\n",
            r"deny pattern '7g\.\*' of 'A30' matches no profile of A30 \(its profiles:",
        ),
        ("driverName: gpu.caf\xe9.io\n".encode("latin-1"), r"is not valid YAML \(not UTF-8 text: byte 19 is 0xe9\)"),
    ],
    ids=[
        "two-spellings",
        "same-gpu-twice-is-fine",
        "mig-uuid",
        "case-of-a-pattern",
        "profile-of-another-model",
        "latin-1",
    ],
)
def test_mistakes_are_refused_naming_the_file_and_key(tmp_path: Path, text: str | bytes, message: str | None) -> None:
    if message is None:
        load(tmp_path, text)
        return
    with pytest.raises(ConfigurationError, match=message) as info:
        load(tmp_path, text)
    assert str(tmp_path / "config.yaml") in str(info.value)


@pytest.mark.parametrize(
    "spelling", ["1b:00.0", "0000:1B:00.0", "00000000:1b:00", "gpu-40C1900A-1b1c-51be-a0eb-2d99e1f097db"]
)
def test_a_gpu_is_excluded_by_any_spelling_of_its_uuid_or_pci_bus_id(spelling: str) -> None:
    config = DeviceModelConfig(exclude_gpus=(spelling,))
    assert config.excludes(*GPUS[0])
    assert not config.excludes(*GPUS[1])
    assert config.unmatched_exclusions(GPUS) == ()


def test_exclusions_naming_no_gpu_are_refused_with_the_gpus_listed(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("excludeGpus: ['0000:3b:00.0']\n")
    config = load_device_model_config(path, exclude_gpus=("GPU-00000000-0000-0000-0000-000000000000", "1b:00.0"))
    with pytest.raises(ConfigurationError) as info:
        check_excluded_gpus_exist(config, GPUS, from_flags=("GPU-00000000-0000-0000-0000-000000000000",), path=path)
    assert str(info.value) == (
        f"excludeGpus in {path}: 0000:3b:00.0, --exclude-gpu GPU-00000000-0000-0000-0000-000000000000 names no GPU "
        f"of this node; its GPUs: 0: {GPUS[0][0]} (00000000:1B:00.0), 1: {GPUS[1][0]} (00000000:2B:00.0)"
    )


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigurationError, match=f"device model configuration {fifo} is not a regular file"):
        load_device_model_config(fifo)
