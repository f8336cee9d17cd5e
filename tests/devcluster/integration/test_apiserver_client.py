"""The local API server against the official ``kubernetes`` Python client, over real HTTP.

Conformance-style: each test drives the client exactly as driver code would and checks the behaviour
kube-apiserver has (status codes, Status bodies, resourceVersion and generation rules, subresources,
finalizers, garbage collection, patches, selectors, paging, authentication).  The rules of
resource.k8s.io validation belong to the validation package's own tests; here only its wiring is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from migdra_devcluster.apiserver import LocalAPIServer
from tests.waiting import wait_for

pytestmark = pytest.mark.api_server(history_limit=50, gc_interval=0.1)

DRIVER = "gpu.migdra.dev"


@pytest.fixture
def api_client(api_server: LocalAPIServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        yield c


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def resource(api_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client)


def status_of(exc: ApiException) -> dict[str, Any]:
    """The Status body of an error response."""
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def slice_body(name: str, node: str = "node-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0-mig-1g-10gb-0",
                    "attributes": {"profile": {"string": "1g.10gb"}},
                    "capacity": {"memory": {"value": "10Gi"}},
                }
            ],
        },
    }


def claim_spec() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}


# Registry key -> (api class, method suffix, namespaced, body factory): one row per served resource.


def workload_body(name: str) -> dict[str, Any]:
    """A DaemonSet's or Deployment's smallest spec: a selector and the template it selects."""
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    }


def role_ref(kind: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": "r"}


RESOURCES: dict[str, tuple[type, str, bool, Callable[[str], dict[str, Any]]]] = {
    "namespaces": (client.CoreV1Api, "namespace", False, lambda n: {"metadata": {"name": n}}),
    "nodes": (client.CoreV1Api, "node", False, lambda n: {"metadata": {"name": n}}),
    "pods": (
        client.CoreV1Api,
        "pod",
        True,
        lambda n: {"metadata": {"name": n}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    ),
    "events": (
        client.CoreV1Api,
        "event",
        True,
        lambda n: {"metadata": {"name": n}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Tested"},
    ),
    "serviceaccounts": (client.CoreV1Api, "service_account", True, lambda n: {"metadata": {"name": n}}),
    "configmaps": (client.CoreV1Api, "config_map", True, lambda n: {"metadata": {"name": n}, "data": {"k": "v"}}),
    "secrets": (client.CoreV1Api, "secret", True, lambda n: {"metadata": {"name": n}, "data": {"k": "dg=="}}),
    "events.events.k8s.io": (
        client.EventsV1Api,
        "event",
        True,
        lambda n: {
            "metadata": {"name": n},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "Tested",
            "action": "Test",
            "type": "Normal",
            "reportingController": "migdra.dev/test",
            "reportingInstance": "test-1",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        },
    ),
    "leases.coordination.k8s.io": (
        client.CoordinationV1Api,
        "lease",
        True,
        lambda n: {"metadata": {"name": n}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}},
    ),
    "services": (
        client.CoreV1Api,
        "service",
        True,
        lambda n: {"metadata": {"name": n}, "spec": {"ports": [{"port": 80}]}},
    ),
    "daemonsets.apps": (client.AppsV1Api, "daemon_set", True, workload_body),
    "deployments.apps": (client.AppsV1Api, "deployment", True, workload_body),
    "clusterroles.rbac.authorization.k8s.io": (
        client.RbacAuthorizationV1Api,
        "cluster_role",
        False,
        lambda n: {"metadata": {"name": n}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    ),
    "clusterrolebindings.rbac.authorization.k8s.io": (
        client.RbacAuthorizationV1Api,
        "cluster_role_binding",
        False,
        lambda n: {
            "metadata": {"name": n},
            "roleRef": role_ref("ClusterRole"),
            "subjects": [{"kind": "User", "name": "u"}],
        },
    ),
    "roles.rbac.authorization.k8s.io": (
        client.RbacAuthorizationV1Api,
        "role",
        True,
        lambda n: {"metadata": {"name": n}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    ),
    "rolebindings.rbac.authorization.k8s.io": (
        client.RbacAuthorizationV1Api,
        "role_binding",
        True,
        lambda n: {"metadata": {"name": n}, "roleRef": role_ref("Role"), "subjects": [{"kind": "User", "name": "u"}]},
    ),
    "validatingadmissionpolicies.admissionregistration.k8s.io": (
        client.AdmissionregistrationV1Api,
        "validating_admission_policy",
        False,
        lambda n: {"metadata": {"name": n}, "spec": {"validations": [{"expression": "true"}]}},
    ),
    "validatingadmissionpolicybindings.admissionregistration.k8s.io": (
        client.AdmissionregistrationV1Api,
        "validating_admission_policy_binding",
        False,
        lambda n: {"metadata": {"name": n}, "spec": {"policyName": "p", "validationActions": ["Deny"]}},
    ),
    "networkpolicies.networking.k8s.io": (
        client.NetworkingV1Api,
        "network_policy",
        True,
        lambda n: {"metadata": {"name": n}, "spec": {"podSelector": {}}},
    ),
    "resourceslices.resource.k8s.io": (client.ResourceV1Api, "resource_slice", False, slice_body),
    "resourceclaims.resource.k8s.io": (
        client.ResourceV1Api,
        "resource_claim",
        True,
        lambda n: {"metadata": {"name": n}, "spec": claim_spec()},
    ),
    "resourceclaimtemplates.resource.k8s.io": (
        client.ResourceV1Api,
        "resource_claim_template",
        True,
        lambda n: {"metadata": {"name": n}, "spec": {"spec": claim_spec()}},
    ),
    "deviceclasses.resource.k8s.io": (
        client.ResourceV1Api,
        "device_class",
        False,
        lambda n: {"metadata": {"name": n}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
    ),
    "devicetaintrules.resource.k8s.io": (
        client.ResourceV1Api,
        "device_taint_rule",
        False,
        lambda n: {
            "metadata": {"name": n},
            "spec": {
                "deviceSelector": {"driver": DRIVER},
                "taint": {"key": "migdra.dev/broken", "effect": "NoSchedule"},
            },
        },
    ),
}


@pytest.mark.parametrize("plural", list(RESOURCES))
def test_crud_of_every_resource(api_client: client.ApiClient, plural: str) -> None:
    api_class, suffix, namespaced, body = RESOURCES[plural]
    typed = api_class(api_client)
    scope = ("namespaced_" if namespaced else "") + suffix
    ns: tuple[str, ...] = ("default",) if namespaced else ()

    created = getattr(typed, f"create_{scope}")(*ns, body("crud-1"))
    assert created.metadata.uid
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.creation_timestamp is not None

    read = getattr(typed, f"read_{scope}")("crud-1", *ns)
    assert read.metadata.uid == created.metadata.uid

    listing = getattr(typed, f"list_{scope}")(*ns)
    assert "crud-1" in [item.metadata.name for item in listing.items]
    assert int(listing.metadata.resource_version) >= int(created.metadata.resource_version)

    changed = body("crud-1")
    changed["metadata"]["labels"] = {"updated": "yes"}
    replaced = getattr(typed, f"replace_{scope}")("crud-1", *ns, changed)
    # kube's namespace strategy keeps its name label on every namespace, whatever the update says
    assert {k: v for k, v in replaced.metadata.labels.items() if k != "kubernetes.io/metadata.name"} == {
        "updated": "yes"
    }
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)

    getattr(typed, f"delete_{scope}")("crud-1", *ns)
    wait_for("the deleted object to go", lambda: gone(lambda: getattr(typed, f"read_{scope}")("crud-1", *ns)))


def test_create_existing_name_is_already_exists(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "twice"}})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", {"metadata": {"name": "twice"}})
    body = status_of(info.value)
    assert (info.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'configmaps "twice" already exists'
    assert body["details"] == {"name": "twice", "kind": "configmaps"}


def test_generate_name_gets_a_unique_suffix(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_config_map("default", {"metadata": {"generateName": "gen-"}})
    second = core.create_namespaced_config_map("default", {"metadata": {"generateName": "gen-"}})
    assert first.metadata.name.startswith("gen-")
    assert len(first.metadata.name) == len("gen-") + 5
    assert first.metadata.name != second.metadata.name


def test_update_with_stale_resource_version_conflicts(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "occ"}, "data": {"n": "0"}})
    stale = cm.metadata.resource_version
    body = {"metadata": {"name": "occ", "resourceVersion": stale}, "data": {"n": "1"}}
    core.replace_namespaced_config_map("occ", "default", body)
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_config_map("occ", "default", {**body, "data": {"n": "2"}})
    status = status_of(info.value)
    assert (info.value.status, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert core.read_namespaced_config_map("occ", "default").data == {"n": "1"}


def test_update_without_resource_version_is_unconditional(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "blind"}, "data": {"n": "0"}})
    core.patch_namespaced_config_map("blind", "default", {"data": {"n": "1"}})
    updated = core.replace_namespaced_config_map(
        "blind", "default", {"metadata": {"name": "blind"}, "data": {"n": "2"}}
    )
    assert updated.data == {"n": "2"}


def test_generation_bumps_on_spec_changes_only(resource: client.ResourceV1Api) -> None:
    body = RESOURCES["deviceclasses.resource.k8s.io"][3]("gen-class")
    created = resource.create_device_class(body)
    assert created.metadata.generation == 1
    labelled = resource.patch_device_class("gen-class", {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 1
    respec = resource.patch_device_class(
        "gen-class", {"spec": {"selectors": [{"cel": {"expression": "device.driver == 'x'"}}]}}
    )
    assert respec.metadata.generation == 2


def test_main_resource_writes_ignore_status(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "st"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
    )
    assert pod.status.phase == "Pending", "status sent on create is replaced by the initial status"
    replaced = core.patch_namespaced_pod(
        "st", "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}}
    )
    assert replaced.status.phase == "Pending"
    assert replaced.metadata.labels == {"x": "y"}


def test_status_subresource_writes_only_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", {"metadata": {"name": "sub"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    patched = core.patch_namespaced_pod_status(
        "sub",
        "default",
        {"metadata": {"labels": {"ignored": "yes"}}, "spec": {"nodeName": "ignored"}, "status": {"phase": "Running"}},
    )
    assert patched.status.phase == "Running"
    assert patched.metadata.labels is None
    assert patched.spec.node_name is None
    current = core.read_namespaced_pod("sub", "default")
    current_dict = client.ApiClient().sanitize_for_serialization(current)
    current_dict["status"]["phase"] = "Succeeded"
    current_dict["spec"]["containers"][0]["image"] = "changed"
    replaced = core.replace_namespaced_pod_status("sub", "default", current_dict)
    assert replaced.status.phase == "Succeeded"
    assert replaced.spec.containers[0].image == "i"
    assert core.read_namespaced_pod_status("sub", "default").status.phase == "Succeeded"


def test_resource_claim_status_is_written_through_status_only(resource: client.ResourceV1Api) -> None:
    allocation = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}]}}
    claim = {
        "metadata": {"name": "c1"},
        "spec": claim_spec(),
        "status": {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]},
    }
    created = resource.create_namespaced_resource_claim("default", claim)
    assert created.status is None or not created.status.reserved_for
    status = {"status": {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}]}}
    written = resource.patch_namespaced_resource_claim_status("c1", "default", status)
    assert [r.uid for r in written.status.reserved_for] == ["u-1"]
    relabelled = resource.patch_namespaced_resource_claim(
        "c1", "default", {"metadata": {"labels": {"a": "b"}}, "status": None}
    )
    assert [r.uid for r in relabelled.status.reserved_for] == ["u-1"], "a main-resource patch cannot clear status"


def test_finalizers_defer_deletion_until_removed(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "fin", "finalizers": ["migdra.dev/hold"]}})
    core.delete_namespaced_config_map("fin", "default")
    held = core.read_namespaced_config_map("fin", "default")
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.deletion_grace_period_seconds == 0
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map(
            "fin", "default", {"metadata": {"finalizers": ["migdra.dev/hold", "migdra.dev/more"]}}
        )
    assert status_of(info.value)["reason"] == "Invalid"
    core.patch_namespaced_config_map(
        "fin", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    assert gone(lambda: core.read_namespaced_config_map("fin", "default"))


def _claim_owned_by(pod: Any, name: str) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid}
    return {"metadata": {"name": name, "ownerReferences": [owner]}, "spec": claim_spec()}


def _pod(core: client.CoreV1Api, name: str) -> Any:
    return core.create_namespaced_pod(
        "default", {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )


def wait_for_a_collection_pass(resource: client.ResourceV1Api, canary: str) -> None:
    """Return once the garbage collector has run a pass that began after this call.

    Every pass deletes a claim whose owner never existed; once this ``canary`` is gone, the collector
    has looked at everything written before it.  A test that something was *not* collected waits for
    this instead of sleeping and hoping the collector looked in the meantime.
    """
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "never-existed", "uid": "00000000-0000-0000-0000-000000000000"}
    body = {"metadata": {"name": canary, "ownerReferences": [owner]}, "spec": claim_spec()}
    resource.create_namespaced_resource_claim("default", body)
    wait_for(
        "the canary to be collected", lambda: gone(lambda: resource.read_namespaced_resource_claim(canary, "default"))
    )


def test_claim_owned_by_pod_is_collected_after_the_pod_is_deleted(
    core: client.CoreV1Api, resource: client.ResourceV1Api
) -> None:
    pod = _pod(core, "owner")
    resource.create_namespaced_resource_claim("default", _claim_owned_by(pod, "owned"))
    wait_for_a_collection_pass(resource, "canary")
    assert not gone(lambda: resource.read_namespaced_resource_claim("owned", "default")), "owner alive: kept"
    core.delete_namespaced_pod("owner", "default")
    wait_for(
        "the owned claim to be collected",
        lambda: gone(lambda: resource.read_namespaced_resource_claim("owned", "default")),
    )


def test_orphan_propagation_keeps_dependents_and_drops_the_reference(
    core: client.CoreV1Api, resource: client.ResourceV1Api
) -> None:
    pod = _pod(core, "owner-o")
    resource.create_namespaced_resource_claim("default", _claim_owned_by(pod, "orphan"))
    core.delete_namespaced_pod("owner-o", "default", propagation_policy="Orphan")
    wait_for_a_collection_pass(resource, "canary")
    claim = resource.read_namespaced_resource_claim("orphan", "default")
    assert claim.metadata.owner_references is None


def test_foreground_propagation_deletes_dependents_first(
    core: client.CoreV1Api, resource: client.ResourceV1Api
) -> None:
    pod = _pod(core, "owner-f")
    resource.create_namespaced_resource_claim(
        "default",
        {
            **_claim_owned_by(pod, "fg"),
            "metadata": {**_claim_owned_by(pod, "fg")["metadata"], "finalizers": ["migdra.dev/hold"]},
        },
    )
    core.delete_namespaced_pod("owner-f", "default", propagation_policy="Foreground")
    wait_for(
        "the claim to be marked for deletion",
        lambda: resource.read_namespaced_resource_claim("fg", "default").metadata.deletion_timestamp is not None,
    )
    owner = core.read_namespaced_pod("owner-f", "default")
    assert "foregroundDeletion" in owner.metadata.finalizers, "the owner waits for its dependents"
    resource.patch_namespaced_resource_claim(
        "fg", "default", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    wait_for("the owner to go", lambda: gone(lambda: core.read_namespaced_pod("owner-f", "default")))


def test_merge_patch_adds_and_removes_labels(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "mp", "labels": {"a": "1", "b": "2"}}})
    patched = core.patch_namespaced_config_map(
        "mp", "default", {"metadata": {"labels": {"a": None, "c": "3"}}}, _content_type="application/merge-patch+json"
    )
    assert patched.metadata.labels == {"b": "2", "c": "3"}


def test_json_patch_operations(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "jp"}, "data": {"a": "1", "b": "2"}})
    patched = core.patch_namespaced_config_map(
        "jp",
        "default",
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "10"},
            {"op": "remove", "path": "/data/b"},
            {"op": "add", "path": "/metadata/labels", "value": {"x~y": "z"}},
            {"op": "move", "from": "/metadata/labels/x~0y", "path": "/metadata/labels/moved"},
        ],
    )
    assert patched.data == {"a": "10"}
    assert patched.metadata.labels == {"moved": "z"}
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map("jp", "default", [{"op": "test", "path": "/data/a", "value": "nope"}])
    assert info.value.status == 422


def test_strategic_merge_patch_merges_lists_by_key(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "smp", "finalizers": ["a.dev/one"]},
            "spec": {"containers": [{"name": "main", "image": "v1"}, {"name": "side", "image": "s1"}]},
        },
    )
    core.patch_namespaced_pod_status(
        "smp",
        "default",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Init", "status": "True"}]}},
    )
    status = core.patch_namespaced_pod_status(
        "smp", "default", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {(c.type, c.status) for c in status.status.conditions} == {("Ready", "True"), ("Init", "True")}
    pod = core.patch_namespaced_pod(
        "smp",
        "default",
        {
            "metadata": {"finalizers": ["a.dev/two"]},
            "spec": {"containers": [{"name": "main", "image": "v2"}, {"name": "side", "$patch": "delete"}]},
        },
    )
    assert [(c.name, c.image) for c in pod.spec.containers] == [("main", "v2")]
    assert pod.metadata.finalizers == ["a.dev/one", "a.dev/two"], "finalizers merge as a set"


def test_namespaced_objects_need_an_existing_namespace(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("nowhere", {"metadata": {"name": "x"}})
    body = status_of(info.value)
    assert (info.value.status, body["reason"], body["message"]) == (404, "NotFound", 'namespaces "nowhere" not found')


def test_namespace_deletion_removes_its_objects(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "inside"}})
    core.delete_namespace("doomed")
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("doomed", {"metadata": {"name": "late"}})
    assert info.value.status in (403, 404)
    wait_for("the namespace to go", lambda: gone(lambda: core.read_namespace("doomed")))
    assert gone(lambda: core.read_namespaced_config_map("inside", "doomed"))


def test_system_namespaces_cannot_be_deleted(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.delete_namespace("default")
    body = status_of(info.value)
    assert (info.value.status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'


def test_error_bodies_are_status_objects(api_client: client.ApiClient, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.read_namespaced_config_map("missing", "default")
    body = status_of(info.value)
    assert (body["reason"], body["details"]) == ("NotFound", {"name": "missing", "kind": "configmaps"})

    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    body = status_of(info.value)
    assert (info.value.status, body["reason"]) == (400, "BadRequest")
    assert "field label not supported: spec.bogus" in body["message"]

    response = api_client.call_api(
        "PUT", f"{api_client.configuration.host}/api/v1/namespaces/default/configmaps", body={}
    )
    body = json.loads(response.read())
    assert (response.status, body["kind"], body["reason"], body["code"]) == (405, "Status", "MethodNotAllowed", 405)

    response = api_client.call_api("GET", f"{api_client.configuration.host}/apis/nope.example.com/v1/things")
    body = json.loads(response.read())
    assert (response.status, body["reason"]) == (404, "NotFound")


def test_invalid_metadata_is_422_with_causes(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", {"metadata": {"name": "Bad_Name"}})
    body = status_of(info.value)
    assert (info.value.status, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": ')
    assert body["details"]["kind"] == "ConfigMap"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["details"]["causes"][0]["reason"] == "FieldValueInvalid"

    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "x", "labels": {"bad key!": "v", "k": "bad value!"}}}
        )
    body = status_of(info.value)
    assert body["message"].startswith('ConfigMap "x" is invalid: [metadata.labels: Invalid value: ')
    assert len(body["details"]["causes"]) == 2


def test_resource_k8s_io_validation_hook_is_called(resource: client.ResourceV1Api) -> None:
    bad = slice_body("bad-slice")
    bad["spec"]["driver"] = "Not A Driver"
    with pytest.raises(ApiException) as info:
        resource.create_resource_slice(bad)
    body = status_of(info.value)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('ResourceSlice.resource.k8s.io "bad-slice" is invalid: ')
    assert "spec.driver" in [cause["field"] for cause in body["details"]["causes"]]


def test_field_validation_strict_warn_ignore(api_client: client.ApiClient, core: client.CoreV1Api) -> None:
    # The client's own models refuse unknown fields, so send the raw body as kubectl would.
    collection = f"{api_client.configuration.host}/api/v1/namespaces/default/configmaps"
    body = {"metadata": {"name": "fv", "unknownMeta": 1}, "data": {"a": "b"}, "bogus": True}

    def create(mode: str, name: str) -> Any:
        headers = {"Content-Type": "application/json"}
        payload = {**body, "metadata": {**body["metadata"], "name": name}}
        return api_client.call_api("POST", f"{collection}?fieldValidation={mode}", headers, payload)

    response = create("Strict", "fv-strict")
    status = json.loads(response.read())
    assert (response.status, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "metadata.unknownMeta", unknown field "bogus"'
    )
    response = create("Warn", "fv-warn")
    assert response.status == 201
    assert response.headers["Warning"].startswith('299 - "unknown field')
    response = create("Ignore", "fv-ignore")
    assert response.status == 201
    assert "Warning" not in response.headers
    raw = json.loads(core.read_namespaced_config_map("fv-warn", "default", _preload_content=False).read())
    assert "bogus" not in raw, "unknown fields are dropped, as kube decodes into typed objects"
    assert "unknownMeta" not in raw["metadata"]
    assert raw["data"] == {"a": "b"}


def test_label_selector_operators(core: client.CoreV1Api) -> None:
    for name, labels in (("l1", {"tier": "gpu", "zone": "a"}), ("l2", {"tier": "cpu"}), ("l3", {})):
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": labels}})

    def names(selector: str) -> list[str]:
        return sorted(
            i.metadata.name for i in core.list_namespaced_config_map("default", label_selector=selector).items
        )

    assert names("tier=gpu") == ["l1"]
    assert names("tier==gpu") == ["l1"]
    assert names("tier!=gpu") == ["l2", "l3"]
    assert names("tier in (gpu,cpu)") == ["l1", "l2"]
    assert names("tier notin (gpu)") == ["l2", "l3"]
    assert names("zone") == ["l1"]
    assert names("!zone") == ["l2", "l3"]
    assert names("tier,!zone") == ["l2"]
    with pytest.raises(ApiException) as info:
        names("tier in (")
    assert info.value.status == 400


def test_field_selectors(core: client.CoreV1Api, resource: client.ResourceV1Api, api_client: client.ApiClient) -> None:
    for name, node in (("p1", "node-a"), ("p2", "node-b")):
        core.create_namespaced_pod(
            "default",
            {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}},
        )
    assert [
        p.metadata.name for p in core.list_namespaced_pod("default", field_selector="spec.nodeName=node-a").items
    ] == ["p1"]
    assert [
        p.metadata.name for p in core.list_namespaced_pod("default", field_selector="spec.nodeName!=node-a").items
    ] == ["p2"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="metadata.name=p2").items] == [
        "p2"
    ]
    assert [
        p.metadata.name
        for p in core.list_namespaced_pod("default", field_selector="metadata.namespace=kube-system").items
    ] == []

    resource.create_resource_slice(slice_body("s-a", "node-a"))
    resource.create_resource_slice(slice_body("s-b", "node-b"))
    assert [s.metadata.name for s in resource.list_resource_slice(field_selector="spec.nodeName=node-b").items] == [
        "s-b"
    ]
    assert len(resource.list_resource_slice(field_selector=f"spec.driver={DRIVER}").items) == 2
    assert resource.list_resource_slice(field_selector="spec.driver=other.dev").items == []

    core.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
            "reason": "Hi",
            "type": "Warning",
        },
    )
    selected = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p1,involvedObject.kind=Pod,type=Warning"
    )
    assert [e.metadata.name for e in selected.items] == ["e1"]
    assert core.list_namespaced_event("default", field_selector="reason=Other").items == []

    events = client.EventsV1Api(api_client)
    events.create_namespaced_event("default", RESOURCES["events.events.k8s.io"][3]("ev1"))
    assert [
        e.metadata.name for e in events.list_namespaced_event("default", field_selector="regarding.name=p").items
    ] == ["ev1"]
    assert events.list_namespaced_event("default", field_selector="regarding.name=q").items == []


def test_events_k8s_io_and_core_events_share_storage(api_client: client.ApiClient, core: client.CoreV1Api) -> None:
    events = client.EventsV1Api(api_client)
    created = events.create_namespaced_event("default", RESOURCES["events.events.k8s.io"][3]("shared"))
    assert created.event_time.microsecond == 0
    raw = json.loads(events.read_namespaced_event("shared", "default", _preload_content=False).read())
    assert raw["eventTime"] == "2026-01-01T00:00:00.000000Z", "MicroTime is rendered with six digits, as kube does"
    as_core = core.read_namespaced_event("shared", "default")
    assert (as_core.involved_object.name, as_core.reporting_component, as_core.metadata.uid) == (
        "p",
        "migdra.dev/test",
        created.metadata.uid,
    )
    core.patch_namespaced_event("shared", "default", {"message": "seen through core"})
    assert events.read_namespaced_event("shared", "default").note == "seen through core"
    listed = core.list_namespaced_event("default", field_selector="involvedObject.name=p")
    assert [e.metadata.name for e in listed.items] == ["shared"]


def test_timestamps_are_rendered_like_kube(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(
        "default", {"metadata": {"name": "ts"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-04T05:06:07.891+01:00"}
    core.patch_namespaced_pod_status("ts", "default", {"status": {"conditions": [condition]}})
    raw = json.loads(core.read_namespaced_pod("ts", "default", _preload_content=False).read())
    assert raw["status"]["conditions"][0]["lastTransitionTime"] == "2026-03-04T04:06:07Z"
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod_status(
            "ts", "default", {"status": {"startTime": "yesterday"}}, _content_type="application/merge-patch+json"
        )
    assert info.value.status == 400


def test_limit_and_continue_page_through_a_list(api_server: LocalAPIServer, core: client.CoreV1Api) -> None:
    for index in range(7):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"page-{index}"}})
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        seen += [i.metadata.name for i in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(seen)
    assert (pages, seen) == (3, [f"page-{i}" for i in range(7)])

    first = core.list_namespaced_config_map("default", limit=2)
    for index in range(60):  # more writes than the history keeps: the token's version is compacted
        core.patch_namespaced_config_map("page-0", "default", {"data": {"n": str(index)}})
    with pytest.raises(ApiException) as info:
        core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
    assert (info.value.status, status_of(info.value)["reason"]) == (410, "Expired")


def test_delete_collection_by_label(core: client.CoreV1Api) -> None:
    for name, team in (("dc1", "a"), ("dc2", "a"), ("dc3", "b")):
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"team": team}}})
    core.delete_collection_namespaced_config_map("default", label_selector="team=a")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default", label_selector="team").items] == ["dc3"]


def test_pod_binding_sets_node_once(core: client.CoreV1Api) -> None:
    _pod(core, "bind-me")
    # kube answers a binding with a Status, which the client cannot read as a V1Binding (a known client
    # issue); _preload_content=False is the usual way round it, against kube-apiserver too.
    response = core.create_namespaced_pod_binding(
        "bind-me",
        "default",
        {"metadata": {"name": "bind-me"}, "target": {"kind": "Node", "name": "node-1"}},
        _preload_content=False,
    )
    assert json.loads(response.read())["status"] == "Success"
    pod = core.read_namespaced_pod("bind-me", "default")
    assert pod.spec.node_name == "node-1"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding(
            "bind-me", "default", {"metadata": {"name": "bind-me"}, "target": {"kind": "Node", "name": "node-2"}}
        )
    assert info.value.status == 409


def test_kubeconfig_loads_with_the_official_loader(api_server: LocalAPIServer, tmp_path: Path) -> None:
    path = api_server.write_kubeconfig(tmp_path / "kubeconfig")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    with client.ApiClient(configuration) as c:
        assert "default" in [n.metadata.name for n in client.CoreV1Api(c).list_namespace().items]


@pytest.mark.api_server(tokens=['secret-token,alice,uid-1,"dev,ops"'])
def test_token_authentication(api_server: LocalAPIServer, tmp_path: Path) -> None:
    assert api_server.url.startswith("https://"), "client-go sends tokens only over TLS"
    configuration = client.Configuration(host=api_server.url)
    configuration.ssl_ca_cert = str(api_server.ca_cert_path)
    with client.ApiClient(configuration) as anonymous:
        with pytest.raises(ApiException) as info:
            client.CoreV1Api(anonymous).list_namespace()
        assert (info.value.status, status_of(info.value)["reason"]) == (401, "Unauthorized")
    wrong = client.Configuration(
        host=api_server.url, api_key={"BearerToken": "nope"}, api_key_prefix={"BearerToken": "Bearer"}
    )
    wrong.ssl_ca_cert = str(api_server.ca_cert_path)
    with client.ApiClient(wrong) as c, pytest.raises(ApiException) as info:
        client.CoreV1Api(c).list_namespace()
    assert info.value.status == 401
    path = api_server.write_kubeconfig(tmp_path / "kubeconfig")
    loaded = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=loaded)
    with client.ApiClient(loaded) as c:
        assert client.CoreV1Api(c).list_namespace().items
        watched = watch.Watch().stream(client.CoreV1Api(c).list_namespace, timeout_seconds=1)
        assert "default" in [event["object"].metadata.name for event in watched], "watches work over TLS"


def test_every_registered_resource_has_a_crud_test(api_server: LocalAPIServer) -> None:
    assert {r.key for r in api_server.registry.resources} == set(RESOURCES)


def test_stop_ends_watches_and_connections_and_joins_its_threads() -> None:
    before = set(threading.enumerate())
    server = LocalAPIServer().start()
    configuration = client.Configuration(host=server.url)
    with client.ApiClient(configuration) as c:
        core = client.CoreV1Api(c)
        core.list_namespace()  # leaves a keep-alive connection open
        response = core.list_namespaced_config_map("default", watch=True, _preload_content=False)
        server.stop()
        assert response.read() == b"", "the open watch ends cleanly at stop"
    assert set(threading.enumerate()) - before == set()


def test_single_object_watch_path(api_server: LocalAPIServer, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "one"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "two"}})
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        response = c.call_api(
            "GET", f"{api_server.url}/api/v1/namespaces/default/configmaps/two?watch=1&timeoutSeconds=1"
        )
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "two")]


def test_snapshot_is_written_while_running_and_restored(tmp_path: Path) -> None:
    snapshot = tmp_path / "state.json"
    with LocalAPIServer(snapshot=snapshot, snapshot_interval=0.1) as server:
        with client.ApiClient(client.Configuration(host=server.url)) as c:
            created = client.CoreV1Api(c).create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
        wait_for("the snapshot to hold the object", lambda: snapshot.exists() and "kept" in snapshot.read_text())
    with LocalAPIServer(snapshot=snapshot) as server, client.ApiClient(client.Configuration(host=server.url)) as c:
        restored = client.CoreV1Api(c).read_namespaced_config_map("kept", "default")
        assert (restored.metadata.uid, restored.metadata.resource_version) == (
            created.metadata.uid,
            created.metadata.resource_version,
        )
