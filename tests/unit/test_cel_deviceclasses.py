"""The shipped DeviceClasses (deviceclasses/**): well-formed, lint-clean, and selecting the right devices.

Devices are written by hand from the vocabulary (dra_driver.devicemodel.vocabulary) with the numbers of
the MIG catalog, for H100 80GB, A100 40GB and B200 placements, whole GPUs, and a device of NVIDIA's
driver, and then against the slices the device model renders for the same GPU models (shared devices on).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.devicemodel.vocabulary import ATTRIBUTES, CAPACITIES, SHARE_CAPACITIES, DeviceType
from dra_driver.mig import load_catalog
from dra_driver.quantity import Quantity
from dra_driver.tools.cel import CELRuntimeError, compile_selector
from dra_driver.tools.cel.documents import load_documents, selector_sites
from dra_driver.tools.cel.lint import Linter

DRIVER = "gpu.migdra.io"
CLASS_DIR = Path(__file__).resolve().parents[2] / "deviceclasses"
CLASS_FILES = sorted(CLASS_DIR.rglob("*.yaml"))


def _classes() -> dict[str, tuple[str, ...]]:
    classes: dict[str, tuple[str, ...]] = {}
    for path in CLASS_FILES:
        for document in load_documents(path):
            classes[document.name] = tuple(site.expression for site in selector_sites(document))
    return classes


CLASSES = _classes()


def mig_device(model: str, profile: str, *, driver_version: str = "580.65.6") -> dict[str, Any]:
    gpu = load_catalog().model(model)
    info = gpu.profile_by_name(profile)
    start = info.placements[0].start
    return {
        "name": f"gpu-0-mig-{profile.replace('.', '-').replace('+', '-')}-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "parentUUID": {"string": "GPU-00000000-0000-0000-0000-000000000000"},
            "profile": {"string": profile},
            "productName": {"string": gpu.nvml_name},
            "architecture": {"string": gpu.architecture.value.capitalize()},
            "cudaComputeCapability": {"version": f"{gpu.cuda_compute_capability}.0"},
            "driverVersion": {"version": driver_version},
            "cudaDriverVersion": {"version": "13.0.0"},
            "placementStart": {"int": start},
            "placementSize": {"int": info.placement_size},
            "computeSlices": {"int": info.slice_count},
            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
        },
        "capacity": {
            "memory": {"value": f"{info.memory_size_mb}Mi"},
            "multiprocessors": {"value": str(info.multiprocessor_count)},
            "copyEngines": {"value": str(info.copy_engine_count)},
            "decoders": {"value": str(info.decoder_count)},
            "encoders": {"value": str(info.encoder_count)},
            "jpegEngines": {"value": str(info.jpeg_count)},
            "ofaEngines": {"value": str(info.ofa_count)},
        },
    }


def shared_device(model: str, profile: str) -> dict[str, Any]:
    """The shared GPU-instance device of ``profile``'s first placement, as the device model publishes it."""
    device = mig_device(model, profile)
    info = load_catalog().model(model).profile_by_name(profile)
    sizes = [str(size) for size in info.share_sizes]
    device["name"] = device["name"].replace("-mig-", "-shared-")
    device["attributes"]["shared"] = {"bool": True}
    device["allowMultipleAllocations"] = True
    for capacity in device["capacity"].values():
        capacity["requestPolicy"] = {"default": "0", "validValues": ["0"]}
    device["capacity"]["computeSlices"] = {
        "value": str(info.slice_count),
        "requestPolicy": {"default": sizes[0], "validValues": sizes},
    }
    return device


def gpu_device(model: str, *, numa_node: int | None = None, driver_version: str = "580.65.6") -> dict[str, Any]:
    gpu = load_catalog().model(model)
    budget = gpu.resource_budget
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-11111111-0000-0000-0000-000000000000"},
        "productName": {"string": gpu.nvml_name},
        "architecture": {"string": gpu.architecture.value.capitalize()},
        "cudaComputeCapability": {"version": f"{gpu.cuda_compute_capability}.0"},
        "driverVersion": {"version": driver_version},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
    }
    if numa_node is not None:
        attributes["resource.kubernetes.io/numaNode"] = {"int": numa_node}
    return {
        "name": "gpu-0",
        "attributes": attributes,
        "capacity": {
            "memory": {"value": f"{gpu.total_memory_mib}Mi"},
            "multiprocessors": {"value": str(gpu.sm_total)},
            "copyEngines": {"value": str(budget["copy_engine_count"])},
            "decoders": {"value": str(budget["decoder_count"])},
            "encoders": {"value": str(budget["encoder_count"])},
            "jpegEngines": {"value": str(budget["jpeg_count"])},
            "ofaEngines": {"value": str(budget["ofa_count"])},
        },
    }


# (driver, device) by a short name used in the expectations below.
DEVICES: dict[str, tuple[str, dict[str, Any]]] = {
    "h100-1g.10gb": (DRIVER, mig_device("H100-SXM5-80GB", "1g.10gb")),
    "h100-1g.10gb+me": (DRIVER, mig_device("H100-SXM5-80GB", "1g.10gb+me")),
    "h100-3g.40gb": (DRIVER, mig_device("H100-SXM5-80GB", "3g.40gb")),
    "a100-3g.20gb": (DRIVER, mig_device("A100-SXM4-40GB", "3g.20gb", driver_version="575.57.8")),
    "a100-7g.40gb": (DRIVER, mig_device("A100-SXM4-40GB", "7g.40gb", driver_version="575.57.8")),
    "b200-1g.23gb": (DRIVER, mig_device("B200", "1g.23gb")),
    "b200-3g.90gb": (DRIVER, mig_device("B200", "3g.90gb")),
    "h100-shared-3g.40gb": (DRIVER, shared_device("H100-SXM5-80GB", "3g.40gb")),
    "a100-shared-7g.40gb": (DRIVER, shared_device("A100-SXM4-40GB", "7g.40gb")),
    "h100-gpu": (DRIVER, gpu_device("H100-SXM5-80GB", numa_node=0)),
    "a100-gpu": (DRIVER, gpu_device("A100-SXM4-40GB", driver_version="575.57.8")),
    "nvidia-gpu": ("gpu.nvidia.com", {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}),
}
MIG = {
    "h100-1g.10gb",
    "h100-1g.10gb+me",
    "h100-3g.40gb",
    "a100-3g.20gb",
    "a100-7g.40gb",
    "b200-1g.23gb",
    "b200-3g.90gb",
}
H100 = {"h100-1g.10gb", "h100-1g.10gb+me", "h100-3g.40gb", "h100-gpu"}

SHARED = {"h100-shared-3g.40gb", "a100-shared-7g.40gb"}

# No class but mig-shared.migdra.io selects a shared device: they all want a device of the claim's own.
EXPECTED: dict[str, set[str]] = {
    "mig.migdra.io": MIG,
    "mig-shared.migdra.io": SHARED,
    "gpu.migdra.io": {"h100-gpu", "a100-gpu"},
    "mig-1g-10gb.migdra.io": {"h100-1g.10gb"},
    "mig-3g-40gb.migdra.io": {"h100-3g.40gb"},
    "mig-3g-20gb.migdra.io": {"a100-3g.20gb"},
    "mig-7g-40gb.migdra.io": {"a100-7g.40gb"},
    "mig-1g-23gb.migdra.io": {"b200-1g.23gb"},
    "mig-3g-90gb.migdra.io": {"b200-3g.90gb"},
    # 3g.20gb on an A100 40GB has 42 SMs but 19968 MiB, just under 20 GiB.
    "mig-20gi-40sm.migdra.io": {"h100-3g.40gb", "a100-7g.40gb", "b200-3g.90gb"},
    "h100.migdra.io": H100,
    "mig-hopper.migdra.io": H100 - {"h100-gpu"},
    "driver-580-cc90.migdra.io": H100 | {"b200-1g.23gb", "b200-3g.90gb"},
    "numa0.migdra.io": {"h100-gpu"},
}


def test_every_file_has_a_header_and_holds_only_v1_device_classes() -> None:
    assert {path.name for path in CLASS_FILES} >= {"mig.migdra.io.yaml", "gpu.migdra.io.yaml"}
    names: list[str] = []
    for path in CLASS_FILES:
        text = path.read_text()
        assert text.startswith("# "), f"{path} needs a header comment saying what it selects and why"
        for body in yaml.safe_load_all(text):
            assert body["apiVersion"] == "resource.k8s.io/v1"
            assert body["kind"] == "DeviceClass"
            assert body["spec"]["selectors"]
            names.append(body["metadata"]["name"])
    assert len(names) == len(set(names))
    assert "mig.migdra.io" in names
    assert "gpu.migdra.io" in names


def test_standard_classes_mirror_nvidia() -> None:
    assert CLASSES["mig.migdra.io"] == (
        "device.driver == 'gpu.migdra.io' && device.attributes['gpu.migdra.io'].type == 'mig' && "
        "!('shared' in device.attributes['gpu.migdra.io'])",
    )
    assert CLASSES["gpu.migdra.io"] == (
        "device.driver == 'gpu.migdra.io' && device.attributes['gpu.migdra.io'].type == 'gpu'",
    )


def test_per_profile_classes_name_their_extended_resource() -> None:
    for path in CLASS_FILES:
        for body in yaml.safe_load_all(path.read_text()):
            name = body["metadata"]["name"]
            if name.startswith("mig-") and name.count("-") == 2 and "gb" in name:
                profile = name.removeprefix("mig-").removesuffix(".migdra.io").replace("-", ".", 1).replace("-", ".")
                assert body["spec"]["extendedResourceName"] == f"nvidia.com/mig-{profile}"
                assert f"profile == '{profile}'" in body["spec"]["selectors"][0]["cel"]["expression"]


def test_every_class_is_lint_clean() -> None:
    documents = [document for path in CLASS_FILES for document in load_documents(path)]
    assert Linter(DRIVER).lint_documents(documents) == []


@pytest.mark.parametrize("class_name", sorted(EXPECTED))
def test_class_selects_the_expected_devices_and_never_raises(class_name: str) -> None:
    programs = [compile_selector(expression) for expression in CLASSES[class_name]]
    selected = set()
    for device_id, (driver, device) in DEVICES.items():
        # Kubernetes evaluates a class's selectors in order and stops at the first false one.
        if all(program.matches(device, driver=driver) for program in programs):
            selected.add(device_id)
    assert selected == EXPECTED[class_name]


def test_expectations_cover_every_shipped_class() -> None:
    assert set(EXPECTED) <= set(CLASSES)
    unchecked = set(CLASSES) - set(EXPECTED)
    # The remaining per-profile classes select profiles none of the devices above has.
    for class_name in unchecked:
        programs = [compile_selector(expression) for expression in CLASSES[class_name]]
        for driver, device in DEVICES.values():
            assert not all(program.matches(device, driver=driver) for program in programs)


def test_hand_written_devices_follow_the_vocabulary() -> None:
    for _, (driver, device) in DEVICES.items():
        if driver != DRIVER:
            continue
        device_type = DeviceType(device["attributes"]["type"]["string"])
        required = {spec.name for spec in ATTRIBUTES if spec.always and device_type in spec.on}
        allowed = {spec.name for spec in ATTRIBUTES if device_type in spec.on}
        assert required <= set(device["attributes"]) <= allowed
        share = {spec.name for spec in SHARE_CAPACITIES} if "shared" in device["attributes"] else set()
        assert set(device["capacity"]) == {spec.name for spec in CAPACITIES} | share


@pytest.mark.parametrize("mig_enabled", [True, False], ids=["mig-on", "mig-off"])
def test_classes_against_the_device_model(mig_enabled: bool) -> None:
    """Every class on every device of the model, shared devices included (``sharedDevices: true``)."""
    inventory = example_inventory(["H100-SXM5-80GB", "A100-SXM4-40GB", "B200"], mig_enabled)
    slices = render_slices(build_pool(inventory, DeviceModelConfig(shared_devices=True)), "example-node", 1)
    devices = [(s["spec"]["driver"], d) for s in slices for d in s["spec"].get("devices") or []]
    assert devices
    for class_name, expressions in CLASSES.items():
        programs = [compile_selector(expression) for expression in expressions]
        for driver, device in devices:
            try:
                selected = all(program.matches(device, driver=driver) for program in programs)
            except CELRuntimeError as exc:
                pytest.fail(f"{class_name} raised on {device['name']}: {exc}")
            attributes = device.get("attributes", {})
            device_type = attributes.get("type", {}).get("string")
            if class_name == "mig-20gi-40sm.migdra.io":
                memory = Quantity.parse(device["capacity"]["memory"]["value"])
                sms = Quantity.parse(device["capacity"]["multiprocessors"]["value"])
                big = memory >= Quantity.parse("20Gi") and sms >= Quantity.parse("40")
                assert selected == (device_type == "mig" and big and "shared" not in attributes)
            if class_name == "numa0.migdra.io":
                numa0 = attributes.get("resource.kubernetes.io/numaNode") == {"int": 0}
                assert selected == (numa0 and "shared" not in attributes)
            shared = attributes.get("shared") == {"bool": True}
            if class_name == "mig.migdra.io":
                assert selected == (device_type == "mig" and not shared)
            if class_name == "mig-shared.migdra.io":
                assert selected == shared
                assert shared == (device.get("allowMultipleAllocations") is True)
            if class_name == "gpu.migdra.io":
                assert selected == (device_type == "gpu")
            if class_name.startswith("mig-") and class_name.count("-") == 2 and "gb" in class_name:
                profile = class_name.removeprefix("mig-").removesuffix(".migdra.io").replace("-", ".")
                assert selected == (attributes.get("profile", {}).get("string") == profile and not shared)


def test_each_standard_class_selects_exactly_its_kind_of_device_of_a_built_pool() -> None:
    """On a node with a MIG H100, a MIG A100 and a MIG-disabled H100, built by build_pool: mig.migdra.io
    selects the exclusive MIG devices, mig-shared.migdra.io the shared ones (published with
    ``sharedDevices: true``), gpu.migdra.io the whole GPU."""
    inventory = example_inventory(["H100-SXM5-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB"])
    gpus = list(inventory.gpus)
    last = gpus[2]
    gpus[2] = dataclasses.replace(
        last,
        gpu=dataclasses.replace(last.gpu, mig_mode=dataclasses.replace(last.gpu.mig_mode, current=0)),  # type: ignore[arg-type]
    )
    pool = build_pool(dataclasses.replace(inventory, gpus=tuple(gpus)), DeviceModelConfig(shared_devices=True))
    kinds = {
        "mig.migdra.io": {d.name for d in pool.devices if d.type is DeviceType.MIG and not d.shared},
        "mig-shared.migdra.io": {d.name for d in pool.devices if d.shared},
        "gpu.migdra.io": {d.name for d in pool.devices if d.type is DeviceType.GPU},
    }
    assert all(kinds.values())
    assert len(kinds["mig-shared.migdra.io"]) == 7 + 7  # H100 and A100 40GB: 2g x3, 3g x2, 4g, 7g
    for class_name, expected in kinds.items():
        programs = [compile_selector(expression) for expression in CLASSES[class_name]]
        selected = {d.name for d in pool.devices if all(p.matches(d.to_api(), driver=DRIVER) for p in programs)}
        assert selected == expected, class_name
