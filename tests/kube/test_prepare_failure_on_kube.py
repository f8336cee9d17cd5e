"""What happens to a pod whose claim the node cannot prepare, on the upstream control plane (docs/prepare.md,
"When prepare fails"): NVML refuses to create the instance -- what only the node can know, which no
admission policy catches -- three times, then succeeds (a transient fault, such as another process briefly
holding the GPU).

Without realize before bind, kube-scheduler has bound the pod and allocated the claim; kubelet retries
NodePrepareResources with its backoff.  Meanwhile: the pod waits (never Running on a device it does not
have), nothing is left created on the GPU, and the claim carries **one** Warning Event naming the NVML
error whose count grows with each retry.  When the cause goes, the next retry prepares the claim and the
pod runs, by itself.  (With realize before bind, a failed realization sends the pod to another placement
instead: tests/e2e/test_realize_before_bind.py.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.sim_cluster import DEMO, SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-prepare-failure")

FAIL_THREE_CREATIONS = {
    "rules": [
        {"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 1, "count": 3, "error": "InsufficientResources"}
    ]
}


cluster = versioned_cluster(
    "--nodes",
    "1",
    "--gpus",
    "H100-SXM5-80GB:1",
    "--plugin-env",
    f"node-1:MIGDRA_SIM_FAULTS={json.dumps(FAIL_THREE_CREATIONS)}",
)


def prepare_failures(cluster: SimCluster, namespace: str) -> list[dict[str, Any]]:
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    return [
        e for e in events if e["reason"] == "MigDevicesPrepareFailed" and e["involvedObject"]["kind"] == "ResourceClaim"
    ]


def test_a_claim_the_node_cannot_prepare_waits_with_one_counted_warning_then_runs_when_the_cause_goes(
    cluster: SimCluster,
) -> None:
    namespace = cluster.namespace("prepare-failure")
    cluster.kubectl("apply", "-n", namespace, "-f", str(DEMO / "01-mig-1g.yaml"))
    pod = wait_for(
        "the pod to run once NVML creates the instance", lambda: cluster.running(namespace, {"inference-1g"})
    )
    pod = pod["inference-1g"]
    assert pod["spec"]["nodeName"] == "node-1"

    failures = wait_for(
        "the three failures counted", lambda: (f := prepare_failures(cluster, namespace)) and f[0]["count"] == 3 and f
    )
    (failure,) = failures  # one Event for the three attempts, not one per retry
    assert failure["type"] == "Warning"
    assert failure["message"].endswith("(NVML: Insufficient Resources)"), failure["message"]
    assert "device gpu-0-mig-1g10gb-" in failure["message"]
    # The container started only after the last failure: the pod never ran without its device.
    (container,) = pod["status"]["containerStatuses"]
    assert container["state"]["running"]["startedAt"] >= failure["lastTimestamp"]
    assert cluster.mig_instances()["node-1"] == 1  # the failed attempts left nothing behind
    described = cluster.kubectl("describe", "resourceclaim", "-n", namespace).stdout
    assert "MigInstanceReady" in described
    assert "MigDevicesPrepareFailed" in described
    cluster.describe_running_claims(namespace)
    cluster.delete_all(namespace)
