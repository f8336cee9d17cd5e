"""The statuses a simulated kubelet writes: ``ContainerCreating`` while it prepares a pod's claims, and
Running once they are prepared, as if its containers had started with the CDI devices.  Pure.

Why it looks complete (conditions, IPs, container statuses with IDs): ``kubectl get pods -o wide`` and
``kubectl describe pod`` read these fields, and tools that wait for ``Ready`` must see it.
"""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Mapping
from typing import Any

from migdra_devcluster.kubelet.node import now_rfc3339

POD_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")


def container_status(container: Mapping[str, Any]) -> dict[str, Any]:
    """The identity part of a container status (image, IDs, restarts)."""
    image = container.get("image") or ""
    return {
        "name": container.get("name", ""),
        "image": image,
        "imageID": f"{image}@sha256:{zlib.crc32(image.encode()):064x}",
        "containerID": f"containerd://{secrets.token_hex(32)}",
        "restartCount": 0,
    }


def running_status(pod: Mapping[str, Any], host_ip: str, pod_ip: str) -> dict[str, Any]:
    """``status`` of a started pod: init containers completed, containers running and ready."""
    spec, old = pod.get("spec") or {}, pod.get("status") or {}
    now = now_rfc3339()
    return {
        "phase": "Running",
        "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now} for kind in POD_CONDITIONS],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": old.get("startTime") or now,
        "qosClass": old.get("qosClass") or "BestEffort",
        "initContainerStatuses": [
            {
                **container_status(c),
                "ready": True,
                "started": False,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            }
            for c in spec.get("initContainers") or []
        ],
        "containerStatuses": [
            {**container_status(c), "ready": True, "started": True, "state": {"running": {"startedAt": now}}}
            for c in spec.get("containers") or []
        ],
    }


def creating_status(pod: Mapping[str, Any], host_ip: str) -> dict[str, Any]:
    """``status`` of a pod whose claims are being prepared: still Pending, every container waiting in
    ``ContainerCreating`` (what ``kubectl get pods`` shows while NodePrepareResources fails and is
    retried), ``PodReadyToStartContainers=False``."""
    spec, old = pod.get("spec") or {}, pod.get("status") or {}
    now = now_rfc3339()
    waiting = {"waiting": {"reason": "ContainerCreating"}}
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
    ]
    return {
        "phase": "Pending",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": old.get("startTime") or now,
        "qosClass": old.get("qosClass") or "BestEffort",
        "containerStatuses": [
            {
                "name": c.get("name", ""),
                "image": c.get("image") or "",
                "imageID": "",
                "restartCount": 0,
                "ready": False,
                "started": False,
                "state": waiting,
            }
            for c in spec.get("containers") or []
        ],
    }
