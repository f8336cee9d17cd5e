"""The local cluster's scheduler against the local API server, with no kubelet and no plugin process.

Nodes, ResourceSlices (what migdra publishes for simulated H100s), DeviceClasses, claims and pods are
written through the client; the scheduler runs for real (its thread and informers, or one
``schedule_pending`` pass where the node order matters) and every assertion reads API state, polled
with a deadline: node choice, the claim's allocation and reservation, the binding, the Events, binding
conditions and extended resources backed by DRA.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, DEVICE_CLASSES, EVENTS, NODES, PODS, SLICES, Client
from migdra_devcluster.apiserver import LocalAPIServer
from migdra_devcluster.claimcontroller import ClaimController
from migdra_devcluster.scheduler.scheduler import Scheduler
from tests.sim_objects import (
    DRIVER,
    NAMESPACE,
    Api,
    allocated_devices,
    claim,
    mig_request,
    node,
    pod,
    profile_class,
    reserved_names,
    template,
)
from tests.waiting import stays, wait_for

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
REALIZED = f"{DRIVER}/realized"
REALIZATION_FAILED = f"{DRIVER}/realization-failed"


@pytest.fixture
def cluster(api_server: LocalAPIServer) -> Iterator[Api]:
    assert api_server.kubeconfig_path is not None
    client = Client(api_server.kubeconfig_path)
    try:
        yield Api(client)
    finally:
        client.close()


@contextlib.contextmanager
def running(*components: Any) -> Iterator[None]:
    """Start the components (scheduler, claim controller) and stop them, last first, whatever happens."""
    started: list[Any] = []
    try:
        for component in components:
            component.start()
            started.append(component)
        for component in components:
            assert component.wait_synced(20), f"{type(component).__name__} did not sync"
        yield
    finally:
        for component in reversed(started):
            component.stop()


def one_pass(client: Client, seed: int) -> Scheduler:
    """A fresh scheduler with ``seed`` whose informers have synced, after one ``schedule_pending`` pass
    (no scheduling thread: the pass is the only attempt, so its node order is the seed's first)."""
    scheduler = Scheduler(client, seed=seed)
    informers = (scheduler.pods, scheduler.nodes, scheduler.claims, scheduler.slices, scheduler.classes)
    try:
        for informer in informers:
            informer.start()
        assert scheduler.wait_synced(20)
        scheduler.schedule_pending()
    finally:
        scheduler.stop()
    return scheduler


def allocated(api: Api, name: str) -> list[tuple[str, str, str]]:
    current = api.claim(name)
    return [] if current is None else allocated_devices(current)


def slice_device(api: Api, pool: str, device: str) -> dict[str, Any]:
    for resource_slice in api.client.list(SLICES)[0]:
        spec = resource_slice["spec"]
        if spec["pool"]["name"] == pool:
            for entry in spec.get("devices") or []:
                if entry["name"] == device:
                    return dict(entry)
    raise AssertionError(f"device {pool}/{device} is not published")


def failed_scheduling(api: Api, pod_name: str) -> dict[str, Any] | None:
    events = api.events(pod_name, "FailedScheduling")
    return events[0] if events else None


def set_device_condition(api: Api, claim_name: str, condition: str, message: str) -> None:
    """As the driver would: a condition True on every allocated device, keeping allocation and reservedFor."""
    current = api.claim(claim_name)
    assert current is not None
    updated = copy.deepcopy(current)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    updated["status"]["devices"] = [
        {
            "driver": driver,
            "pool": pool,
            "device": device,
            "conditions": [
                {
                    "type": condition,
                    "status": "True",
                    "reason": "Test",
                    "message": message,
                    "lastTransitionTime": now,
                }
            ],
        }
        for driver, pool, device in allocated_devices(current)
    ]
    written = api.client.update(CLAIMS, updated, "status")
    assert written["status"].get("allocation")
    assert written["status"].get("reservedFor")


def hostname_in(*names: str) -> list[dict[str, Any]]:
    """Required node affinity terms: the node's hostname label is one of ``names``."""
    return [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(names)}]}]


# -- node choice -----------------------------------------------------------------------------------


def test_node_selector_affinity_taints_and_unschedulable_decide_the_node(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("plain", labels={"zone": "a"}))
    api.add_node(
        node("tainted", labels={"zone": "a"}, taints=[{"key": "gpu", "value": "only", "effect": "NoSchedule"}])
    )
    api.add_node(node("cordoned", labels={"zone": "a"}, unschedulable=True))
    api.add_node(node("zone-b", labels={"zone": "b"}))
    expected = {
        "by-selector": "zone-b",
        "by-affinity": "plain",
        "tolerating": "tainted",
        "tolerating-cordon": "cordoned",
    }
    pods = [
        pod("by-selector", claims={"gpu": "by-selector"}, node_selector={"zone": "b"}),
        pod(
            "by-affinity",
            claims={"gpu": "by-affinity"},
            affinity_terms=[
                {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]},
            ],
            node_selector={"kubernetes.io/hostname": "plain"},
        ),
        pod(
            "tolerating",
            claims={"gpu": "tolerating"},
            affinity_terms=hostname_in("tainted", "cordoned"),
            tolerations=[{"key": "gpu", "operator": "Equal", "value": "only", "effect": "NoSchedule"}],
        ),
        pod(
            "tolerating-cordon",
            claims={"gpu": "tolerating-cordon"},
            affinity_terms=hostname_in("cordoned"),
            tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        # Fits nowhere: the taint, the cordon and the affinity each rule out their nodes.
        pod("nowhere", claims={"gpu": "nowhere"}, node_selector={"zone": "a"}, affinity_terms=hostname_in("zone-b")),
        # The taint is the only obstacle on "tainted", and it is not tolerated (wrong value).
        pod(
            "wrong-toleration",
            claims={"gpu": "wrong-toleration"},
            affinity_terms=hostname_in("tainted"),
            tolerations=[{"key": "gpu", "operator": "Equal", "value": "other", "effect": "NoSchedule"}],
        ),
    ]
    for body in pods:
        api.client.create(CLAIMS, claim(body["metadata"]["name"]))
        api.client.create(PODS, body)
    with running(Scheduler(api.client, seed=7)):
        for name, node_name in expected.items():
            assert wait_for(f"{name} bound", functools.partial(api.node_of, name)) == node_name, name
            assert allocated(api, name)[0][1] == node_name
        nowhere = wait_for("FailedScheduling for nowhere", lambda: failed_scheduling(api, "nowhere"))
        wrong = wait_for("FailedScheduling for wrong-toleration", lambda: failed_scheduling(api, "wrong-toleration"))
    assert nowhere["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: only}, 1 node(s) were unschedulable, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    assert wrong["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: only}, 1 node(s) were unschedulable, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    for name in ("nowhere", "wrong-toleration"):
        assert api.node_of(name) is None
        assert not allocated(api, name)


def test_a_toleration_for_another_effect_does_not_tolerate_the_taint(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("tainted", taints=[{"key": "gpu", "value": "only", "effect": "NoSchedule"}]))
    api.client.create(CLAIMS, claim("c"))
    api.client.create(
        PODS,
        pod(
            "p",
            claims={"gpu": "c"},
            tolerations=[{"key": "gpu", "operator": "Equal", "value": "only", "effect": "NoExecute"}],
        ),
    )
    with running(Scheduler(api.client)):
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "p") or api.node_of("p"))
    assert api.node_of("p") is None
    assert isinstance(event, dict)
    assert event["message"] == "0/1 nodes are available: 1 node(s) had untolerated taint {gpu: only}."


def test_seeded_node_order_is_reproducible_and_depends_on_the_seed(cluster: Api) -> None:
    api = cluster
    names = [f"node-{i}" for i in range(6)]
    for name in names:
        api.client.create(NODES, node(name))
    # Unschedulable everywhere, so every pass tries (and shuffles) again.
    api.client.create(PODS, pod("probe", node_selector={"no": "such-node"}))
    first = one_pass(api.client, seed=3).stats.last_node_order
    again = one_pass(api.client, seed=3).stats.last_node_order
    assert sorted(first) == names
    assert again == first
    others = [one_pass(api.client, seed=seed).stats.last_node_order for seed in (4, 5, 6)]
    assert any(order != first for order in others)
    assert all(sorted(order) == names for order in others)


def test_first_feasible_node_in_the_seeded_order_wins(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("a"))
    api.add_node(node("b"), gpus=())  # no devices at all
    api.add_node(node("c"))
    api.add_node(node("d"), mig_enabled=False)  # a whole GPU, no MIG device
    fitting = {"a", "c"}
    chosen: set[str] = set()
    skipped = False
    for seed in range(8):
        name = f"p{seed}"
        api.client.create(CLAIMS, claim(name))
        api.client.create(PODS, pod(name, claims={"gpu": name}))
        order = one_pass(api.client, seed).stats.last_node_order
        first_fit = next(n for n in order if n in fitting)
        assert api.node_of(name) == first_fit, (seed, order)
        assert allocated(api, name)[0][1] == first_fit
        chosen.add(first_fit)
        skipped = skipped or order[0] not in fitting
    assert chosen == fitting
    assert skipped, "no seed put a node without fitting devices first"


# -- allocation, reservation, binding -----------------------------------------------------------------


def test_allocation_and_reservation_are_written_then_the_pod_is_bound(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))
    api.client.create(CLAIMS, claim("c", mig_request("gpu", "2g.20gb")))
    created = api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    with running(Scheduler(api.client)):
        assert wait_for("p bound", lambda: api.node_of("p")) == "n1"
        scheduled = wait_for("Scheduled event", lambda: api.events("p", "Scheduled"))
    current = api.claim("c")
    assert current is not None
    results = current["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1
    result = results[0]
    assert (result["request"], result["driver"], result["pool"]) == ("gpu", DRIVER, "n1")
    device = slice_device(api, "n1", result["device"])
    assert device["attributes"]["profile"] == {"string": "2g.20gb"}
    assert current["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": created["metadata"]["uid"]}]
    assert DELETE_PROTECTION in current["metadata"]["finalizers"]
    assert len(scheduled) == 1
    assert scheduled[0]["type"] == "Normal"
    assert scheduled[0]["message"] == f"Successfully assigned {NAMESPACE}/p to n1"
    assert not api.events("p", "FailedScheduling")


def test_pods_pending_at_once_never_share_a_device(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))  # one H100: seven 1g.10gb placements
    names = [f"p{i}" for i in range(8)]
    for name in names:
        api.client.create(CLAIMS, claim(name))
        api.client.create(PODS, pod(name, claims={"gpu": name}))
    with running(Scheduler(api.client, seed=1)):
        wait_for("seven pods bound", lambda: sum(api.node_of(n) is not None for n in names) == 7)
        [left] = [n for n in names if api.node_of(n) is None]
        wait_for("FailedScheduling for the eighth", functools.partial(failed_scheduling, api, left))
        stays("the eighth pod Pending", lambda: sum(api.node_of(n) is not None for n in names) == 7)
    devices = [d for n in names for d in allocated(api, n)]
    assert len(devices) == 7
    assert len(set(devices)) == 7
    assert all(
        slice_device(api, pool, dev)["attributes"]["profile"] == {"string": "1g.10gb"} for _, pool, dev in devices
    )
    assert [n for n in names if api.node_of(n) is None] == [left]
    assert not allocated(api, left)


def test_whole_gpu_sized_devices_across_nodes_are_given_once(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"), gpus=("H100-SXM5-80GB", "H100-SXM5-80GB"))
    api.add_node(node("n2"), gpus=("H100-SXM5-80GB", "H100-SXM5-80GB"))
    names = [f"big{i}" for i in range(5)]
    for name in names:
        api.client.create(CLAIMS, claim(name, mig_request("gpu", "7g.80gb")))
        api.client.create(PODS, pod(name, claims={"gpu": name}))
    with running(Scheduler(api.client, seed=2)):
        wait_for("four pods bound", lambda: sum(api.node_of(n) is not None for n in names) == 4)
        [left] = [n for n in names if api.node_of(n) is None]
        wait_for("FailedScheduling for the fifth", functools.partial(failed_scheduling, api, left))
        stays("the fifth pod Pending", lambda: sum(api.node_of(n) is not None for n in names) == 4)
    devices = [d for n in names for d in allocated(api, n)]
    assert len(set(devices)) == len(devices) == 4
    assert {pool for _, pool, _ in devices} == {"n1", "n2"}
    for name in names:
        if api.node_of(name) is not None:
            assert allocated(api, name)[0][1] == api.node_of(name)


def test_a_shared_claim_is_allocated_once_and_reserved_for_both_pods(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    for name in ("n1", "n2", "n3"):
        api.add_node(node(name))
    api.client.create(CLAIMS, claim("shared"))
    api.client.create(PODS, pod("first", claims={"gpu": "shared"}))
    api.client.create(PODS, pod("second", claims={"gpu": "shared"}))
    with running(Scheduler(api.client, seed=5)):
        first = wait_for("first bound", lambda: api.node_of("first"))
        second = wait_for("second bound", lambda: api.node_of("second"))
        # A third user that may not go where the claim's device is cannot use it.
        api.client.create(
            PODS,
            pod(
                "elsewhere",
                claims={"gpu": "shared"},
                affinity_terms=[
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [first]}]}
                ],
            ),
        )
        event = wait_for("FailedScheduling for elsewhere", lambda: failed_scheduling(api, "elsewhere"))
    assert event["message"] == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 resourceclaim not available on the node."
    )
    current = api.claim("shared")
    assert current is not None
    devices = allocated_devices(current)
    assert len(devices) == 1
    assert first == second == devices[0][1]
    assert reserved_names(current) == ["first", "second"]
    # Nothing else was allocated anywhere.
    assert [c["metadata"]["name"] for c in api.claims() if allocated_devices(c)] == ["shared"]


def test_claims_from_templates_are_scheduled_with_the_claim_controller(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))
    api.create_template(template("one-mig", mig_request("gpu", "3g.40gb")))
    names = ["w0", "w1", "w2"]
    for name in names:
        api.client.create(PODS, pod(name, templates={"gpu": "one-mig"}))
    with running(ClaimController(api.client), Scheduler(api.client)):
        wait_for("two pods bound", lambda: sum(api.node_of(n) == "n1" for n in names) == 2)
        [left] = [n for n in names if api.node_of(n) is None]
        wait_for("FailedScheduling for the third", functools.partial(failed_scheduling, api, left))
        stays("the third pod Pending", lambda: sum(api.node_of(n) is not None for n in names) == 2)
        claims = api.claims()
        assert len(claims) == 3
        devices = [d for c in claims for d in allocated_devices(c)]
        assert len(set(devices)) == len(devices) == 2  # an H100 has two 3g.40gb placements
        generated: dict[str, str] = {}
        for name in names:
            current = api.pod(name)
            assert current is not None
            [status] = current["status"]["resourceClaimStatuses"]
            generated[name] = status["resourceClaimName"]
            own = api.claim(generated[name])
            assert own is not None
            if api.node_of(name):
                assert reserved_names(own) == [name]
            else:
                assert not allocated_devices(own)

        # One pod finishes: the controller frees and deletes its claim, and the waiting pod gets the device.
        done = next(n for n in names if n != left)
        freed = allocated(api, generated[done])
        api.client.merge_patch(PODS, NAMESPACE, done, {"status": {"phase": "Succeeded"}}, "status")
        assert wait_for(f"{left} bound", functools.partial(api.node_of, left)) == "n1"
        wait_for(f"{done}'s claim deleted", lambda: api.claim(generated[done]) is None)
        assert allocated(api, generated[left]) == freed


# -- why a pod stays Pending ---------------------------------------------------------------------


def test_unsatisfiable_pod_reports_per_node_and_counts_the_event(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))
    api.add_node(node("n2"))
    api.add_node(node("infra", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]))
    api.client.create(CLAIMS, claim("two-big", mig_request("big", "7g.80gb", count=2)))
    api.client.create(PODS, pod("p", claims={"gpu": "two-big"}))
    with running(Scheduler(api.client, seed=11)):
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "p"))
        message = event["message"]
        assert event["type"] == "Warning"
        assert message.startswith(
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, 2 cannot allocate all claims."
        ), message
        for name in ("n1", "n2"):
            assert f' {name}: claim {NAMESPACE}/two-big request "big"' in message, message
        assert message.count('request "big"') == 2
        assert "infra:" not in message
        condition = wait_for("PodScheduled=False", lambda: api.pod_condition("p", "PodScheduled"))
        assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", message)
        assert api.node_of("p") is None
        assert not allocated(api, "two-big")

        # A change in the cluster that does not help: tried again, the same Event counted, not repeated.
        api.client.merge_patch(NODES, None, "n1", {"metadata": {"labels": {"touched": "yes"}}})
        counted = wait_for(
            "the Event counted", lambda: [e for e in api.events("p", "FailedScheduling") if e.get("count", 1) > 1]
        )
        assert len(api.events("p", "FailedScheduling")) == 1
        assert counted[0]["message"] == message

        # A node with two GPUs makes it fit.
        api.add_node(node("n4"), gpus=("H100-SXM5-80GB", "H100-SXM5-80GB"))
        assert wait_for("p bound", lambda: api.node_of("p")) == "n4"
    assert len(allocated(api, "two-big")) == 2


def test_a_pod_on_a_node_with_over_consumed_counters_is_told_which_counter_set(cluster: Api) -> None:
    """Two overlapping claims allocated by hand over-consume gpu-0's counters; kube-scheduler places
    nothing that consumes the pool's counters then.  FailedScheduling names the counter set, its
    slice, the counter (consumed vs available) and the claims, not "each request fits alone"."""
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))
    for name, device in (("whole", "gpu-0-mig-7g80gb-0-0"), ("small", "gpu-0-mig-1g10gb-19-0")):
        held = api.client.create(CLAIMS, claim(name))
        held["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}]}
            }
        }
        api.client.update(CLAIMS, held, "status")
    api.client.create(CLAIMS, claim("one", mig_request("gpu", "1g.10gb")))
    api.client.create(PODS, pod("p", claims={"gpu": "one"}))
    with running(Scheduler(api.client, seed=1)):
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "p"))
    message = event["message"]
    assert message.startswith(
        "0/1 nodes are available: 1 cannot allocate all claims. n1: pool gpu.migdra.io/n1: counter set"
        f" gpu-0-counter-set (ResourceSlice n1-{DRIVER}-counters-0) is over-consumed by allocated claims"
        f" {NAMESPACE}/small, {NAMESPACE}/whole: memory-slice-0 2 consumed, 1 available;"
    ), message
    assert "fits alone" not in message
    assert f'claim {NAMESPACE}/one request "gpu" (class mig.migdra.io): 0 eligible device(s), needs 1;' in message


def test_a_pod_waits_silently_for_its_claim_to_exist(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"))
    api.client.create(PODS, pod("p", claims={"gpu": "later"}))
    scheduler = Scheduler(api.client)
    with running(scheduler):
        wait_for("an attempt", lambda: scheduler.stats.attempts >= 1)
        # PreEnqueue, as kube-scheduler: not tried at all, so no Event and no PodScheduled condition.
        stays("p pending without a verdict", lambda: api.node_of("p") is None and not api.events("p"))
        assert api.pod_condition("p", "PodScheduled") is None
        api.client.create(CLAIMS, claim("later"))
        assert wait_for("p bound", lambda: api.node_of("p")) == "n1"
    assert reserved_names(api.claim("later") or {}) == ["p"]


# -- binding conditions ----------------------------------------------------------------------------


def test_binding_waits_for_the_binding_conditions(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"), binding=True)
    api.client.create(CLAIMS, claim("c"))
    api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    with running(Scheduler(api.client)):
        devices = wait_for("c allocated", lambda: allocated(api, "c"))
        current = api.claim("c")
        assert current is not None
        result = current["status"]["allocation"]["devices"]["results"][0]
        assert result["bindingConditions"] == [REALIZED]
        assert result["bindingFailureConditions"] == [REALIZATION_FAILED]
        assert current["status"]["allocation"]["nodeSelector"] == {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
        }
        assert reserved_names(current) == ["p"]
        stays("p unbound while the device is not realized", lambda: api.node_of("p") is None)
        assert not api.events("p", "Scheduled")

        set_device_condition(api, "c", REALIZED, "MIG device created")
        assert wait_for("p bound", lambda: api.node_of("p")) == "n1"
        wait_for("Scheduled event", lambda: api.events("p", "Scheduled"))
    assert allocated(api, "c") == devices


def test_binding_failure_deallocates_and_schedules_onto_another_device(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"), binding=True)
    api.client.create(CLAIMS, claim("c"))
    api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    with running(Scheduler(api.client)):
        first = wait_for("c allocated", lambda: allocated(api, "c"))
        set_device_condition(api, "c", REALIZATION_FAILED, "placement is occupied")
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "p"))
        assert event["type"] == "Warning"
        # kube-scheduler's words (DynamicResources PreBind): the claim, the condition's reason and message
        assert event["message"].startswith(
            'running PreBind plugin "DynamicResources": device binding failed: claim=c, reason='
        ), event["message"]
        assert event["message"].endswith(', message="placement is occupied"'), event["message"]
        wait_for("c allocated anew", lambda: allocated(api, "c") not in ([], first))
        second = allocated(api, "c")
        assert second[0][2] != first[0][2]
        current = api.claim("c")
        assert current is not None
        assert not current["status"].get("devices"), "the failed device's status must go with the allocation"
        assert reserved_names(current) == ["p"]
        assert api.node_of("p") is None
        set_device_condition(api, "c", REALIZED, "MIG device created")
        assert wait_for("p bound", lambda: api.node_of("p")) == "n1"
    assert allocated(api, "c") == second


def test_binding_timeout_deallocates_and_tries_again(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.add_node(node("n1"), binding=True)
    api.client.create(CLAIMS, claim("c"))
    api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    with running(Scheduler(api.client, binding_timeout=1.0)):
        first = wait_for("c allocated", lambda: allocated(api, "c"))
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "p"))
        assert event["message"] == 'running PreBind plugin "DynamicResources": device binding timeout: claim=c'
        pending = api.client.list(
            EVENTS, "default", field_selector="involvedObject.name=p,reason=BindingConditionsPending"
        )[0]
        assert [e["message"] for e in pending][:1] == ["waiting for binding conditions for device on node n1"]
        wait_for("c allocated to another device", lambda: allocated(api, "c") not in ([], first))
        assert api.node_of("p") is None


# -- extended resources backed by DRA -------------------------------------------------------------


def test_extended_resource_gets_a_special_claim(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.client.create(DEVICE_CLASSES, profile_class("mig-1g10gb", "1g.10gb", "nvidia.com/mig-1g.10gb"))
    api.add_node(node("n1"))
    created = api.client.create(PODS, pod("ext", limits={"nvidia.com/mig-1g.10gb": 1}))
    with running(Scheduler(api.client)):
        assert wait_for("ext bound", lambda: api.node_of("ext")) == "n1"
    claims = api.claims()
    assert len(claims) == 1
    special = claims[0]
    meta = special["metadata"]
    assert meta["name"].startswith("ext-extended-resources-")
    assert len(meta["name"]) > len("ext-extended-resources-")
    assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "ext",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert DELETE_PROTECTION in meta["finalizers"]
    requests = special["spec"]["devices"]["requests"]
    assert [r["name"] for r in requests] == ["container-0-request-0"]
    assert requests[0]["exactly"]["deviceClassName"] == "mig-1g10gb"
    assert requests[0]["exactly"]["count"] == 1
    devices = allocated_devices(special)
    assert len(devices) == 1
    assert slice_device(api, "n1", devices[0][2])["attributes"]["profile"] == {"string": "1g.10gb"}
    assert reserved_names(special) == ["ext"]
    current = api.pod("ext")
    assert current is not None
    assert current["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": meta["name"],
        "requestMappings": [
            {"containerName": "app", "resourceName": "nvidia.com/mig-1g.10gb", "requestName": "container-0-request-0"}
        ],
    }


def test_extended_resource_nobody_provides_is_insufficient(cluster: Api) -> None:
    api = cluster
    api.add_classes()
    api.client.create(DEVICE_CLASSES, profile_class("mig-1g10gb", "1g.10gb", "nvidia.com/mig-1g.10gb"))
    api.add_node(node("n1"))
    api.add_node(node("n2"))
    api.client.create(PODS, pod("fpga", limits={"example.com/fpga": 1}))
    with running(Scheduler(api.client)):
        event = wait_for("FailedScheduling", lambda: failed_scheduling(api, "fpga"))
    assert event["message"] == "0/2 nodes are available: 2 Insufficient example.com/fpga."
    assert api.node_of("fpga") is None
    assert api.claims() == []


def test_a_stale_special_claim_is_unreserved_and_deleted_before_the_pod_gets_a_new_one(cluster: Api) -> None:
    # An attempt that created the special claim and reserved it but never bound the pod (a crash, a
    # failed pod write): kube-scheduler deletes such a claim and starts over.  It must be unreserved
    # first, or the claim controller keeps its finalizer for the live pod and the delete never ends.
    api = cluster
    api.add_classes()
    api.client.create(DEVICE_CLASSES, profile_class("mig-1g10gb", "1g.10gb", "nvidia.com/mig-1g.10gb"))
    api.add_node(node("n1"))
    created = api.client.create(PODS, pod("ext", limits={"nvidia.com/mig-1g.10gb": 1}))
    meta = created["metadata"]
    stale = api.client.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": "ext-extended-resources-",
                "namespace": NAMESPACE,
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "finalizers": [DELETE_PROTECTION],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "ext", "uid": meta["uid"], "controller": True}
                ],
            },
            "spec": {"devices": {"requests": [mig_request("container-0-request-0")]}},
        },
    )
    held = {"request": "container-0-request-0", "driver": DRIVER, "pool": "n1", "device": "gpu-0-mig-1g10gb-19-6"}
    stale["status"] = {
        "allocation": {"devices": {"results": [held]}},
        "reservedFor": [{"resource": "pods", "name": "ext", "uid": meta["uid"]}],
    }
    api.client.update(CLAIMS, stale, "status")
    with running(ClaimController(api.client), Scheduler(api.client)):
        assert wait_for("ext bound", lambda: api.node_of("ext")) == "n1"
        wait_for("the stale claim gone", lambda: api.claim(stale["metadata"]["name"]) is None)
    claims = api.claims()
    assert len(claims) == 1
    assert claims[0]["metadata"]["name"] != stale["metadata"]["name"]
    assert reserved_names(claims[0]) == ["ext"]


def test_undoing_a_reservation_reads_again_after_a_conflicting_status_write(cluster: Api) -> None:
    """Another writer (the plugin, the reservation controller) changing the claim's status between the
    scheduler's read and its write is a 409: the undo reads again and still deallocates, rather than
    leaving the claim allocated and reserved for a pod that is no longer binding."""
    api = cluster
    api.add_classes()
    api.add_node(node("n1"), binding=True)
    api.client.create(CLAIMS, claim("c"))
    api.client.create(PODS, pod("p", claims={"gpu": "c"}))
    scheduler = Scheduler(api.client)
    with running(scheduler):
        wait_for("c allocated", lambda: allocated(api, "c"))
    stale = api.claim("c")  # what the scheduler's cache holds
    assert stale is not None
    set_device_condition(api, "c", REALIZATION_FAILED, "a writer in between")  # the resourceVersion moves on
    scheduler.claims.assume(stale)
    uid = stale["status"]["reservedFor"][0]["uid"]
    scheduler._undo_reservation(stale, uid, deallocate=True)
    current = api.claim("c")
    assert current is not None
    assert not current["status"].get("allocation")
    assert not current["status"].get("reservedFor")
    assert not current["status"].get("devices")
