"""A simulated kubelet's heartbeats: its node Lease in ``kube-node-lease``, renewed every 10 s, and its
Node status, posted again every 5 minutes (kubelet's ``nodeLeaseDurationSeconds`` of 40 s renewed at a
quarter of it, and ``nodeStatusReportFrequency``).

Why: kube-controller-manager's node-lifecycle controller marks a node whose Lease and status both go
stale ``NotReady``, taints it ``node.kubernetes.io/unreachable`` and, after five minutes, evicts its pods.
A simulated node must look alive to the real controllers exactly as a real one does.

The kubelet's sync loop calls :meth:`NodeHeartbeat.beat` on each pass (at least once a second), so no
thread of its own is needed; a pass that fails is tried again on the next one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from dra_driver.kube.client import LEASES, NODES, Client, status_code
from dra_driver.kube.failures import describe_failure
from migdra_devcluster.kubelet.node import now_rfc3339

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
RENEW_INTERVAL_SECONDS = LEASE_DURATION_SECONDS / 4
STATUS_REPORT_SECONDS = 300.0


def micro_time(moment: datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_node_lease(node: dict[str, Any], renew: datetime) -> dict[str, Any]:
    """The Lease kubelet keeps for ``node``: held by the node, owned by the Node (gone with it)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {
            "holderIdentity": meta["name"],
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(renew),
        },
    }


class NodeHeartbeat:
    """Renews one node's Lease and re-posts its Ready status when due."""

    def __init__(self, client: Client, node_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.node_name = node_name
        self._clock = clock
        self._lease_due = 0.0
        self._status_due = clock() + STATUS_REPORT_SECONDS

    def beat(self) -> None:
        """Renew the Lease (creating it the first time) and post the status, each when due."""
        now = self._clock()
        if now >= self._lease_due:
            try:
                self._renew_lease()
                self._lease_due = now + RENEW_INTERVAL_SECONDS
            except Exception as exc:
                log.warning("node %s: lease not renewed: %s", self.node_name, describe_failure(exc))
        if now >= self._status_due:
            try:
                self._post_status()
                self._status_due = now + STATUS_REPORT_SECONDS
            except Exception as exc:
                log.warning("node %s: status not posted: %s", self.node_name, describe_failure(exc))

    def _post_status(self) -> None:
        """Every condition's heartbeat now; a transition time changes only with the status (a write
        with the read's resourceVersion: a conflict is tried again on the next pass)."""
        node = self.client.get(NODES, None, self.node_name)
        if node is None:
            raise LookupError(f"node {self.node_name} does not exist")
        heartbeat = now_rfc3339()
        for condition in (node.get("status") or {}).get("conditions") or []:
            condition["lastHeartbeatTime"] = heartbeat
        self.client.update(NODES, node, "status")

    def _renew_lease(self) -> None:
        renew = micro_time(datetime.now(UTC))
        lease = self.client.get(LEASES, NODE_LEASE_NAMESPACE, self.node_name)
        if lease is None:
            node = self.client.get(NODES, None, self.node_name)
            if node is None:
                raise LookupError(f"node {self.node_name} does not exist")
            try:
                self.client.create(LEASES, build_node_lease(node, datetime.now(UTC)))
            except Exception as exc:
                if status_code(exc) != 409:
                    raise
            return
        lease["spec"]["renewTime"] = renew
        lease["spec"]["holderIdentity"] = self.node_name
        self.client.update(LEASES, lease)
