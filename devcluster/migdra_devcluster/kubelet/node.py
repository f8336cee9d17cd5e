"""The Node object a simulated kubelet registers: labels, capacity, conditions, addresses.

Pure: the kubelet writes what these return.  Why a Node at all: the scheduler filters nodes by their
labels, taints and ``allocatable`` (extended resources a device plugin would provide), and users look
at ``kubectl get nodes -o wide``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

SIMULATED_SUFFIX = "-migdra-sim"
"""What a simulated kubelet appends to the API server's version, the one it reports as its own."""


def kubelet_version(server_version: str) -> str:
    """``v1.36.5-migdra-sim`` beside a v1.36.5 API server: a kubelet of the control plane's own release,
    marked simulated (as a prerelease it sorts just below the server's version: never newer)."""
    return f"{server_version or 'v0.0.0'}{SIMULATED_SUFFIX}"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_labels(node_name: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The well-known labels kubelet sets, then the caller's."""
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **extra,
    }


def ready_conditions() -> list[dict[str, str]]:
    """The conditions of a healthy node, their heartbeat now (what kubelet posts with its status)."""
    now = now_rfc3339()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


def node_status(node_name: str, capacity: Mapping[str, str], host_ip: str, version: str) -> dict[str, Any]:
    """A Ready node: capacity equals allocatable (nothing reserved for the system in a simulation);
    ``version`` is its kubelet's (:func:`kubelet_version`)."""
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": ready_conditions(),
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": node_name},
        ],
        "nodeInfo": {
            "kubeletVersion": version,
            "kubeProxyVersion": version,
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": "migdra simulated node",
            "kernelVersion": "6.8.0",
            "containerRuntimeVersion": "containerd://simulated",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }
