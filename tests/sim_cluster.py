"""A ``migdra sim up`` cluster as tests drive it: started as a process, reached with the official client
and the real kubectl, stopped with ``migdra sim down``.  Shared by tests/e2e (the embedded control plane)
and tests/kube (the upstream one).  Every wait polls observable state with a bounded deadline.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, PODS, Client
from migdra_devcluster.cluster import gpu_instances_per_node
from tests.waiting import wait_for

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
READY_TIMEOUT = 120.0
DELETE_ALL_TIMEOUT = 180.0
"""Seconds :meth:`SimCluster.delete_all` may take: every pod's unprepare, one at a time per node."""


@dataclass
class SimCluster:
    workdir: Path
    process: subprocess.Popen[str]
    kubeconfig: Path
    client: Client
    stdout_lines: list[str]
    control_plane: str = "local"
    """``local`` (migdra's embedded API server, scheduler, claim controller) or ``kube`` (upstream)."""

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
        wait_for(f"the pods of {namespace} to go", lambda: not self.pods(namespace), timeout=DELETE_ALL_TIMEOUT)


def start_cluster(workdir: Path, *args: str, ready_timeout: float = READY_TIMEOUT) -> SimCluster:
    """``migdra sim up`` with ``args``; returns once it printed ``ready kubeconfig=<path>``."""
    command = [str(BIN / "migdra"), "sim", "up", "--workdir", str(workdir), *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    plane = args[args.index("--control-plane") + 1] if "--control-plane" in args else "local"
    return SimCluster(workdir, process, kubeconfig, Client(kubeconfig), lines, plane)


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
