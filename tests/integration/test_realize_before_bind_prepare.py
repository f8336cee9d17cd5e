"""Realize before bind with the real prepare service, simulated NVML and the local API server: a claim
allocated here is realized before binding and flagged so; kubelet's prepare finds it and creates nothing;
a failed realization says so on the claim and leaves nothing; what was realized ahead and lost its
allocation is released, also after a restart, and never on a failed read of the API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.failures import retry_conflicts
from dra_driver.kube.informer import Changes, Informer
from dra_driver.kubelet.calls import ClaimRef
from kubeletplugin.prepare.service import PrepareService
from kubeletplugin.realize_before_bind import Realizer
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, NODE, Node, read_claim_json, result, simulated_node
from tests.waiting import wait_for

ONE_G = "gpu-0-mig-1g10gb-19-0"
THREE_G = "gpu-0-mig-3g40gb-9-4"
REALIZED = f"{DRIVER}/realized"
FAILED = f"{DRIVER}/realization-failed"
WAIT = 30.0


def waiting_result(device: str) -> dict[str, Any]:
    """An allocation result of a device published with realize before bind (the allocator copies these)."""
    return result(device, bindingConditions=[REALIZED], bindingFailureConditions=[FAILED])


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, ["H100-SXM5-80GB"], api=api_server) as simulated:
        yield simulated


class Realizers:
    """Realizers of the test (stopped at its end), each on its own JSON client of the node's API server."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.started: list[Realizer] = []
        self.informers: list[Informer] = []

    def start(self, service: PrepareService) -> Realizer:
        kube = Client(configuration=self.node.api_client.configuration)
        claims = Informer(kube, CLAIMS, Changes())  # the process's claim informer, which app.py starts
        claims.start()
        self.informers.append(claims)
        realizer = Realizer(service, kube, claims, DRIVER, NODE, resync=0.2)
        realizer.start()
        self.started.append(realizer)
        assert realizer.wait_synced(WAIT)
        return realizer

    def stop_all(self) -> None:
        while self.started:
            self.started.pop().stop()
        while self.informers:
            self.informers.pop().stop()


@pytest.fixture
def realizers(node: Node) -> Iterator[Realizers]:
    started = Realizers(node)
    try:
        yield started
    finally:
        started.stop_all()


def condition(node: Node, ref: ClaimRef, device: str, condition_type: str) -> dict[str, Any] | None:
    claim = read_claim_json(node.api_client, ref)
    for entry in claim.get("status", {}).get("devices") or []:
        if entry.get("driver") == DRIVER and entry.get("pool") == NODE and entry.get("device") == device:
            for found in entry.get("conditions") or []:
                if found.get("type") == condition_type and found.get("status") == "True":
                    return found
    return None


def deallocate(node: Node, ref: ClaimRef) -> None:
    """What the scheduler does when a binding fails or times out: allocation and device status cleared
    (a read-modify-write, again on 409, as the scheduler does: the plugin may be writing the status)."""

    def attempt() -> None:
        claim = read_claim_json(node.api_client, ref)
        claim["status"].pop("allocation", None)
        claim["status"].pop("devices", None)
        client.ResourceV1Api(node.api_client).replace_namespaced_resource_claim_status(ref.name, ref.namespace, claim)

    retry_conflicts(attempt, what=f"deallocating {ref.name}")


def a_pass_after(realizer: Realizer, seen: Callable[[Realizer], bool]) -> None:
    """Wait until the realizer's cache shows what ``seen`` looks for, and then a whole pass more."""
    wait_for("the realizer's cache to see the change", lambda: seen(realizer))
    after = realizer.passes
    wait_for("a whole pass of the realizer after the change", lambda: realizer.passes >= after + 2)


def mig_uuids(node: Node) -> list[str]:
    return [ci[2] for *_, cis in node.instances() for ci in cis]


def test_a_claim_allocated_here_is_realized_before_binding_and_kubelet_finds_it_ready(
    node: Node, realizers: Realizers
) -> None:
    service = node.service()
    realizer = realizers.start(service)
    ref = node.claim("early", [waiting_result(ONE_G)])
    realized = wait_for("the realized condition", lambda: condition(node, ref, ONE_G, REALIZED))
    assert realized["reason"] == "MigInstanceRealized"
    assert node.instances() == [(0, 7, 19, 0, [(0, 0, mig_uuids(node)[0])])]
    record = service.realized_ahead()
    assert [r.claim_uid for r in record] == [ref.uid]
    uuids = mig_uuids(node)
    mutations = node.nvml_mutations()

    prepared = service.prepare([ref])[ref.uid]  # kubelet, once the pod is bound

    assert prepared.error == ""
    assert [d.device_name for d in prepared.devices] == [ONE_G]
    assert node.nvml_mutations() == mutations, "kubelet's prepare created nothing"
    assert mig_uuids(node) == uuids
    assert service.realized_ahead() == (), "kubelet owns it now"
    # Deallocated from now on (the pod ended, say): kubelet unprepares, never the realizer.
    deallocate(node, ref)
    a_pass_after(realizer, lambda r: not (r.claims.get("default", "early") or {}).get("status", {}).get("allocation"))
    assert mig_uuids(node) == uuids
    assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == []


def test_a_claim_without_binding_conditions_is_left_to_kubelet(node: Node, realizers: Realizers) -> None:
    service = node.service()
    realizer = realizers.start(service)
    ref = node.claim("plain", [result(ONE_G)])
    a_pass_after(realizer, lambda r: r.claims.get("default", "plain") is not None)
    assert node.instances() == []
    assert node.nvml_mutations() == 0
    assert condition(node, ref, ONE_G, REALIZED) is None


def test_a_failed_realization_says_why_on_the_claim_and_leaves_nothing(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    plan = {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "error": "InsufficientResources"}]}
    with simulated_node(tmp_path, ["H100-SXM5-80GB"], api=api_server, faults=plan) as node:
        started = Realizers(node)
        try:
            service = node.service()
            started.start(service)
            ref = node.claim("unlucky", [waiting_result(THREE_G)])
            failed = wait_for("the realization-failed condition", lambda: condition(node, ref, THREE_G, FAILED))
            assert failed["reason"] == "RealizationFailed"
            assert THREE_G in failed["message"]
            assert "default/unlucky" in failed["message"]
            assert condition(node, ref, THREE_G, REALIZED) is None
            assert node.instances() == []
            assert service.realized_ahead() == ()
            assert not node.record_path(ref.uid).exists()
        finally:
            started.stop_all()


@pytest.mark.parametrize("lost", ["deallocated", "deleted"])
def test_a_claim_realized_ahead_that_loses_its_allocation_is_released(
    node: Node, realizers: Realizers, lost: str
) -> None:
    service = node.service()
    realizers.start(service)
    ref = node.claim("orphan", [waiting_result(ONE_G)])
    keep = node.claim("keep", [waiting_result(THREE_G)])
    wait_for("the realized condition", lambda: condition(node, ref, ONE_G, REALIZED))
    wait_for("the realized condition of the other claim", lambda: condition(node, keep, THREE_G, REALIZED))
    assert len(node.instances()) == 2
    if lost == "deallocated":
        deallocate(node, ref)
    else:
        client.ResourceV1Api(node.api_client).delete_namespaced_resource_claim(ref.name, ref.namespace)

    # A release destroys the instance first and drops the record after it: wait for both.
    wait_for(
        "the released claim's instance to be destroyed and its record dropped",
        lambda: len(node.instances()) == 1 and not node.record_path(ref.uid).exists(),
    )
    assert [gi[3] for gi in node.instances()] == [4], "the other claim's 3g at placement 4 stays"
    assert [r.claim_uid for r in service.realized_ahead()] == [keep.uid]
    assert not node.record_path(ref.uid).exists()
    assert not (node.cdi_dir / f"{DRIVER}-claim_{ref.uid}.json").exists()


def test_a_restarted_plugin_releases_what_it_realized_ahead_for_a_claim_that_went_away(
    node: Node, realizers: Realizers
) -> None:
    service = node.service()
    realizers.start(service)
    gone = node.claim("gone", [waiting_result(ONE_G)])
    kept = node.claim("kept", [waiting_result(THREE_G)])
    wait_for("the first claim realized", lambda: condition(node, gone, ONE_G, REALIZED))
    wait_for("the second claim realized", lambda: condition(node, kept, THREE_G, REALIZED))
    realizers.stop_all()
    service.close()
    client.ResourceV1Api(node.api_client).delete_namespaced_resource_claim(gone.name, gone.namespace)

    restarted = node.service()  # recovery adopts both records, still marked realized ahead
    assert sorted(r.name for r in restarted.realized_ahead()) == ["gone", "kept"]
    realizers.start(restarted)

    # The instance goes first, then its record: wait for both (between them a loaded machine can stop).
    wait_for(
        "the instance and the record of the deleted claim to go",
        lambda: len(node.instances()) == 1 and [r.name for r in restarted.realized_ahead()] == ["kept"],
    )
    assert [r.name for r in restarted.realized_ahead()] == ["kept"]
    assert condition(node, kept, THREE_G, REALIZED) is not None


def test_nothing_is_released_while_the_claim_cannot_be_read(
    node: Node, realizers: Realizers, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = node.service()
    realizer = realizers.start(service)
    ref = node.claim("unread", [waiting_result(ONE_G)])
    wait_for("the realized condition", lambda: condition(node, ref, ONE_G, REALIZED))
    original = realizer._client.get
    reads: list[str] = []

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[2])
        raise ApiException(status=503, reason="Service Unavailable")

    monkeypatch.setattr(realizer._client, "get", unavailable)
    deallocate(node, ref)
    a_pass_after(realizer, lambda r: not (r.claims.get("default", "unread") or {}).get("status", {}).get("allocation"))
    wait_for("the realizer to try reading the claim again", lambda: len(reads) >= 2)
    assert len(node.instances()) == 1, "a failed read destroys nothing"
    assert [r.claim_uid for r in service.realized_ahead()] == [ref.uid]

    monkeypatch.setattr(realizer._client, "get", original)
    # The instance goes first, then its record: wait for both (between them a loaded machine can stop).
    wait_for(
        "the release once the claim can be read",
        lambda: not node.instances() and service.realized_ahead() == (),
    )
    assert not node.instances()
    assert service.realized_ahead() == ()


def test_a_realized_condition_is_never_written_for_an_allocation_made_since(node: Node, realizers: Realizers) -> None:
    """The condition write re-reads the claim: an allocation that changed meanwhile does not get it."""
    service = node.service()
    realizer = realizers.start(service)
    realizers.stop_all()  # driven by hand below
    ref = node.claim("moving", [waiting_result(ONE_G)])
    allocation = read_claim_json(node.api_client, ref)["status"]["allocation"]
    results = service.realize_ahead([ref])
    assert service.flush_reports()  # the plugin's own status write (Ready) done: the edits below do not race it
    deallocate(node, ref)  # an allocation is immutable: a new one comes after a deallocation
    claim = read_claim_json(node.api_client, ref)
    claim["status"]["allocation"] = {**allocation, "devices": {"results": [waiting_result(THREE_G)], "config": []}}
    client.ResourceV1Api(node.api_client).replace_namespaced_resource_claim_status(ref.name, ref.namespace, claim)

    realizer._settle(ref, results[ref.uid])

    assert condition(node, ref, ONE_G, REALIZED) is None
    assert condition(node, ref, THREE_G, REALIZED) is None
