#!/usr/bin/env python3
"""Benchmark: pod creation to Running on the upstream control plane, with the ``dynamic`` placement policy
beside its simple alternative, ``static``.

Two ``migdra sim up`` clusters run at once (2 nodes x 4 H100 80GB each, kube-apiserver, kube-scheduler and
kube-controller-manager of ``make kube``), one per policy.  Each run measures both in turn, in an order
rotated from run to run, so a burst of load falls on both alike:

- one pod with a 1g.10gb claim (from a ResourceClaimTemplate): seconds from its create to Running;
- a burst of ``--pods`` such pods created back to back: seconds from the first create until all run,
  pods per second, and how many pods were told FailedScheduling on the way -- with ``dynamic`` a node
  re-publishes its slices after each allocation, and while the new pool generation is incomplete
  kube-scheduler skips the node, so pods wait;
- from kube-apiserver's audit log: API requests per pod of migdra's node plugins and of its reservation
  controller during the burst.

Then every pod is deleted and the run waits until every MIG instance is gone.  Times come from a watch on
the namespace's pods (the moment the Running status arrives), not from polling.  ``sim up`` builds the
control plane first when ``make kube`` has not.

Results go to ``docs/benchmarks.md`` ("Control planes: pod creation to Running") through ``run_all.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import REPO, Report, add_common_arguments, check_runs, ratios, summary

sys.path.insert(0, str(REPO))
from dra_driver.kube.client import CLAIM_TEMPLATES, CLAIMS, EVENTS, PODS, Client
from migdra_devcluster.cluster import gpu_instances_per_node
from migdra_devcluster.upstream.access import RELEASE_NAMESPACE
from migdra_devcluster.upstream.binaries import built_versions

NAMESPACE = "default"
POLICIES = ("dynamic", "static")
GPUS = "H100-SXM5-80GB:4"
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "mig-1g", "namespace": NAMESPACE},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.migdra.io",
                            "selectors": [
                                {"cel": {"expression": "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"}}
                            ],
                        },
                    }
                ]
            }
        }
    },
}
USERS = {
    "plugin": f"system:serviceaccount:{RELEASE_NAMESPACE}:migdra-kubelet-plugin",
    "controller": f"system:serviceaccount:{RELEASE_NAMESPACE}:migdra-controller",
}
WAIT = 300.0


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {"name": "app", "image": "registry.example/app:1", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "mig-1g"}],
        },
    }


class RunningWatch:
    """When each pod of the namespace was first seen Running, from a watch (a thread)."""

    def __init__(self, client: Client, label: str) -> None:
        self.label = label
        self.client = client.fork()
        self.running: dict[str, float] = {}
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="running-watch", daemon=True)

    def __enter__(self) -> RunningWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()

    def _run(self) -> None:
        # Resume each watch from the last resourceVersion seen (bookmarks included), so no event falls
        # between two watches; re-list only when the server refuses that version, and count the pods
        # the list shows Running (their time is the list's, a little late, never missed).
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    items, version = self.client.list(PODS, NAMESPACE)
                    for item in items:
                        self._seen(item)
                for event in self.client.watch(PODS, version, timeout_seconds=5):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(obj)
                    if self._stop.is_set():
                        return
            except Exception:  # a refused or broken watch: list again
                version = None

    def _seen(self, pod: dict[str, Any]) -> None:
        if (pod.get("status") or {}).get("phase") == "Running":
            with self.changed:
                self.running.setdefault(pod["metadata"]["name"], time.monotonic())
                self.changed.notify_all()

    def describe(self, name: str) -> str:
        """Where a pod that did not start stands: its phase, node, conditions and its newest events."""
        pod = self.client.get(PODS, NAMESPACE, name) or {}
        status = pod.get("status") or {}
        conditions = [
            f"{c['type']}={c['status']}" + (f" ({c['message']})" if c.get("message") else "")
            for c in status.get("conditions") or []
        ]
        selector = f"involvedObject.kind=Pod,involvedObject.name={name}"  # the API server filters, not we
        events = [
            f"{e['reason']}: {e.get('message', '')}"
            for e in self.client.list(EVENTS, NAMESPACE, field_selector=selector)[0]
        ]
        return (
            f"{name} phase={status.get('phase')} node={(pod.get('spec') or {}).get('nodeName')} "
            f"conditions={conditions} events={events[-3:]}"
        )

    def wait(self, names: set[str], timeout: float = WAIT) -> float:
        """The monotonic time the last of ``names`` became Running."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not names <= self.running.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(names - self.running.keys())
                    raise SystemExit(
                        f"{self.label}: {len(missing)} pod(s) not Running within {timeout:g} s: "
                        + "; ".join(self.describe(name) for name in missing[:3])
                    )
                self.changed.wait(min(left, 1.0))
            return max(self.running[name] for name in names)


@dataclass
class Cluster:
    label: str
    workdir: Path
    process: subprocess.Popen[str]
    client: Client
    one_pod: list[float] = field(default_factory=list)
    burst: list[float] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)
    requests: dict[str, list[float]] = field(default_factory=dict)
    serial: int = 0

    def audit_counts(self) -> dict[str, int]:
        log = self.workdir / "kube" / "audit.log"
        counts = dict.fromkeys(USERS, 0)
        for line in log.read_text().splitlines() if log.exists() else []:
            user = json.loads(line)["user"]["username"]
            for component, name in USERS.items():
                counts[component] += user == name
        return counts


@contextmanager
def sim_cluster(root: Path, policy: str, nodes: int, kube_version: str) -> Iterator[Cluster]:
    workdir = root / policy[0]
    argv = [str(Path(sys.executable).with_name("migdra")), "sim", "up", "--workdir", str(workdir)]
    argv += ["--nodes", str(nodes), "--gpus", GPUS, "--kube-version", kube_version]
    for number in range(1, nodes + 1):
        argv += ["--plugin-env", f"node-{number}:MIGDRA_PLACEMENT_POLICY={policy}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("ready kubeconfig="):
        process.kill()
        raise SystemExit(f"migdra sim up ({policy}) did not get ready: {line!r}")
    client = Client(Path(line.strip().split("=", 1)[1]))
    client.create(CLAIM_TEMPLATES, TEMPLATE)
    try:
        yield Cluster(policy, workdir, process, client)
    finally:
        client.close()
        subprocess.run(
            [str(Path(sys.executable).with_name("migdra")), "sim", "down", "--workdir", str(workdir)],
            check=False,
            capture_output=True,
            timeout=120,
        )
        process.wait(timeout=60)


def measure(cluster: Cluster, pods: int) -> None:
    """One run on one cluster: one pod, then a burst; everything deleted and gone afterwards."""
    with RunningWatch(cluster.client, cluster.label) as watch:
        cluster.serial += 1
        single = f"one-{cluster.serial}"
        started = time.monotonic()
        cluster.client.create(PODS, pod(single))
        cluster.one_pod.append(watch.wait({single}) - started)

        before = cluster.audit_counts()
        names = {f"burst-{cluster.serial}-{n}" for n in range(pods)}
        started = time.monotonic()
        for name in sorted(names):
            cluster.client.create(PODS, pod(name))
        cluster.burst.append(watch.wait(names) - started)
        after = cluster.audit_counts()
        for component in USERS:
            cluster.requests.setdefault(component, []).append((after[component] - before[component]) / pods)
    events = cluster.client.list(EVENTS, NAMESPACE, field_selector="reason=FailedScheduling")[0]
    cluster.waited.append(
        len(
            {
                e["involvedObject"]["name"]
                for e in events
                if e["involvedObject"]["name"].startswith(f"burst-{cluster.serial}-")
            }
        )
    )
    # A graceful delete, as kubectl's: the kubelet unprepares (destroys the instance) before the pod goes,
    # so the next run never meets an instance of this one still on its way out.
    for item in cluster.client.list(PODS, NAMESPACE)[0]:
        cluster.client.delete(PODS, NAMESPACE, item["metadata"]["name"])
    deadline = time.monotonic() + WAIT
    while (
        cluster.client.list(PODS, NAMESPACE)[0]
        or cluster.client.list(CLAIMS, NAMESPACE)[0]
        or sum(gpu_instances_per_node(cluster.workdir).values())
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"{cluster.label}: pods, claims or MIG instances left after {WAIT:g} s")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--pods", type=int, default=50, help="pods of one burst (2 nodes x 4 H100 hold 56)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--kube-version", default=None, help="a built version (default: the oldest, CI's 1.36)")
    args = parser.parse_args()
    check_runs(parser, args)
    version = args.kube_version or (built_versions() or ["1.36"])[0]
    report = Report("controlplane", args, {"pods": args.pods, "nodes": args.nodes, "gpus": GPUS, "kube": version})
    with tempfile.TemporaryDirectory(prefix="migdra-cp-", dir="/tmp") as scratch, ExitStack() as stack:
        clusters = [stack.enter_context(sim_cluster(Path(scratch), p, args.nodes, version)) for p in POLICIES]
        with report:
            for run in range(args.runs):
                for cluster in clusters[run % len(clusters) :] + clusters[: run % len(clusters)]:
                    measure(cluster, args.pods)

    table = report.table(
        "pods",
        f"Pod creation to Running, {args.nodes} nodes x {GPUS}, 1g.10gb claims from a template (kube {version})",
        ["placement policy", "1 pod", f"{args.pods} pods, all Running", "pods/s", "pods told FailedScheduling"],
    )
    for cluster in clusters:
        table.add(
            cluster.label,
            summary(cluster.one_pod, "s", 2),
            summary(cluster.burst, "s", 1),
            summary([args.pods / t for t in cluster.burst], "", 1),
            summary(cluster.waited, "", 0),
        )
    dynamic, static = clusters
    ratio = report.table("ratio", "dynamic / static, per run (the same runs)", ["1 pod", f"{args.pods} pods"])
    ratio.add(
        summary(ratios(dynamic.one_pod, static.one_pod), "x", 2), summary(ratios(dynamic.burst, static.burst), "x", 2)
    )
    calls = report.table(
        "requests",
        f"API requests per pod on kube-apiserver (audit log, during the {args.pods}-pod burst)",
        ["policy", "node plugins", "reservation controller"],
    )
    for cluster in clusters:
        calls.add(
            cluster.label, summary(cluster.requests["plugin"], "", 1), summary(cluster.requests["controller"], "", 1)
        )
    report.note("Both clusters run at once; each run measures both in a rotated order.")
    report.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
