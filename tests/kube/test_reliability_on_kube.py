"""The real control plane restarted under load: pods are created and deleted while kube-apiserver is
killed (and started again by ``sim up``, as a static pod would be), then etcd is compacted and killed, so
every watch comes back to a server whose history no longer holds its resourceVersion and must list again
(``410 Gone``).  The node plugins, the reservation controller and the kubelets ride it out: afterwards
every remaining pod runs on a prepared, reserved MIG instance, deleting them leaves no instance and no
claim, and no plugin process had to be restarted.  (The controller's leader may exit when it cannot renew
its Lease and be started again; that is its design, docs/claim-status.md.)

Every wait polls observable state with a bounded deadline; the kills are SIGKILL at a moment chosen by
the test, not by timing luck.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import EVENTS, PODS
from tests.sim_cluster import DEMO, SimCluster, versioned_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-reliability")

WAIT = 180.0  # a restarted kube-apiserver on a loaded two-core machine, then every client's relist


cluster = versioned_cluster("--nodes", "2", "--gpus", "H100-SXM5-80GB:1")


def pid_of(cluster: SimCluster, component: str) -> int:
    return int((cluster.workdir / "kube" / f"{component}.pid").read_text().split()[0])


def kill_and_wait_restarted(cluster: SimCluster, component: str) -> None:
    """SIGKILL ``component``; return once ``sim up`` started a new one and the API answers again."""
    old = pid_of(cluster, component)
    os.kill(old, signal.SIGKILL)
    wait_for(f"{component} to be started again", lambda: pid_of(cluster, component) != old, timeout=WAIT)
    wait_for("kube-apiserver to answer again", lambda: healthy(cluster), timeout=WAIT)


def healthy(cluster: SimCluster) -> bool:
    try:
        cluster.client.list(PODS, "kube-system")
    except Exception:  # refused or timed out while it starts: not yet
        return False
    return True


def etcd_url(cluster: SimCluster) -> str:
    """etcd's client URL, from kube-apiserver's command line (``--etcd-servers``)."""
    cmdline = Path(f"/proc/{pid_of(cluster, 'kube-apiserver')}/cmdline").read_bytes().split(b"\0")
    (servers,) = [a.decode().split("=", 1)[1] for a in cmdline if a.startswith(b"--etcd-servers=")]
    return servers


def compact_etcd(cluster: SimCluster) -> int:
    """Compact etcd's history up to its current revision (its JSON gateway): older resourceVersions are gone."""
    url = etcd_url(cluster)
    key = base64.b64encode(b"/registry").decode()
    with urllib.request.urlopen(
        urllib.request.Request(f"{url}/v3/kv/range", data=json.dumps({"key": key}).encode()), timeout=10
    ) as answer:
        revision = int(json.loads(answer.read())["header"]["revision"])
    body = json.dumps({"revision": revision, "physical": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v3/kv/compaction", data=body), timeout=30):
        pass
    return revision


def pod(name: str) -> str:
    return (DEMO / "01-mig-1g.yaml").read_text().split("---", 1)[1].replace("name: inference-1g", f"name: {name}")


OCCUPIED = re.compile(r"is occupied by GPU instance \d+ \(profile \d+ at \d+:\d+\) prepared for claim ([^/\s]+)/(\S+) ")
"""The node plugin's refusal of a placement another claim's GPU instance holds (it names that claim)."""


def claim_of(cluster: SimCluster, namespace: str, pod: str) -> str:
    """The name of the claim generated for ``pod`` (its one template claim)."""
    statuses = (cluster.pods(namespace)[pod].get("status") or {}).get("resourceClaimStatuses") or []
    (name,) = [s["resourceClaimName"] for s in statuses if s.get("resourceClaimName")]
    return str(name)


def holder_of_placement(cluster: SimCluster, namespace: str, pod: str, pods: dict[str, dict[str, Any]]) -> str | None:
    """The pod (of ``pods``, the namespace's as just listed) whose claim holds the placement ``pod``'s claim was
    allocated, when the node plugin refused to prepare it for that reason (a FailedPrepareDynamicResources
    Event naming the holding claim)."""
    selector = f"involvedObject.name={pod},reason=FailedPrepareDynamicResources"
    events = cluster.client.list(EVENTS, namespace, field_selector=selector)[0]
    holders = {match.group(2) for e in events if (match := OCCUPIED.search(e.get("message") or ""))}
    for name, other in pods.items():
        statuses = (other.get("status") or {}).get("resourceClaimStatuses") or []
        if name != pod and any(s.get("resourceClaimName") in holders for s in statuses):
            return name
    return None


def conflict_reported(cluster: SimCluster, namespace: str, claim: str) -> bool:
    """Whether the controller reported ``claim``'s placement as overlapping another claim's (Warning Event)."""
    selector = f"involvedObject.name={claim},reason=PlacementConflict"
    return bool(cluster.client.list(EVENTS, namespace, field_selector=selector)[0])


def true_conditions(claim: dict[str, Any]) -> list[str]:
    """The condition types of the claim's device entries that are True (which writer is behind, if any)."""
    devices = (claim.get("status") or {}).get("devices") or []
    return sorted({c["type"] for d in devices for c in d.get("conditions") or [] if c.get("status") == "True"})


def reserved_and_ready(claim: dict[str, Any]) -> bool:
    return {"Reserved", "Ready"} <= set(true_conditions(claim))


def test_the_components_ride_out_restarts_of_kube_apiserver_and_etcd(cluster: SimCluster, tmp_path: Path) -> None:
    namespace = cluster.namespace("churn")
    template = (DEMO / "01-mig-1g.yaml").read_text().split("---", 1)[0]
    cluster.apply(namespace, template)
    plugin_pids = {node: cluster.plugin_pid(node) for node in ("node-1", "node-2")}
    refused: list[str] = []  # what the churn had to try again while the server was down
    stop = threading.Event()
    created: list[str] = []

    def churn() -> None:
        """Create a pod, delete every third one, until told to stop; the API may be down meanwhile."""
        number = 0
        while not stop.is_set() and number < 40:
            name = f"churn-{number}"
            manifest = tmp_path / f"{name}.yaml"
            manifest.write_text(pod(name))
            if cluster.kubectl("apply", "-n", namespace, "-f", str(manifest), check=False).returncode != 0:
                refused.append(name)  # the API server is restarting: this pod again, in a moment
                stop.wait(0.5)
                continue
            created.append(name)
            if number % 3 == 2:
                oldest = created[0]
                if cluster.kubectl("delete", "pod", "-n", namespace, oldest, "--wait=false", check=False).returncode:
                    refused.append(f"delete {oldest}")
                else:
                    created.remove(oldest)
            number += 1
            stop.wait(0.2)

    churner = threading.Thread(target=churn, name="churn")
    churner.start()
    try:
        wait_for("the churn to start", lambda: len(created) >= 4)
        kill_and_wait_restarted(cluster, "kube-apiserver")
        wait_for("the churn to go on after the restart", lambda: len(created) >= 8, timeout=WAIT)
        compact_etcd(cluster)
        kill_and_wait_restarted(cluster, "etcd")
        kill_and_wait_restarted(cluster, "kube-apiserver")  # its watch cache starts after the compaction
    finally:
        stop.set()
        churner.join(timeout=WAIT)
    assert not churner.is_alive()

    # Two H100s hold 14 1g.10gb instances: every pod still there must run, on a ready, reserved device.
    assert created, "the churn created pods"
    # What is still there is read from the API, not from the churn's bookkeeping: a kubectl call cut off by
    # the server's restart may have been carried out all the same (a pod created or deleted that the churn
    # counted as refused).  Any of them may hold the 14 devices, so count them.
    last_count = ["nothing yet"]

    def settled() -> tuple[dict[str, str]] | None:
        """Every live pod runs -- or waits on a placement kube-scheduler gave twice (below); then the waiting
        pods, each with the running pod whose claim holds its placement (in a tuple: none waiting is truthy)."""
        pods = cluster.pods(namespace)
        live = {n: p for n, p in pods.items() if not p["metadata"].get("deletionTimestamp")}
        running = {n for n, p in live.items() if (p.get("status") or {}).get("phase") == "Running"}
        waiting = {
            n: holder for n in set(live) - running if (holder := holder_of_placement(cluster, namespace, n, pods))
        }
        waiting = {n: holder for n, holder in waiting.items() if holder in running}
        last_count[0] = f"{len(running)} running of {len(live)} pods, {len(waiting)} waiting on a double allocation"
        room = min(len(live), 14)
        return (waiting,) if len(running) + len(waiting) == room and room else None

    (waiting,) = wait_for(
        "every remaining pod to run (or wait on a placement allocated twice), up to the 14 devices",
        settled,
        timeout=WAIT,
        detail=lambda: f"{last_count[0]}\n{cluster.why_not_running(namespace)}",
    )
    # kube-scheduler may give one placement to two claims when kube-apiserver dies while it writes an
    # allocation (the write lands, its answer is lost, the placement looks free again: seen on 1.36.5).  The
    # node plugin prepares one and refuses the other, naming the holder; the controller reports the conflict
    # on both claims.  Nothing is double-booked, and the waiting pod runs once the holder's pod goes.
    for waiter, holder in waiting.items():
        claim = claim_of(cluster, namespace, waiter)
        assert conflict_reported(cluster, namespace, claim), f"no PlacementConflict on {claim} of waiting {waiter}"
        cluster.kubectl("delete", "pod", "-n", namespace, holder, "--wait=false")
    if waiting:
        wait_for(
            f"the pods that waited on a double allocation ({sorted(waiting)}) to run once its holder went",
            lambda: cluster.running(namespace, set(waiting)),
            timeout=WAIT,
            detail=lambda: cluster.why_not_running(namespace),
        )

    last_seen = ["nothing yet"]

    def converged() -> bool:
        claims = [c for c in cluster.claims(namespace) if (c.get("status") or {}).get("reservedFor")]
        running = [p for p in cluster.pods(namespace).values() if (p.get("status") or {}).get("phase") == "Running"]
        instances = cluster.mig_instances()
        not_ready = sorted(f"{c['metadata']['name']} {true_conditions(c)}" for c in claims if not reserved_and_ready(c))
        last_seen[0] = (
            f"{len(claims)} reserved claims (not Reserved+Ready: {not_ready}), {len(running)} running pods "
            f"of {len(cluster.pods(namespace))}, MIG instances {instances}"
        )
        return len(claims) == len(running) and not not_ready and sum(instances.values()) == len(running)

    wait_for(
        "claims Reserved and Ready, one MIG instance per running pod",
        converged,
        timeout=WAIT,
        detail=lambda: f"last seen: {last_seen[0]}\n{cluster.problems_logged()}",
    )
    assert {node: cluster.plugin_pid(node) for node in plugin_pids} == plugin_pids, "no plugin was restarted"

    cluster.describe_running_claims(namespace)

    cluster.delete_all(namespace)
    wait_for("every claim to go", lambda: not cluster.claims(namespace), timeout=WAIT)
    wait_for("every instance to go", lambda: cluster.mig_instances() == {"node-1": 0, "node-2": 0}, timeout=WAIT)
