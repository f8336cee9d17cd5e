"""The pod strategy of the local API server: kube's pod defaults and graceful deletion, on the verbs.

These drive :class:`Operations` over a real :class:`Store` (no HTTP), so each rule of
``CheckGracefulDelete``/``BeforeDelete`` and of ``SetDefaults_Pod`` is checked with exact values:
timestamps, grace periods, generations and the watch events a kubelet or controller would see.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from migdra_devcluster.apiserver.errors import NotFound
from migdra_devcluster.apiserver.operations import DeleteOptions, Operations, WriteOptions
from migdra_devcluster.apiserver.pods import default_pod, graceful_delete_period
from migdra_devcluster.apiserver.registry import Registry, ResourceType
from migdra_devcluster.apiserver.selectors import FieldSelector, LabelSelector
from migdra_devcluster.apiserver.store import Store
from migdra_devcluster.apiserver.watch import Watcher

MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def ops() -> Operations:
    operations = Operations(Store(), Registry())
    operations.create(operations.registry.namespaces, None, {"metadata": {"name": "default"}}, WriteOptions())
    return operations


def pods(ops: Operations) -> ResourceType:
    resource = ops.registry.lookup("", "v1", "pods")
    assert resource is not None
    return resource


def configmaps(ops: Operations) -> ResourceType:
    resource = ops.registry.lookup("", "v1", "configmaps")
    assert resource is not None
    return resource


def create_pod(ops: Operations, name: str, *, node: str | None = "node-1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return ops.create(pods(ops), "default", body, WriteOptions())


def delete(ops: Operations, name: str, grace: int | None = None, **options: Any) -> dict[str, Any]:
    return ops.delete(pods(ops), "default", name, DeleteOptions(grace_period_seconds=grace, **options))


def stored(ops: Operations, name: str) -> dict[str, Any] | None:
    return ops.store.get("pods", "default", name)


def seconds_from_now(timestamp: str) -> float:
    return (datetime.fromisoformat(timestamp) - datetime.now(UTC)).total_seconds()


def set_phase(ops: Operations, name: str, phase: str) -> None:
    ops.patch(
        pods(ops),
        "default",
        name,
        "application/merge-patch+json",
        {"status": {"phase": phase}},
        "status",
        WriteOptions(),
    )


# -- defaults ------------------------------------------------------------------------------------------


def test_create_fills_in_kubes_pod_spec_defaults(ops: Operations) -> None:
    pod = create_pod(ops, "defaults", node=None)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["enableServiceLinks"] is True
    assert stored(ops, "defaults") == pod, "the defaults are stored, not only answered"


def test_values_the_client_sent_are_kept(ops: Operations) -> None:
    pod = create_pod(
        ops,
        "mine",
        restartPolicy="Never",
        terminationGracePeriodSeconds=5,
        schedulerName="migdra-scheduler",
        dnsPolicy="Default",
        enableServiceLinks=False,
    )
    spec = pod["spec"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"]) == ("Never", 5)
    assert (spec["schedulerName"], spec["dnsPolicy"], spec["enableServiceLinks"]) == (
        "migdra-scheduler",
        "Default",
        False,
    )


def test_only_the_listed_defaults_are_applied() -> None:
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    default_pod(pod)
    assert set(pod["spec"]) == {
        "containers",
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "schedulerName",
        "dnsPolicy",
        "enableServiceLinks",
    }
    assert pod["spec"]["containers"] == [{"name": "c", "image": "i"}], "no container defaults beyond requests"


def test_null_counts_as_unset_and_a_missing_spec_is_defaulted() -> None:
    pod: dict[str, Any] = {"spec": {"restartPolicy": None, "terminationGracePeriodSeconds": None}}
    default_pod(pod)
    assert pod["spec"]["restartPolicy"] == "Always"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    bare: dict[str, Any] = {"metadata": {"name": "x"}}
    default_pod(bare)
    assert bare["spec"]["schedulerName"] == "default-scheduler"


def test_requests_are_defaulted_from_limits_in_containers_and_init_containers(ops: Operations) -> None:
    pod = create_pod(
        ops,
        "limits",
        containers=[
            {"name": "only-limits", "image": "i", "resources": {"limits": {MIG: "1", "cpu": "2"}}},
            {
                "name": "both",
                "image": "i",
                "resources": {"limits": {MIG: "2", "memory": "4Gi"}, "requests": {"memory": "1Gi"}},
            },
            {"name": "none", "image": "i"},
        ],
        initContainers=[{"name": "init", "image": "i", "resources": {"limits": {MIG: "1"}}}],
    )
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert containers["only-limits"]["resources"]["requests"] == {MIG: "1", "cpu": "2"}
    assert containers["both"]["resources"]["requests"] == {MIG: "2", "memory": "1Gi"}, "a request is never replaced"
    assert containers["both"]["resources"]["limits"] == {MIG: "2", "memory": "4Gi"}, "limits are unchanged"
    assert "resources" not in containers["none"]
    assert pod["spec"]["initContainers"][0]["resources"]["requests"] == {MIG: "1"}


def test_requests_only_are_left_alone() -> None:
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    default_pod(pod)
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}


def test_an_update_that_drops_a_defaulted_field_gets_it_back(ops: Operations) -> None:
    pod = create_pod(ops, "upd", node=None)
    body = copy.deepcopy(pod)
    del body["spec"]["restartPolicy"]
    body["spec"]["containers"][0]["resources"] = {"limits": {MIG: "1"}}
    updated = ops.update(pods(ops), "default", "upd", body, None, WriteOptions())
    assert updated["spec"]["restartPolicy"] == "Always"
    assert updated["spec"]["containers"][0]["resources"]["requests"] == {MIG: "1"}
    unchanged = ops.update(pods(ops), "default", "upd", copy.deepcopy(updated), None, WriteOptions())
    assert unchanged["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"], "a no-op stays one"


def test_other_kinds_get_no_pod_defaults(ops: Operations) -> None:
    created = ops.create(configmaps(ops), "default", {"metadata": {"name": "cm"}}, WriteOptions())
    assert "spec" not in created


# -- CheckGracefulDelete -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "status", "requested", "expected"),
    [
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {}, None, 45),
        ({"nodeName": "n"}, {}, None, 30),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {}, 7, 7),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {}, 0, 0),
        ({"terminationGracePeriodSeconds": 45}, {}, None, 0),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {"phase": "Succeeded"}, None, 0),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {"phase": "Failed"}, 10, 0),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 45}, {"phase": "Running"}, None, 45),
        ({"nodeName": "n"}, {}, -5, 1),
    ],
)
def test_grace_period_rule(spec: dict[str, Any], status: dict[str, Any], requested: int | None, expected: int) -> None:
    assert graceful_delete_period({"spec": spec, "status": status}, requested) == expected


# -- graceful deletion on the verbs --------------------------------------------------------------------


def test_a_bound_pod_is_marked_not_removed(ops: Operations) -> None:
    created = create_pod(ops, "bound")
    answer = delete(ops, "bound")
    meta = answer["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30
    assert 28 <= seconds_from_now(meta["deletionTimestamp"]) <= 31
    assert int(meta["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert meta["generation"] == created["metadata"]["generation"] + 1, "kube bumps generation when deletion begins"
    assert stored(ops, "bound") == answer


def test_the_request_grace_period_wins_over_the_spec(ops: Operations) -> None:
    create_pod(ops, "req", terminationGracePeriodSeconds=600)
    meta = delete(ops, "req", grace=12)["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 12
    assert 10 <= seconds_from_now(meta["deletionTimestamp"]) <= 13


def test_unbound_and_finished_pods_are_removed_at_once(ops: Operations) -> None:
    create_pod(ops, "unbound", node=None)
    answer = delete(ops, "unbound", grace=60)
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0, "the deleted object says how it went"
    assert stored(ops, "unbound") is None
    for phase in ("Succeeded", "Failed"):
        create_pod(ops, phase.lower())
        set_phase(ops, phase.lower(), phase)
        delete(ops, phase.lower())
        assert stored(ops, phase.lower()) is None, phase
    create_pod(ops, "running")
    set_phase(ops, "running", "Running")
    delete(ops, "running")
    assert stored(ops, "running") is not None


def test_zero_grace_removes_a_bound_pod_at_once(ops: Operations) -> None:
    create_pod(ops, "force")
    delete(ops, "force", grace=0)
    assert stored(ops, "force") is None


def test_a_shorter_grace_period_shortens_both_fields(ops: Operations) -> None:
    create_pod(ops, "short", terminationGracePeriodSeconds=100)
    first = delete(ops, "short")["metadata"]
    second = delete(ops, "short", grace=40)["metadata"]
    assert second["deletionGracePeriodSeconds"] == 40
    deadline_moved = datetime.fromisoformat(first["deletionTimestamp"]) - datetime.fromisoformat(
        second["deletionTimestamp"]
    )
    assert deadline_moved == timedelta(seconds=60), "the deadline counts from when deletion began"
    assert int(second["resourceVersion"]) > int(first["resourceVersion"])
    assert second["generation"] == first["generation"], "only the first mark bumps generation"


@pytest.mark.parametrize("grace", [None, 100, 500])
def test_a_longer_or_equal_or_no_grace_period_changes_nothing(ops: Operations, grace: int | None) -> None:
    create_pod(ops, "same", terminationGracePeriodSeconds=100)
    first = delete(ops, "same")
    again = delete(ops, "same", grace=grace)
    assert again == first
    assert stored(ops, "same") == first


def test_a_pending_deletion_takes_no_finalizer_from_delete_options(ops: Operations) -> None:
    create_pod(ops, "fg")
    first = delete(ops, "fg")
    again = delete(ops, "fg", propagation_policy="Foreground")
    assert again == first
    assert "finalizers" not in again["metadata"]


def test_zero_grace_delete_of_a_marked_pod_removes_it(ops: Operations) -> None:
    create_pod(ops, "kubelet")
    delete(ops, "kubelet")
    final = delete(ops, "kubelet", grace=0)
    assert final["metadata"]["deletionGracePeriodSeconds"] == 0
    assert stored(ops, "kubelet") is None
    with pytest.raises(NotFound):
        delete(ops, "kubelet", grace=0)


def test_watch_sees_modified_then_modified_and_deleted(ops: Operations) -> None:
    create_pod(ops, "watched")
    watcher = Watcher("pods", "default", LabelSelector(), FieldSelector(), 100)
    ops.store.start_watch(watcher, since=ops.store.resource_version)
    delete(ops, "watched")
    delete(ops, "watched", grace=0)
    events = [watcher.next_event(1) for _ in range(3)]
    assert [(e.type, e.obj["metadata"]["deletionGracePeriodSeconds"]) for e in events if e] == [
        ("MODIFIED", 30),
        ("MODIFIED", 0),
        ("DELETED", 0),
    ]
    assert watcher.next_event(0.2) is None


def test_finalizers_keep_a_pod_until_removed_and_grace_is_zero(ops: Operations) -> None:
    create_pod(ops, "held")
    ops.patch(
        pods(ops),
        "default",
        "held",
        "application/merge-patch+json",
        {"metadata": {"finalizers": ["migdra.dev/hold"]}},
        None,
        WriteOptions(),
    )
    delete(ops, "held")
    unhold = {"metadata": {"finalizers": None}}
    ops.patch(pods(ops), "default", "held", "application/merge-patch+json", unhold, None, WriteOptions())
    left = stored(ops, "held")
    assert left is not None, "no finalizers, but the grace period still runs: the kubelet finishes it"
    assert left["metadata"]["deletionGracePeriodSeconds"] == 30
    delete(ops, "held", grace=0)
    assert stored(ops, "held") is None


def test_zero_grace_with_finalizers_waits_for_them(ops: Operations) -> None:
    create_pod(ops, "fin")
    hold = {"metadata": {"finalizers": ["migdra.dev/hold"]}}
    ops.patch(pods(ops), "default", "fin", "application/merge-patch+json", hold, None, WriteOptions())
    delete(ops, "fin")
    marked = delete(ops, "fin", grace=0)
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    assert marked["metadata"]["finalizers"] == ["migdra.dev/hold"]
    assert stored(ops, "fin") is not None
    unhold = {"metadata": {"finalizers": None}}
    ops.patch(pods(ops), "default", "fin", "application/merge-patch+json", unhold, None, WriteOptions())
    assert stored(ops, "fin") is None, "grace 0 and no finalizers: gone with the update"


def test_a_status_write_does_not_end_a_graceful_deletion(ops: Operations) -> None:
    create_pod(ops, "status")
    delete(ops, "status")
    set_phase(ops, "status", "Running")
    pod = stored(ops, "status")
    assert pod is not None
    assert pod["status"]["phase"] == "Running"


def test_dry_run_answers_the_marked_pod_and_changes_nothing(ops: Operations) -> None:
    created = create_pod(ops, "dry")
    answer = delete(ops, "dry", dry_run=True)
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert stored(ops, "dry") == created


def test_deletecollection_applies_the_rule_per_pod(ops: Operations) -> None:
    create_pod(ops, "col-bound")
    create_pod(ops, "col-unbound", node=None)
    listing = ops.delete_collection(pods(ops), "default", LabelSelector(), FieldSelector(), DeleteOptions())
    by_name = {item["metadata"]["name"]: item for item in listing["items"]}
    assert by_name["col-bound"]["metadata"]["deletionGracePeriodSeconds"] == 30
    assert stored(ops, "col-bound") is not None
    assert stored(ops, "col-unbound") is None
    ops.delete_collection(pods(ops), "default", LabelSelector(), FieldSelector(), DeleteOptions(grace_period_seconds=0))
    assert stored(ops, "col-bound") is None


def test_other_kinds_are_still_deleted_at_once(ops: Operations) -> None:
    ops.create(configmaps(ops), "default", {"metadata": {"name": "cm"}}, WriteOptions())
    answer = ops.delete(configmaps(ops), "default", "cm", DeleteOptions(grace_period_seconds=30))
    assert answer["kind"] == "Status"
    assert ops.store.get("configmaps", "default", "cm") is None
    held = {"metadata": {"name": "held", "finalizers": ["migdra.dev/hold"]}}
    ops.create(configmaps(ops), "default", held, WriteOptions())
    ops.delete(configmaps(ops), "default", "held", DeleteOptions(grace_period_seconds=30))
    unhold = {"metadata": {"finalizers": None}}
    ops.patch(configmaps(ops), "default", "held", "application/merge-patch+json", unhold, None, WriteOptions())
    assert ops.store.get("configmaps", "default", "held") is None, "no grace-period wait for kinds without one"
