"""``migdra status`` as an operator runs it: the console script in a subprocess against the local API
server, printing the per-GPU map (table) and the documented JSON from the cluster's objects alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.devicemodel import example_slices
from tests.kube_apiserver import KubeApiServer

MIGDRA = str(Path(sys.executable).with_name("migdra"))
DRIVER = "gpu.migdra.io"
THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"
ONE_G_AT_6 = "gpu-1-mig-1g10gb-19-6"


def migdra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MIGDRA, "status", *args], capture_output=True, text=True, check=False, timeout=120)


def allocated_claim(name: str, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.migdra.io"}}]}},
    }
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": device}
    return body, {"allocation": {"devices": {"results": [result]}}}


def ready_entry(device: str, mig_uuid: str) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "message": "MIG instance created",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    data = {"schemaVersion": "v1", "migUUID": mig_uuid, "gpuInstanceID": 2, "computeInstanceID": 0}
    return {"driver": DRIVER, "pool": "node-a", "device": device, "data": data, "conditions": [condition]}


@pytest.fixture
def cluster(api_server: KubeApiServer, tmp_path: Path) -> Path:
    """Two H100s on node-a and one MIG-disabled GPU on node-b; a realized 3g at 4 and a reserved 1g at 6."""
    kubeconfig = tmp_path / "kubeconfig"
    api_server.write_kubeconfig(kubeconfig)
    with api_server.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        resource = client.ResourceV1Api(api_client)
        for node in ("node-a", "node-b", "node-c"):
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        slices = [
            *example_slices(["H100-SXM5-80GB"] * 2, node_name="node-a"),
            *example_slices(["H100-SXM5-80GB"], mig_enabled=False, node_name="node-b"),
        ]
        for body in slices:
            resource.create_resource_slice(body)
        for name, device, entries in [
            ("train", THREE_G_AT_4, [ready_entry(THREE_G_AT_4, "MIG-5a1b")]),
            ("notebook", ONE_G_AT_6, None),
        ]:
            body, status = allocated_claim(name, device)
            if entries is not None:
                status["devices"] = entries
            resource.create_namespaced_resource_claim("default", body)
            resource.patch_namespaced_resource_claim_status(name, "default", {"status": status})
    return kubeconfig


def test_status_table_and_json_from_the_cluster(cluster: Path) -> None:
    table = migdra("--kubeconfig", str(cluster))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == (
        "2 node(s), 3 GPU(s) of gpu.migdra.io: 2 instance(s) reserved, 1 realized, 0 in conflict; "
        "11 of 16 MIG memory slices free, 1 of 1 whole GPUs free"
    )
    assert "    memory slices  [. . . . A A A A]  4/8 free" in lines
    assert "    A  default/train  3g.40gb at 4  gpu-0-mig-3g40gb-9-4  realized MIG-5a1b (GI 2, CI 0)" in lines
    assert "    memory slices  [. . . . . . A .]  7/8 free" in lines
    assert "    A  default/notebook  1g.10gb at 6  gpu-1-mig-1g10gb-19-6  reserved, not realized yet" in lines
    assert "    largest fit    4g.40gb at 0; fragmentation 0.00" in lines
    assert "    whole GPU      [.]  1/1 free" in lines

    only_a = migdra("--kubeconfig", str(cluster), "--node", "node-a", "-o", "json")
    assert only_a.returncode == 0, only_a.stderr
    document = json.loads(only_a.stdout)
    assert (document["schemaVersion"], document["driver"]) == ("v1", DRIVER)
    (node,) = document["nodes"]
    assert node["name"] == "node-a"
    gpu0, gpu1 = node["gpus"]
    assert [i["claim"] for i in gpu0["instances"]] == ["default/train"]
    assert (gpu0["instances"][0]["realized"], gpu0["instances"][0]["migUUID"]) == (True, "MIG-5a1b")
    assert gpu1["instances"][0]["realized"] is False
    assert gpu0["largestProfile"] == {
        "profile": "4g.40gb",
        "placementSize": 4,
        "multiprocessors": 64,
        "placementStarts": [0],
    }
    # gpu-1: 1g at 6 leaves 0-5 and 7; the largest that fits is 4g at 0: fragmentation 1 - 4/7
    assert (gpu1["freeMemorySlices"], gpu1["largestProfile"]["profile"]) == (7, "4g.40gb")
    assert gpu1["fragmentation"] == round(1 - 4 / 7, 4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--node", "node-z"], "--node node-z: no such node in the cluster", id="unknown-node"),
        pytest.param(
            ["--node", "node-c"], "--node node-c: the node publishes no ResourceSlices", id="node-without-gpus"
        ),
        pytest.param(
            ["--node", "node-a", "--driver-name", "gpu.example.com"],
            "--node node-a: the node publishes no ResourceSlices of driver gpu.example.com",
            id="other-driver",
        ),
    ],
)
def test_a_node_without_migdra_slices_is_a_usage_error(cluster: Path, args: list[str], message: str) -> None:
    result = migdra("--kubeconfig", str(cluster), *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"migdra: error: {message}")
    assert len(result.stderr.splitlines()) == 1
