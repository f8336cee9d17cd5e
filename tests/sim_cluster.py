"""A ``migdra sim up`` cluster as tests drive it: started as a process on the upstream control plane of one
Kubernetes version, reached with the official client and the real kubectl, stopped with ``migdra sim
down``.  Every wait polls observable state with a bounded deadline.

Which versions: a module's cluster (:func:`versioned_cluster`) runs once per version of
:func:`flow_versions` -- ``MIGDRA_KUBE_VERSIONS`` ("1.36 1.37"), else every version ``make kube`` built;
CI builds the oldest and the newest supported minor, so every flow runs on both.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, PODS, Client
from migdra_devcluster.cluster import gpu_instances_per_node
from migdra_devcluster.upstream.binaries import built_versions
from tests.kube_apiserver import require_kube_binaries
from tests.kubelet_client import short_socket_dir
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
READY_TIMEOUT = 400.0
"""kube-apiserver, the controllers and the plugins of every node: a minute on an idle two-core machine,
several with both CPUs busy."""
DELETE_ALL_TIMEOUT = 180.0
"""Seconds :meth:`SimCluster.delete_all` may take: every pod's unprepare, one at a time per node."""


DRIVER = "gpu.migdra.io"
PLACEMENT = re.compile(r"Placement:\s+Size:\s+(\d+)\s+Start:\s+(\d+)")
"""A device entry's placement as ``kubectl describe`` prints its data."""


def _ready(entry: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in entry.get("conditions") or [])


@dataclass
class SimCluster:
    workdir: Path
    process: subprocess.Popen[str]
    kubeconfig: Path
    client: Client
    stdout_lines: list[str]
    version: str
    """The Kubernetes version of its control plane (v1.36.5)."""

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def plugin_pid(self, node: str) -> int:
        return int((self.workdir / "nodes" / node / "plugin.pid").read_text().split()[0])

    def mig_instances(self) -> dict[str, int]:
        """GPU instances per node, read through the simulated NVML as the plugins read them."""
        return gpu_instances_per_node(self.workdir)

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.client.list(PODS, namespace)[0]}

    def claims(self, namespace: str) -> list[dict[str, Any]]:
        return self.client.list(CLAIMS, namespace)[0]

    def running(self, namespace: str, names: set[str]) -> dict[str, dict[str, Any]] | None:
        pods = self.pods(namespace)
        if all((pods.get(n) or {}).get("status", {}).get("phase") == "Running" for n in names):
            return pods
        return None

    def describe_claim(self, namespace: str, name: str, driver: str = DRIVER) -> str:
        """``kubectl describe resourceclaim``, once every device entry of ``driver`` is Ready, checked to show
        each entry's Ready condition, its GPU, its placement and MIG UUID (a MIG device's) -- how a user
        finds out what a claim became; returns the text for more checks."""

        def ready_entries() -> list[dict[str, Any]] | None:
            claim = self.client.get(CLAIMS, namespace, name) or {}
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
            ours = [r for r in results or [] if r["driver"] == driver]
            entries = [e for e in (claim.get("status") or {}).get("devices") or [] if e["driver"] == driver]
            ready = [e for e in entries if _ready(e)]
            return ready if ours and len(ready) == len(ours) else None

        entries = wait_for(f"every device of claim {namespace}/{name} to be Ready", ready_entries)
        text = self.kubectl("describe", "resourceclaim", "-n", namespace, name).stdout
        assert text.count("Type:                  Ready") >= len(entries), text
        shown = {(int(size), int(start)) for size, start in PLACEMENT.findall(text)}
        for entry in entries:
            data = entry["data"]
            assert data["gpuUUID"] in text, (data, text)
            if "placement" in data:
                assert (data["placement"]["size"], data["placement"]["start"]) in shown, (data, text)
                if not data.get("adminAccess"):  # admin access to a placement nobody realized has no UUID
                    assert data["migUUID"] in text, (data, text)
        return text

    def describe_running_claims(self, namespace: str) -> int:
        """:meth:`describe_claim` for every claim reserved for a running pod of ``namespace``: how every flow
        ends before it cleans up.  Returns how many claims were described (at least one)."""
        running = {n for n, p in self.pods(namespace).items() if (p.get("status") or {}).get("phase") == "Running"}
        described = 0
        for claim in self.claims(namespace):
            holders = {r["name"] for r in (claim.get("status") or {}).get("reservedFor") or []}
            if holders & running:
                self.describe_claim(namespace, claim["metadata"]["name"])
                described += 1
        assert described, f"no claim of a running pod in {namespace}"
        return described

    def why_not_running(self, namespace: str) -> str:
        """What a wait for pods to run prints when it times out: :meth:`explain_pods` of those not Running."""
        return self.explain_pods(namespace, lambda pod: (pod.get("status") or {}).get("phase") != "Running", "Running")

    def explain_pods(
        self, namespace: str, stuck: Callable[[dict[str, Any]], bool], waited: str, lines: int = 15
    ) -> str:
        """What a wait on pods prints when it times out: each pod of ``namespace`` that is ``stuck`` (not yet
        what the wait waited for, ``waited``), with its node, deletion, scheduling condition and its claims'
        state; the namespace's last Events; the lines of sim up's (its simulated kubelets'), kube-scheduler's
        and kube-controller-manager's logs that name such a pod; and the last warnings of the controller and
        each node's plugin -- whether the scheduler tried (and why it failed) or never got to the pod, a claim
        was never made, a kubelet could not start or stop the pod, or a plugin could not prepare."""
        pods = self.pods(namespace)
        claims = {c["metadata"]["name"]: c for c in self.claims(namespace)}
        waiting = {name: pod for name, pod in pods.items() if stuck(pod)}
        found = [f"{len(waiting)} of {len(pods)} pods not {waited}"]
        for name, pod in sorted(waiting.items()):
            status = pod.get("status") or {}
            scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            found.append(
                f"pod {name}: phase {status.get('phase')}, node {pod['spec'].get('nodeName')}, deleting "
                f"{bool(pod['metadata'].get('deletionTimestamp'))}, PodScheduled {scheduled}"
            )
            for reference in status.get("resourceClaimStatuses") or []:
                claim = claims.get(reference.get("resourceClaimName") or "")
                claim_status = (claim or {}).get("status") or {}
                found.append(
                    f"  claim {reference.get('resourceClaimName')}: "
                    + (
                        f"allocated {bool(claim_status.get('allocation'))}, reservedFor "
                        f"{[r.get('name') for r in claim_status.get('reservedFor') or []]}"
                        if claim
                        else "not in the API"
                    )
                )
        events = self.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False).stdout
        found.append(f"--- the last {lines * 4} Events:")
        found.extend(events.splitlines()[-lines * 4 :])
        names = set(waiting) | {
            reference["resourceClaimName"]
            for pod in waiting.values()
            for reference in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if reference.get("resourceClaimName")
        }
        logs = {"sim up (its kubelets)": sim_up_log(self.workdir), "controller": self.workdir / "controller.log"}
        logs |= {
            component: self.workdir / "kube" / f"{component}.log"
            for component in ("kube-scheduler", "kube-controller-manager")
        }
        logs |= {f"{node.name}'s plugin": node / "plugin.log" for node in sorted((self.workdir / "nodes").iterdir())}
        for component, log in logs.items():
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            naming = [line for line in text if any(name in line for name in names)]
            found.append(f"--- {component}: {len(naming)} lines name such a pod or its claims, the last:")
            found.extend(naming[-lines:])
        found.append(self.problems_logged(lines))
        return "\n".join(found)

    def problems_logged(self, lines: int = 25) -> str:
        """The last warnings and errors of the controller and each node's plugin: which writer is stuck, and why."""
        logs = {"controller": self.workdir / "controller.log"}
        logs |= {node.name: node / "plugin.log" for node in sorted((self.workdir / "nodes").iterdir())}
        found = []
        for name, path in logs.items():
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            bad = [
                line
                for line in text
                if any(level in line for level in (" WARNING ", " ERROR ", '"warning"', '"error"'))
            ]
            found.append(f"--- {name}: {len(bad)} warnings/errors, the last:\n" + "\n".join(bad[-lines:]))
        return "\n".join(found)

    def namespace(self, name: str) -> str:
        self.kubectl("create", "namespace", name)
        return name

    def apply(self, namespace: str, manifest: str) -> None:
        """``kubectl apply`` of a manifest given as text."""
        done = subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), "apply", "-n", namespace, "-f", "-"],
            input=manifest,
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def delete_all(self, namespace: str) -> None:
        """Delete the namespace's pods (graceful, as kubectl does) and wait until they are gone.

        Bounded by :data:`DELETE_ALL_TIMEOUT`: a simulated kubelet unprepares one pod at a time, and eight
        pods on two busy CPUs once took longer than a minute.  kubectl only asks for the deletions: its own
        wait could outlast :meth:`kubectl`'s subprocess limit (it once did), so the wait is this one."""
        self.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
        wait_for(
            f"the pods of {namespace} to go",
            lambda: not self.pods(namespace),
            timeout=DELETE_ALL_TIMEOUT,
            detail=lambda: self.explain_pods(namespace, lambda pod: True, "gone"),
        )


def flow_versions() -> list[str]:
    """The versions the clusters of the end-to-end flows run: ``MIGDRA_KUBE_VERSIONS``, else every built one
    (a placeholder when none is: the fixture then skips, or fails under ``MIGDRA_REQUIRE_KUBE=1``)."""
    asked = os.environ.get("MIGDRA_KUBE_VERSIONS", "").replace(",", " ").split()
    return asked or built_versions() or ["unbuilt"]


def oldest_version() -> str:
    """The version of a test that needs one cluster of any version: ``MIGDRA_KUBE_VERSION``, else the oldest built."""
    return os.environ.get("MIGDRA_KUBE_VERSION") or (built_versions() or ["unbuilt"])[0]


@contextmanager
def sim_cluster(*args: str, version: str | None = None) -> Iterator[SimCluster]:
    """``migdra sim up ARGS`` on ``version`` (else :func:`oldest_version`) for the block; ``sim down`` after."""
    require_kube_binaries()
    with short_socket_dir() as root:
        sim = start_cluster(root / "sim", *args, version=version or oldest_version())
        try:
            yield sim
        finally:
            stop_cluster(sim)


def versioned_cluster(*args: str) -> Callable[..., Iterator[SimCluster]]:
    """A module's ``cluster`` fixture: ``sim up ARGS`` once per version of :func:`flow_versions`, the
    module's tests run on each in turn (``cluster = versioned_cluster("--nodes", "2")``)."""

    @pytest.fixture(scope="module", params=flow_versions())
    def cluster(request: pytest.FixtureRequest) -> Iterator[SimCluster]:
        with sim_cluster(*args, version=request.param) as sim:
            yield sim

    return cluster


def start_cluster(
    workdir: Path, *args: str, version: str | None = None, ready_timeout: float = READY_TIMEOUT
) -> SimCluster:
    """``migdra sim up`` with ``args`` on ``version`` (else :func:`oldest_version`); returns once it printed
    ``ready kubeconfig=<path>``."""
    version = version or oldest_version()
    command = [str(BIN / "migdra"), "sim", "up", "--workdir", str(workdir), "--kube-version", version, *args]
    # sim up's own log (its simulated kubelets' warnings among it), beside the work directory: why a pod
    # bound to a node does not run (SimCluster.why_not_running reads it)
    with sim_up_log(workdir).open("ab") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    lines: list[str] = []
    first = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            first.set()
        first.set()

    threading.Thread(target=read, daemon=True).start()
    if not first.wait(ready_timeout) or not lines:
        process.kill()
        pytest.fail(f"migdra sim up printed nothing within {ready_timeout:g} s (exit {process.poll()})")
    assert lines[0].startswith("ready kubeconfig="), lines
    kubeconfig = Path(lines[0].strip().split("=", 1)[1])
    return SimCluster(workdir, process, kubeconfig, Client(kubeconfig), lines, version)


def sim_up_log(workdir: Path) -> Path:
    """Where :func:`start_cluster` keeps what ``sim up`` writes to stderr (appended to by a restart)."""
    return workdir.parent / f"{workdir.name}-sim-up.log"


def sim_down(workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "migdra"), "sim", "down", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def stop_cluster(sim: SimCluster) -> None:
    """``migdra sim down`` and the supervisor's exit, as a module fixture's teardown does."""
    sim.client.close()
    down = sim_down(sim.workdir)
    assert down.returncode == 0, down.stderr
    sim.process.wait(timeout=30)
    assert sim.process.stdout is not None
    sim.process.stdout.close()
