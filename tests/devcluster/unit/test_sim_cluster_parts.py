"""The pure parts of the local cluster: node GPUs, pod claims, binding conditions, FailedScheduling
messages and the occupancy map (the DeviceClasses it installs: tests/unit/test_deviceclasses.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver.allocation import DEFAULT_FEATURES, allocate
from dra_driver.allocation.explain import explain
from dra_driver.devicemodel import example_slices
from dra_driver.devicemodel.occupancy import occupancy, render_occupancy
from migdra_devcluster.claimcontroller import generated_claim_name
from migdra_devcluster.cluster import ClusterSpec, PluginProcess
from migdra_devcluster.scheduler.binding import Binding, binding_state
from migdra_devcluster.scheduler.messages import explanation_clause, failed_scheduling_message
from migdra_devcluster.scheduler.podclaims import pod_claims

REPO = Path(__file__).resolve().parents[3]


def test_node_names_and_directories() -> None:
    spec = ClusterSpec(Path("/tmp/w"), 3, "A30:1")
    assert spec.node_names() == ["node-1", "node-2", "node-3"]
    assert spec.node_dir("node-2") == Path("/tmp/w/nodes/node-2")


def test_a_node_given_its_own_gpus_gets_them_and_the_others_get_the_common_ones() -> None:
    spec = ClusterSpec(Path("/tmp/w"), 3, "H100-SXM5-80GB:2", node_gpus=(("node-3", "A100-SXM4-40GB:1,A30:1"),))
    assert [spec.gpus_of(node) for node in spec.node_names()] == [
        "H100-SXM5-80GB:2",
        "H100-SXM5-80GB:2",
        "A100-SXM4-40GB:1,A30:1",
    ]
    argv = PluginProcess(spec, "node-3", Path("/tmp/w/kubeconfig"), print).argv()
    assert argv[argv.index("--sim-gpus") + 1] == "A100-SXM4-40GB:1,A30:1"


def _pod(claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
        "spec": {"resourceClaims": claims},
        "status": {"resourceClaimStatuses": statuses or []},
    }


def _claim(name: str, *, owner: str | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"{name}-uid"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}}


def test_pod_claims_resolve_names_and_template_statuses() -> None:
    store = {("ns", "shared"): _claim("shared"), ("ns", "p-gpu-abcde"): _claim("p-gpu-abcde", owner="pod-uid")}
    pod = _pod(
        [{"name": "a", "resourceClaimName": "shared"}, {"name": "gpu", "resourceClaimTemplateName": "t"}],
        [{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}],
    )
    found = pod_claims(pod, lambda ns, name: store.get((ns, name)))
    assert found.waiting is None
    assert [c["metadata"]["name"] for c in found.claims] == ["shared", "p-gpu-abcde"]


@pytest.mark.parametrize(
    ("claims", "statuses", "store", "waiting"),
    [
        ([{"name": "gpu", "resourceClaimTemplateName": "t"}], [], {}, 'pod "ns/p": ResourceClaim not created yet'),
        ([{"name": "a", "resourceClaimName": "gone"}], [], {}, 'resourceclaim "gone" not found'),
        (
            [{"name": "a", "resourceClaimName": "old"}],
            [],
            {"old": _claim("old", deleting=True)},
            'resourceclaim "old" is being deleted',
        ),
        (
            [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            [{"name": "gpu", "resourceClaimName": "theirs"}],
            {"theirs": _claim("theirs", owner="another-pod")},
            "ResourceClaim ns/theirs was not created for pod ns/p (pod is not owner)",
        ),
    ],
)
def test_pod_claims_say_why_a_pod_waits(
    claims: list[dict[str, Any]], statuses: list[dict[str, Any]], store: dict[str, Any], waiting: str
) -> None:
    found = pod_claims(_pod(claims, statuses), lambda ns, name: store.get(name))
    assert found.waiting == waiting


def test_a_template_entry_without_a_claim_needs_nothing() -> None:
    pod = _pod([{"name": "gpu", "resourceClaimTemplateName": "t"}], [{"name": "gpu"}])
    found = pod_claims(pod, lambda ns, name: None)
    assert found.waiting is None
    assert found.claims == []


def _bound_claim(conditions: list[dict[str, Any]] | None) -> dict[str, Any]:
    result = {
        "request": "r",
        "driver": "d",
        "pool": "p",
        "device": "dev",
        "bindingConditions": ["d/realized"],
        "bindingFailureConditions": ["d/failed"],
    }
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if conditions is not None:
        status["devices"] = [{"driver": "d", "pool": "p", "device": "dev", "conditions": conditions}]
    return {"metadata": {"name": "c"}, "status": status}


def test_binding_waits_for_every_condition_and_fails_on_a_failure_condition() -> None:
    assert binding_state([_bound_claim(None)]) == (Binding.WAITING, "c")  # the claim a timeout names
    assert binding_state([_bound_claim([{"type": "d/realized", "status": "False"}])])[0] is Binding.WAITING
    assert binding_state([_bound_claim([{"type": "d/realized", "status": "True"}])]) == (Binding.READY, "")
    failed = [
        {"type": "d/realized", "status": "True"},
        {"type": "d/failed", "status": "True", "reason": "NoGi", "message": 'no "GI" \u2013 none'},
    ]
    # kube-scheduler's words: Go's %q of the message (quotes escaped, non-ASCII kept)
    expected = 'device binding failed: claim=c, reason=NoGi, message="no \\"GI\\" \u2013 none"'
    assert binding_state([_bound_claim(failed)]) == (Binding.FAILED, expected)
    plain = {"status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": "x"}]}}}}
    assert binding_state([plain]) == (Binding.READY, "")


def test_the_failed_scheduling_summary_counts_reasons_as_kube_does() -> None:
    message = failed_scheduling_message(
        {"a": "cannot allocate all claims", "b": "node(s) were unschedulable", "c": "cannot allocate all claims"},
        {"a": "claim x", "c": "claim y"},
    )
    assert message == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 cannot allocate all claims. a: claim x. c: claim y."
    )
    assert failed_scheduling_message({}, {}) == "0/0 nodes are available: no nodes available to schedule pods."
    long = failed_scheduling_message({"a": "cannot allocate all claims"}, {"a": "x" * 2000})
    assert len(long) == 1024
    assert long.endswith("...")


# As the shipped mig.migdra.io: exclusive devices only (a shared device of the same placement would be
# eligible too, and two of them never fit together).
EXCLUSIVE = "device.driver == 'gpu.migdra.io' && !('shared' in device.attributes['gpu.migdra.io'])"


def test_the_explanation_clause_names_the_request_that_cannot_be_satisfied() -> None:
    slices = example_slices(["H100-SXM5-80GB"], True, "gpu.migdra.io", "n1")
    node = {"metadata": {"name": "n1"}}
    classes = [
        {
            "metadata": {"name": "mig.migdra.io"},
            "spec": {"selectors": [{"cel": {"expression": EXCLUSIVE}}]},
        }
    ]
    claim = {
        "metadata": {"name": "big", "namespace": "ns", "uid": "u"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "mig.migdra.io",
                            "count": 2,
                            "selectors": [
                                {"cel": {"expression": "device.attributes['gpu.migdra.io'].profile == '7g.80gb'"}}
                            ],
                        },
                    }
                ]
            }
        },
    }
    clause = explanation_clause(explain([claim], node, slices, classes, [], DEFAULT_FEATURES))
    assert clause.startswith('claim ns/big request "gpus" (class mig.migdra.io): 1 eligible device(s), needs 2;')
    assert "excluded: request selector" in clause


def test_the_explanation_clause_names_the_counter_set_allocated_claims_over_consume() -> None:
    """Two overlapping claims allocated by hand (a 7g.80gb and a 1g.10gb both on memory slice 0 of GPU 0)
    over-consume gpu-0's counters; kube-scheduler then places nothing that consumes the pool's
    counters, even on the free GPU 1.  With one request, "each request fits alone, not together" is
    wrong: the clause must name the counter set, its slice, the counters and the claims to release."""
    slices = example_slices(["H100-SXM5-80GB", "H100-SXM5-80GB"], True, "gpu.migdra.io", "n1")
    node = {"metadata": {"name": "n1"}}
    classes = [
        {
            "metadata": {"name": "mig.migdra.io"},
            "spec": {"selectors": [{"cel": {"expression": EXCLUSIVE}}]},
        }
    ]

    def allocated(name: str, device: str) -> dict[str, Any]:
        result = {"request": "gpu", "driver": "gpu.migdra.io", "pool": "n1", "device": device}
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    held = [allocated("whole", "gpu-0-mig-7g80gb-0-0"), allocated("small", "gpu-0-mig-1g10gb-19-0")]
    profile = "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"
    claim = {
        "metadata": {"name": "one", "namespace": "ns", "uid": "u"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "mig.migdra.io",
                            "selectors": [{"cel": {"expression": profile}}],
                        },
                    }
                ]
            }
        },
    }
    assert allocate([claim], node, slices, classes, held, DEFAULT_FEATURES) is None
    clause = explanation_clause(explain([claim], node, slices, classes, held, DEFAULT_FEATURES))
    assert "fits alone" not in clause
    assert clause.startswith(
        "pool gpu.migdra.io/n1: counter set gpu-0-counter-set (ResourceSlice n1-gpu.migdra.io-counters-0)"
        " is over-consumed by allocated claims ns/small, ns/whole: memory-slice-0 2 consumed, 1 available;"
    ), clause
    assert "gpu-1-counter-set" not in clause
    # the request's own clause gives the reason of the devices it selects, not of those it never asked for
    assert clause.endswith(
        'claim ns/one request "gpu" (class mig.migdra.io): 0 eligible device(s), needs 1; 13 excluded: counters'
    ), clause


def test_the_occupancy_map_shows_which_memory_slices_hold_which_claim() -> None:
    slices = example_slices(["H100-SXM5-80GB", "H100-SXM5-80GB"], True, "gpu.migdra.io", "n1")
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "gpu.migdra.io", "pool": "n1", "device": "gpu-1-mig-3g40gb-9-4", "request": "r"},
                        {"driver": "other.io", "pool": "n1", "device": "gpu-0-mig-3g40gb-9-4", "request": "s"},
                    ]
                }
            }
        },
    }
    gpus = occupancy(slices, [claim], "gpu.migdra.io")
    assert [(g.node, g.counter_set, g.free_slices) for g in gpus] == [
        ("n1", "gpu-0-counter-set", 8),
        ("n1", "gpu-1-counter-set", 4),
    ]
    assert gpus[1].slices == [None, None, None, None, "ns/c", "ns/c", "ns/c", "ns/c"]
    assert [(i.claim, i.profile, i.placement_start, i.placement_size) for i in gpus[1].instances] == [
        ("ns/c", "3g.40gb", 4, 4)
    ]
    assert gpus[0].product == "NVIDIA H100 80GB HBM3"
    assert render_occupancy(gpus) == (
        "n1         gpu-0    [. . . . . . . .]  8/8 free\n"
        "n1         gpu-1    [. . . . A A A A]  4/8 free\n"
        "\n"
        "memory slices held by:\n"
        "  A = ns/c\n"
    )


def test_generated_claim_names_cut_both_parts_in_proportion_as_kube_does() -> None:
    assert generated_claim_name({"metadata": {"name": "trainer"}}, "gpu") == "trainer-gpu-"
    pod_name, entry = "p" * 60, "accelerator"
    name = generated_claim_name({"metadata": {"name": pod_name}}, entry)
    # len("<pod>-<entry>-") = 73: the pod keeps 60*57//73 = 46 characters, the entry 11*57//73 = 8.
    assert name == "p" * 46 + "-" + "accelera"
    assert len(name) + 5 <= 63
