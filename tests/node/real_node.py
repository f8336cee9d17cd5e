"""What the tests of a real node share: the requirement (root and ``make node``), the node's processes and
files as ``migdra sim up`` lays them out, crictl against its containerd, and what a container printed.

Root and ``make node`` are needed: the tests skip without them, and fail under ``MIGDRA_REQUIRE_NODE=1``
(CI).  Every test of the tier runs in one pytest worker (``xdist_group``): two kubelets on one host
collide in ``/var/lib/kubelet/device-plugins``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.kube.client import CLAIMS, EVENTS
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from migdra_devcluster.realnode.host import (
    CGROUP_ROOT,
    HOST_PATHS,
    SYSCTLS,
    mounts_under,
    network_namespaces,
    sysctl_path,
)
from migdra_devcluster.realnode.images import TEST_IMAGE
from migdra_devcluster.realnode.node import NODE_TOOLS_DIR, REAL_NODE_DIR, real_node_problem
from migdra_devcluster.upstream.binaries import TOOLS_DIR, built_versions
from tests.kubelet_client import short_socket_dir
from tests.sim_cluster import SimCluster, start_cluster, stop_cluster
from tests.waiting import wait_for

REAL = "node-1"
"""The node each test cluster runs as a real node."""
DRIVER = "gpu.migdra.io"
POD_TIMEOUT = 180.0
"""Seconds a pod on the real node may take to run: the kubelet's pod workers, the sandbox and the
prepare call on two busy CPUs (7.5 s idle from nothing)."""


def kubelet_version() -> str | None:
    """The oldest built Kubernetes version whose kubelet `make node` built (the node runs that control plane)."""
    return next((v for v in built_versions() if (TOOLS_DIR / v / "bin" / "kubelet").is_file()), None)


def require_real_node() -> str:
    """The version to run, or skip (fail under ``MIGDRA_REQUIRE_NODE=1``) saying what is missing."""
    problem = real_node_problem()
    version = kubelet_version()
    if problem is None and version is None:
        problem = f"no kubelet built in {TOOLS_DIR}; run `make node`"
    if problem is not None:
        if os.environ.get("MIGDRA_REQUIRE_NODE") == "1":
            pytest.fail(f"MIGDRA_REQUIRE_NODE=1 but {problem}")
        pytest.skip(problem)
    assert version is not None
    return version


def node_dir(sim: SimCluster, node: str = REAL) -> Path:
    return sim.workdir / "nodes" / node / REAL_NODE_DIR


def host_state(workdir: Path) -> dict[str, Any]:
    """What a real node may change on the host, to compare before and after."""
    return {
        "sysctls": {name: sysctl_path(name).read_text().strip() for name in SYSCTLS},
        "paths": {str(path): path.exists() for path in HOST_PATHS},
        "bridges": sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("migdra")),
        "cgroups": sorted(str(p) for p in CGROUP_ROOT.glob("*/migdra-*")),
        "mounts": mounts_under(workdir),
        "netns": network_namespaces(),
        "veths": sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("veth")),
    }


def crictl(sim: SimCluster, *args: str) -> str:
    """crictl against the real node's containerd, as an operator on the node runs it."""
    socket = node_dir(sim) / "containerd" / "containerd.sock"
    endpoint = f"unix://{socket}"
    done = subprocess.run(
        [str(NODE_TOOLS_DIR / "crictl"), "--runtime-endpoint", endpoint, "--image-endpoint", endpoint, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"crictl {' '.join(args)}: {done.stderr}"
    return done.stdout


def container_id(sim: SimCluster, pod: str) -> str | None:
    """The running container of ``pod`` (pod names are unique across the tests' namespaces)."""
    ids = crictl(sim, "ps", "--pod", pod_sandbox_id(sim, pod) or "-", "--state", "Running", "--quiet").split()
    return ids[0] if len(ids) == 1 else None


def pod_sandbox_id(sim: SimCluster, pod: str) -> str | None:
    ids = crictl(sim, "pods", "--name", f"^{pod}$", "--state", "Ready", "--quiet").split()
    return ids[0] if len(ids) == 1 else None


HOST_BEFORE: dict[Path, dict[str, Any]] = {}
"""The host's state before each running :func:`real_cluster` started, by its workdir."""


@contextmanager
def real_cluster(*args: str) -> Iterator[SimCluster]:
    """``migdra sim up --real-node node-1`` with ``args``, stopped by ``sim down`` after; the host must then
    be as it was before (sysctls, paths, bridges, cgroups, mounts)."""
    version = require_real_node()
    with short_socket_dir() as root:
        before = host_state(root)
        sim = start_cluster(root / "sim", *args, "--real-node", REAL, version=version)
        HOST_BEFORE[sim.workdir] = before
        try:
            yield sim
        finally:
            stop_cluster(sim)
        assert host_state(root) == before, "sim down left the host changed"


def mig_claim(name: str, env: Mapping[str, str] | None = None) -> str:
    """A ResourceClaim (a YAML document of its own) for one 1g.10gb MIG device, with ``env`` as the
    opaque ``MigDeviceConfig`` of the claim when given."""
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "mig",
                "exactly": {
                    "deviceClassName": "mig.migdra.io",
                    "selectors": [{"cel": {"expression": "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"}}],
                },
            }
        ]
    }
    if env is not None:
        parameters = {"apiVersion": "gpu.migdra.io/v1alpha1", "kind": "MigDeviceConfig", "env": dict(env)}
        devices["config"] = [{"opaque": {"driver": DRIVER, "parameters": parameters}}]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}}
    return "\n---\n" + yaml.safe_dump({**claim, "spec": {"devices": devices}}, sort_keys=False)


POD = """
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  tolerations: [{{key: migdra.io/real-node, operator: Exists}}]
  terminationGracePeriodSeconds: 1
  resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]
  containers:
  - name: c
    image: {image}
    imagePullPolicy: Never
    command: ["sh", "-c", {command}]
    resources: {{claims: [{{name: gpu}}]}}
"""


def pod_manifest(name: str, claim: str, node: str = REAL) -> str:
    """A pod on ``node`` whose container prints :data:`REPORT` and sleeps, holding ``claim``."""
    return POD.format(name=name, claim=claim, node=node, image=TEST_IMAGE, command=json.dumps(REPORT))


def wait_pods_running(sim: SimCluster, namespace: str, names: set[str]) -> dict[str, dict[str, Any]]:
    """Until every pod of ``names`` runs; a timeout shows ``kubectl describe pods`` and the kubelet's log."""

    def detail() -> str:
        described = sim.kubectl("describe", "pods", "-n", namespace, check=False).stdout[-6000:]
        return f"{described}\nkubelet:\n{kubelet_log(sim)[-3000:]}"

    return wait_for(
        f"pods {sorted(names)} to run on the real node",
        lambda: sim.running(namespace, names),
        timeout=POD_TIMEOUT,
        detail=detail,
    )


END_OF_REPORT = "== end of report =="


def container_report(sim: SimCluster, pod: str) -> str:
    """What the pod's container printed of itself (the commands of :data:`REPORT`), read by crictl."""

    def complete() -> str | None:
        found = container_id(sim, pod)
        if found is None:
            return None
        logs = crictl(sim, "logs", found)
        return logs if END_OF_REPORT in logs else None

    return wait_for(f"the report of the container of {pod}", complete, timeout=60)


REPORT = (
    "echo == env; env; echo == dev; ls -ln /dev /dev/nvidia-caps; echo == driver; "
    "ls -ln /usr/lib/x86_64-linux-gnu /usr/bin; cat /usr/lib/x86_64-linux-gnu/libcuda.so.1 "
    "/etc/ld.so.conf.d/00-migdra-cdi.conf; echo == metadata; find /var/run/kubernetes.io -type f -exec cat {} +; "
    f"echo '{END_OF_REPORT}'; exec sleep 3600"
)
"""The container's command: print what it sees of its devices, then sleep until deleted."""


def report_env(report: str) -> dict[str, str]:
    section = report.split("== env\n", 1)[1].split("== dev\n", 1)[0]
    return dict(line.split("=", 1) for line in section.splitlines() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", line))


def char_devices(report: str) -> dict[str, tuple[int, int]]:
    """``ls -ln`` lines of character devices: name -> (major, minor)."""
    found = re.findall(r"^c\S+\s+\d+\s+\d+\s+\d+\s+(\d+),\s+(\d+)\s.*?(\S+)$", report, re.MULTILINE)
    return {name: (int(major), int(minor)) for major, minor, name in found}


def plugin_log(sim: SimCluster, node: str = REAL) -> str:
    return (sim.workdir / "nodes" / node / "plugin.log").read_text(errors="replace")


def kubelet_log(sim: SimCluster) -> str:
    return (node_dir(sim) / "kubelet.log").read_text(errors="replace")


def gi_placements(sim: SimCluster, node: str = REAL) -> set[tuple[str, int, int, int, str]]:
    """(GPU UUID, GPU instance ID, start, size, its compute instances' MIG UUIDs) of every GPU instance of
    ``node``, read through its simulated NVML as its plugin reads it: what a restart must neither create
    twice nor destroy."""

    state = sim.workdir / "nodes" / node / "nvml-state.json"
    with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
        return {
            (gpu.uuid, gi.gpu_instance_id, gi.placement.start, gi.placement.size, ci_uuids(gi.compute_instances))
            for gpu in nvml.list_gpus()
            for gi in nvml.gpu_instances(gpu.uuid)
        }


def claim_entries(sim: SimCluster, namespace: str, claim: str) -> list[dict[str, Any]]:

    found = sim.client.get(CLAIMS, namespace, claim) or {}
    return [e for e in (found.get("status") or {}).get("devices") or [] if e["driver"] == DRIVER]


def pod_events(sim: SimCluster, namespace: str, pod: str) -> list[dict[str, Any]]:

    events = sim.client.list(EVENTS, namespace)[0]
    return [e for e in events if e.get("involvedObject", {}).get("name") == pod]


def ci_uuids(compute_instances: tuple[Any, ...]) -> str:
    return ",".join(sorted(ci.mig_uuid for ci in compute_instances))
