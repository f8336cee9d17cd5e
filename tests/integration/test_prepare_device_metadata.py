"""KEP-5304 device metadata through the real prepare service, on the simulated NVML and the local API server.

A prepared claim's CDI spec mounts one file per request; the file is on the host, says what the
simulated hardware holds (MIG UUID, GI/CI IDs, placement) and what the publisher publishes for the
device; unprepare removes it; a repeated prepare writes the same bytes; start-up removes the metadata
of claims no record names and keeps the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import build_pool
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.nvml.inventory import read_inventory
from dra_driver.resourceclaim import ResourceClaimView
from kubeletplugin.prepare import claim_path as claim_path_module
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.metadata import (
    build_claim_metadata,
    parse_metadata_stream,
    write_claim_metadata,
)
from kubeletplugin.prepare.records import ClaimRecord
from kubeletplugin.prepare.service import PrepareService
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, NODE, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
ONE_G_20 = "gpu-0-mig-1g20gb-15-6"  # H100 1g.20gb at 6:2
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100], api=api_server) as simulated:
        yield simulated


def mounts_of(node: Node, ref: ClaimRef) -> dict[str, list[dict[str, Any]]]:
    """Device name -> its CDI mounts, from the claim's spec on disk."""
    spec = json.loads(spec_path(node.cdi_dir, DRIVER, ref.uid).read_text())
    prefix = f"{ref.uid}-"
    return {d["name"].removeprefix(prefix): d["containerEdits"].get("mounts", []) for d in spec["devices"]}


def metadata_dir(node: Node) -> Path:
    return node.state_dir / "dra-device-metadata"  # the harness's plugin data directory is the state directory


def published_attributes(node: Node, service: PrepareService, device_name: str) -> dict[str, Any]:
    """What the slice publisher publishes for the device right now (its own read and build)."""
    pool = build_pool(
        read_inventory(node.nvml),
        DeviceModelConfig(driver_name=DRIVER),
        owned_instances=service.checkpoint.owned().instances,
    )
    (device,) = [d for d in pool.devices if d.name == device_name]
    attributes = device.to_api()["attributes"]
    assert isinstance(attributes, dict)
    return attributes


def test_a_prepared_request_mounts_a_file_that_says_what_the_hardware_holds(node: Node) -> None:
    service = node.service()
    ref = node.claim("train", [result(ONE_G_20, request="gpu")])
    assert service.prepare([ref])[ref.uid].error == ""

    (mount,) = mounts_of(node, ref)[ONE_G_20]
    assert mount["containerPath"] == f"{CONTAINER_DIR}/resourceclaims/train/gpu/{DRIVER}-metadata.json"
    assert mount["options"] == ["ro", "bind"]
    host = Path(mount["hostPath"])
    assert host == metadata_dir(node) / "default_train" / "gpu" / "metadata.json"
    assert host.is_file()

    beta, alpha = parse_metadata_stream(host.read_bytes())
    assert (beta.api_version, alpha.api_version) == (
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    )
    document = json.loads(host.read_text()[: host.read_text().index("\n}\n") + 2])
    assert document["kind"] == "DeviceMetadata"
    assert document["metadata"] == {"name": "train", "namespace": "default", "uid": ref.uid, "generation": 1}
    (request,) = document["requests"]
    assert request["name"] == "gpu"
    (device,) = request["devices"]
    assert (device["driver"], device["pool"], device["name"]) == (DRIVER, NODE, ONE_G_20)

    ((gpu_index, gi_id, profile_id, start, cis),) = node.instances()  # what the simulated hardware holds
    ((ci_id, _, mig_uuid),) = cis
    assert (gpu_index, profile_id, start) == (0, 15, 6)
    attributes = device["attributes"]
    assert attributes["migUUID"] == {"string": mig_uuid}
    assert attributes["gpuInstanceID"] == {"int": gi_id}
    assert attributes["computeInstanceID"] == {"int": ci_id}
    assert (attributes["placementStart"], attributes["placementSize"]) == ({"int": 6}, {"int": 2})
    runtime = {"migUUID", "gpuInstanceID", "computeInstanceID"}
    assert {k: v for k, v in attributes.items() if k not in runtime} == published_attributes(node, service, ONE_G_20)

    assert service.unprepare([ref])[ref.uid].error == ""
    assert not host.exists()
    assert list(metadata_dir(node).iterdir()) == []  # the request and claim directories went too


def test_a_repeated_prepare_writes_the_same_file_and_restores_a_missing_one(node: Node) -> None:
    service = node.service()
    ref = node.claim("again", [result(ONE_G_20, request="gpu")])
    first = service.prepare([ref])[ref.uid]
    host = metadata_dir(node) / "default_again" / "gpu" / "metadata.json"
    content = host.read_bytes()
    spec = spec_path(node.cdi_dir, DRIVER, ref.uid).read_bytes()

    assert service.prepare([ref])[ref.uid] == first
    assert host.read_bytes() == content
    host.unlink()
    assert service.prepare([ref])[ref.uid] == first
    assert host.read_bytes() == content
    assert spec_path(node.cdi_dir, DRIVER, ref.uid).read_bytes() == spec


def test_a_claim_from_a_template_is_mounted_under_the_pods_name_for_it(node: Node) -> None:
    ref = node.claim("pod0-gpu-2kqrd", [result(ONE_G_20, request="gpu")])
    client.ResourceV1Api(node.api_client).patch_namespaced_resource_claim(
        ref.name, ref.namespace, {"metadata": {"annotations": {"resource.kubernetes.io/pod-claim-name": "my-gpu"}}}
    )
    service = node.service()
    assert service.prepare([ref])[ref.uid].error == ""

    (mount,) = mounts_of(node, ref)[ONE_G_20]
    assert mount["containerPath"] == f"{CONTAINER_DIR}/resourceclaimtemplates/my-gpu/gpu/{DRIVER}-metadata.json"
    assert mount["hostPath"] == str(metadata_dir(node) / "default_pod0-gpu-2kqrd" / "gpu" / "metadata.json")
    (first, _) = parse_metadata_stream(Path(mount["hostPath"]).read_bytes())
    assert first.pod_claim_name == "my-gpu"

    # After a restart the spec is rebuilt from the checkpoint alone: the name was recorded there.
    service.close()
    spec_path(node.cdi_dir, DRIVER, ref.uid).unlink()
    node.service()
    (mount_again,) = mounts_of(node, ref)[ONE_G_20]
    assert mount_again == mount


def test_every_device_of_a_request_mounts_its_file_and_each_request_has_its_own(node: Node) -> None:
    service = node.service()
    other = "gpu-0-mig-1g20gb-15-4"
    ref = node.claim(
        "pair", [result(ONE_G_20, request="train"), result(other, request="train"), result(other, request="eval")]
    )
    assert service.prepare([ref])[ref.uid].error == ""
    mounts = mounts_of(node, ref)
    paths = {d: sorted(m["containerPath"].split("/")[-2] for m in ms) for d, ms in mounts.items()}
    assert paths == {ONE_G_20: ["train"], other: ["eval", "train"]}
    train = metadata_dir(node) / "default_pair" / "train" / "metadata.json"
    (beta, _) = parse_metadata_stream(train.read_bytes())
    (request,) = beta.requests
    assert sorted(d.name for d in request.devices) == sorted([ONE_G_20, other])


def test_start_up_removes_metadata_no_record_names_and_keeps_what_a_record_names(node: Node) -> None:
    service = node.service()
    ref = node.claim("kept", [result(ONE_G_20, request="gpu")])
    assert service.prepare([ref])[ref.uid].error == ""
    service.close()
    kept = metadata_dir(node) / "default_kept" / "gpu" / "metadata.json"
    content = kept.read_bytes()
    # What a plugin that crashed after writing a claim's metadata, and lost its record, leaves behind.
    stale = ClaimRecord.model_validate(
        {
            "claimUID": "gone-uid",
            "namespace": "default",
            "name": "gone",
            "state": "PrepareCompleted",
            "devices": [
                {"intent": {"deviceName": ONE_G_20, "requestNames": ["gpu"], "gpuUUID": "GPU-x", "gpuMinor": 0}}
            ],
        }
    )
    write_claim_metadata(node.state_dir, build_claim_metadata(stale, DRIVER, NODE, node.state_dir, {}), "gone-uid")
    assert (metadata_dir(node) / "default_gone").is_dir()

    node.service()  # start-up recovery

    assert not (metadata_dir(node) / "default_gone").exists()
    assert kept.read_bytes() == content


def test_device_metadata_off_writes_no_file_and_no_mount(node: Node) -> None:
    service = node.service(device_metadata=False)
    ref = node.claim("plain", [result(ONE_G_20, request="gpu")])
    assert service.prepare([ref])[ref.uid].error == ""
    assert mounts_of(node, ref) == {ONE_G_20: []}
    assert not metadata_dir(node).exists()


@pytest.mark.parametrize(
    "request_name",
    [
        pytest.param("../../../escape", id="request-climbs-out"),
        pytest.param("gpu/../../escape", id="subrequest-climbs-out"),
    ],
)
def test_a_forged_request_name_fails_the_claim_and_writes_nothing_outside(
    node: Node, monkeypatch: pytest.MonkeyPatch, request_name: str
) -> None:
    """The API server refuses such names; a claim that carries one anyway (a forged or buggy answer)
    must fail its prepare, create nothing that stays, and write no file anywhere."""
    genuine_read = claim_path_module.read_claim

    def forged(api: Any, ref: ClaimRef) -> ResourceClaimView:
        claim = genuine_read(api, ref).model_dump(by_alias=True)
        claim["status"]["allocation"]["devices"]["results"][0]["request"] = request_name
        return ResourceClaimView.model_validate(claim)

    monkeypatch.setattr(claim_path_module, "read_claim", forged)
    service = node.service()
    ref = node.claim("forged", [result(ONE_G_20, request="gpu")])

    error = service.prepare([ref])[ref.uid].error
    assert "device metadata cannot be written" in error
    assert request_name in error
    assert node.instances() == []  # what the prepare created was rolled back
    assert not spec_path(node.cdi_dir, DRIVER, ref.uid).exists()
    assert not any("escape" in str(path) for path in node.root.parent.rglob("*"))
    assert not metadata_dir(node).exists() or list(metadata_dir(node).iterdir()) == []
