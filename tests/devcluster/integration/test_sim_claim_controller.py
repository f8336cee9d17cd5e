"""The local cluster's resourceclaim controller against the local API server (no scheduler, no kubelet).

Pods, templates and claims are written through the client, allocations and reservations by hand as the
scheduler would write them; the controller runs for real and every assertion reads API state, polled
with a deadline: claims generated from templates, reservations and allocations ended with their pods,
generated claims of finished pods deleted, and no second claim after a restart.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, PODS, Client
from migdra_devcluster.apiserver import LocalAPIServer
from migdra_devcluster.claimcontroller import ClaimController
from tests.sim_objects import (
    DRIVER,
    NAMESPACE,
    Api,
    allocated_devices,
    claim,
    mig_request,
    pod,
    reserved_names,
    template,
)
from tests.waiting import stays, wait_for

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


@pytest.fixture
def cluster(api_server: LocalAPIServer) -> Iterator[Api]:
    assert api_server.kubeconfig_path is not None
    client = Client(api_server.kubeconfig_path)
    try:
        yield Api(client)
    finally:
        client.close()


@contextlib.contextmanager
def controller(api: Api) -> Iterator[ClaimController]:
    component = ClaimController(api.client)
    component.start()
    try:
        assert component.wait_synced(20)
        yield component
    finally:
        component.stop()


def allocate(api: Api, name: str, *pods: dict[str, Any], device: str = "gpu-0-mig-1g10gb-19-6") -> dict[str, Any]:
    """As the scheduler does: the delete-protection finalizer, then allocation, reservation and the
    driver's device status."""
    current = api.claim(name)
    assert current is not None
    protected = copy.deepcopy(current)
    protected["metadata"]["finalizers"] = [*(current["metadata"].get("finalizers") or []), DELETE_PROTECTION]
    current = api.client.update(CLAIMS, protected)
    updated = copy.deepcopy(current)
    request = current["spec"]["devices"]["requests"][0]["name"]
    updated["status"] = {
        "allocation": {
            "devices": {"results": [{"request": request, "driver": DRIVER, "pool": "n1", "device": device}]}
        },
        "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods],
        "devices": [
            {
                "driver": DRIVER,
                "pool": "n1",
                "device": device,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Prepared",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        ],
    }
    return api.client.update(CLAIMS, updated, "status")


def released(api: Api, name: str) -> bool:
    """Not reserved, not allocated, no device status, no delete-protection finalizer."""
    current = api.claim(name)
    if current is None:
        return False
    status = current.get("status") or {}
    return (
        not status.get("reservedFor")
        and not status.get("allocation")
        and not status.get("devices")
        and DELETE_PROTECTION not in (current["metadata"].get("finalizers") or [])
    )


def finish(api: Api, pod_name: str, phase: str = "Succeeded") -> None:
    api.client.merge_patch(PODS, NAMESPACE, pod_name, {"status": {"phase": phase}}, "status")


def claim_statuses(api: Api, pod_name: str) -> list[dict[str, Any]]:
    current = api.pod(pod_name) or {}
    return list((current.get("status") or {}).get("resourceClaimStatuses") or [])


# -- claims from templates -------------------------------------------------------------------------


def test_claim_from_template_has_kube_metadata_and_is_recorded_on_the_pod(cluster: Api) -> None:
    api = cluster
    stored_template = api.create_template(
        template(
            "one-mig",
            mig_request("gpu", "2g.20gb"),
            labels={"team": "ml"},
            annotations={"example.com/note": "from the template"},
        )
    )
    created = api.client.create(PODS, pod("trainer", templates={"accel": "one-mig"}))
    with controller(api):
        [status] = wait_for("the claim recorded on the pod", lambda: claim_statuses(api, "trainer"))
        assert status["name"] == "accel"
        generated = api.claim(status["resourceClaimName"])
    assert generated is not None
    meta = generated["metadata"]
    assert meta["generateName"] == "trainer-accel-"
    assert meta["name"].startswith("trainer-accel-")
    assert len(meta["name"]) == len("trainer-accel-") + 5
    assert generated["spec"] == stored_template["spec"]["spec"]
    assert meta["labels"] == {"team": "ml"}
    assert meta["annotations"] == {"example.com/note": "from the template", POD_CLAIM_NAME: "accel"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert [c["metadata"]["name"] for c in api.claims()] == [meta["name"]]
    assert not (generated.get("status") or {}).get("allocation")


def test_one_claim_per_template_entry_and_a_long_name_still_fits(cluster: Api) -> None:
    api = cluster
    api.create_template(template("one-mig"))
    long_name = "a-pod-with-a-rather-long-name-for-a-training-job-0123456789"
    api.client.create(PODS, pod(long_name, templates={"first": "one-mig", "second": "one-mig"}))
    with controller(api):
        wait_for("both claims recorded", lambda: len(claim_statuses(api, long_name)) == 2)
    statuses = claim_statuses(api, long_name)
    names = {s["name"]: s["resourceClaimName"] for s in statuses}
    assert set(names) == {"first", "second"}
    assert names["first"] != names["second"]
    for entry, name in names.items():
        generated = api.claim(name)
        assert generated is not None
        assert len(name) <= 63
        assert f"-{entry[:3]}" in name, "the entry's name survives the shortening"
        assert generated["metadata"]["annotations"][POD_CLAIM_NAME] == entry
    assert len(api.claims()) == 2


def test_missing_template_is_reported_then_the_claim_is_created(cluster: Api) -> None:
    api = cluster
    api.client.create(PODS, pod("early", templates={"gpu": "later"}))
    with controller(api):
        [event] = wait_for("a Warning Event", lambda: api.events("early", "FailedResourceClaimCreation"))
        assert event["type"] == "Warning"
        assert '"later"' in event["message"]
        assert "not found" in event["message"]
        stays("no claim without the template", lambda: not api.claims() and not claim_statuses(api, "early"))
        api.create_template(template("later"))
        [status] = wait_for("the claim recorded on the pod", lambda: claim_statuses(api, "early"))
    assert status["name"] == "gpu"
    assert [c["metadata"]["name"] for c in api.claims()] == [status["resourceClaimName"]]


def test_an_existing_claim_for_the_entry_is_reused_not_duplicated(cluster: Api) -> None:
    """Restart safety: a claim created before a crash (annotation and owner set, pod status not yet
    written) is adopted."""
    api = cluster
    api.create_template(template("one-mig"))
    created = api.client.create(PODS, pod("p", templates={"gpu": "one-mig"}))
    earlier = claim("p-gpu-abcde")
    earlier["metadata"]["annotations"] = {POD_CLAIM_NAME: "gpu"}
    earlier["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "p",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    api.client.create(CLAIMS, earlier)
    with controller(api):
        [status] = wait_for("the claim recorded on the pod", lambda: claim_statuses(api, "p"))
        assert status == {"name": "gpu", "resourceClaimName": "p-gpu-abcde"}
        stays("no second claim", lambda: len(api.claims()) == 1)


# -- reservations and allocations end with their pods -------------------------------------------


def test_deleting_an_unbound_pod_deallocates_its_claim(cluster: Api) -> None:
    api = cluster
    api.client.create(CLAIMS, claim("c"))
    waiting = api.client.create(PODS, pod("waiting", claims={"gpu": "c"}))
    allocate(api, "c", waiting)
    with controller(api):
        stays("the reservation kept while the pod exists", lambda: reserved_names(api.claim("c") or {}) == ["waiting"])
        assert api.client.delete(PODS, NAMESPACE, "waiting")
        wait_for("c released", lambda: released(api, "c"))
    assert api.pod("waiting") is None


def test_a_finished_pod_releases_a_claim_it_does_not_own(cluster: Api) -> None:
    api = cluster
    api.client.create(CLAIMS, claim("c"))
    body = pod("job", claims={"gpu": "c"})
    body["spec"]["nodeName"] = "n1"
    job = api.client.create(PODS, body)
    allocate(api, "c", job)
    with controller(api):
        stays("the reservation kept while the pod runs", lambda: reserved_names(api.claim("c") or {}) == ["job"])
        finish(api, "job")
        wait_for("c released", lambda: released(api, "c"))
        stays("a claim the pod does not own is kept", lambda: api.claim("c") is not None)


def test_a_reservation_for_a_recreated_pod_of_the_same_name_ends(cluster: Api) -> None:
    api = cluster
    api.client.create(CLAIMS, claim("c"))
    first = api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    allocate(api, "c", first)
    assert api.client.delete(PODS, NAMESPACE, "p")
    api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    with controller(api):
        wait_for("c released", lambda: released(api, "c"))


def test_a_claim_reserved_for_two_pods_stays_allocated_while_one_remains(cluster: Api) -> None:
    api = cluster
    api.client.create(CLAIMS, claim("shared"))
    one = api.client.create(PODS, pod("one", claims={"gpu": "shared"}))
    two = api.client.create(PODS, pod("two", claims={"gpu": "shared"}))
    allocate(api, "shared", one, two)
    with controller(api):
        assert api.client.delete(PODS, NAMESPACE, "one")
        wait_for("one's reservation removed", lambda: reserved_names(api.claim("shared") or {}) == ["two"])
        current = api.claim("shared")
        assert current is not None
        assert allocated_devices(current) == [(DRIVER, "n1", "gpu-0-mig-1g10gb-19-6")]
        assert current["status"]["devices"]
        assert DELETE_PROTECTION in current["metadata"]["finalizers"]
        stays(
            "the allocation kept for two",
            lambda: allocated_devices(api.claim("shared") or {}) and reserved_names(api.claim("shared") or {}),
        )
        finish(api, "two", "Failed")
        wait_for("shared released", lambda: released(api, "shared"))


def test_the_generated_claim_of_a_finished_pod_is_deallocated_and_deleted(cluster: Api) -> None:
    api = cluster
    api.create_template(template("one-mig"))
    api.client.create(PODS, pod("batch", templates={"gpu": "one-mig"}))
    with controller(api):
        [status] = wait_for("the claim recorded on the pod", lambda: claim_statuses(api, "batch"))
    name = status["resourceClaimName"]
    batch = api.pod("batch")
    assert batch is not None
    allocate(api, name, batch)
    with controller(api):
        stays("the claim kept while the pod runs", lambda: reserved_names(api.claim(name) or {}) == ["batch"])
        finish(api, "batch")
        wait_for("the generated claim deleted", lambda: api.claim(name) is None)
        assert api.pod("batch") is not None  # not the garbage collector: the owner still exists
        stays("no new claim for a finished pod", lambda: not api.claims())


def test_the_finalizer_of_a_claim_being_allocated_is_left_alone(cluster: Api) -> None:
    api = cluster
    being_allocated = claim("being-allocated")
    being_allocated["metadata"]["finalizers"] = [DELETE_PROTECTION]
    api.client.create(CLAIMS, being_allocated)
    # Something the controller must act on, to know it has looked at the claims.
    api.client.create(CLAIMS, claim("stale"))
    ghost = {"metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"}}
    allocate(api, "stale", ghost)
    with controller(api):
        wait_for("the stale reservation ended", lambda: released(api, "stale"))
        stays(
            "the finalizer kept",
            lambda: DELETE_PROTECTION in ((api.claim("being-allocated") or {})["metadata"].get("finalizers") or []),
        )
