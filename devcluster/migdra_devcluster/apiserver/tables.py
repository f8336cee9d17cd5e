"""Server-side printing: the ``meta.k8s.io/v1 Table`` that ``kubectl get`` asks for.

kubectl prints whatever columns the server sends.  We send NAME, the kind's columns from
:data:`COLUMNS` (the ones kube-apiserver's printers show, where they can be read off the object) and
AGE, then the ``-o wide`` columns (priority 1, which kubectl hides otherwise), with the whole object in
each row so ``--show-labels`` and ``-A`` work from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from migdra_devcluster.apiserver.registry import ResourceType, field_value

Column = tuple[str, Callable[[Mapping[str, Any]], str]]


def _path(path: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda obj: field_value(obj, path)


def _count(path: str) -> Callable[[Mapping[str, Any]], str]:
    def read(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return str(len(value or ()))

    return read


def _claim_state(obj: Mapping[str, Any]) -> str:
    """kube's ResourceClaim STATE: pending / allocated[,reserved] / deleted."""
    status = obj.get("status") or {}
    states = ["allocated" if status.get("allocation") else "pending"]
    if status.get("reservedFor"):
        states.append("reserved")
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        states.append("deleted")
    return ",".join(states)


def _pod_ready(obj: Mapping[str, Any]) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(containers)}"


def _pod_restarts(obj: Mapping[str, Any]) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    return str(sum(int(s.get("restartCount") or 0) for s in statuses))


def _pod_status(obj: Mapping[str, Any]) -> str:
    """kube's pod STATUS: the phase or the status reason, overridden by a container's waiting or
    terminated reason (``ContainerCreating``, ``CrashLoopBackOff``, ``Completed``), and ``Terminating``
    once deletion started."""
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _or_none(path: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda obj: field_value(obj, path) or "<none>"


def _node_status(obj: Mapping[str, Any]) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    return status + (",SchedulingDisabled" if (obj.get("spec") or {}).get("unschedulable") else "")


# Registry key -> columns between NAME and AGE (kube's printers for these kinds).
COLUMNS: Mapping[str, tuple[Column, ...]] = {
    "namespaces": (("Status", _path("status.phase")),),
    "nodes": (("Status", _node_status), ("Version", _path("status.nodeInfo.kubeletVersion"))),
    "pods": (("Ready", _pod_ready), ("Status", _pod_status), ("Restarts", _pod_restarts)),
    "events": (("Type", _path("type")), ("Reason", _path("reason")), ("Message", _path("message"))),
    "configmaps": (("Data", _count("data")),),
    "secrets": (("Type", _path("type")), ("Data", _count("data"))),
    "leases.coordination.k8s.io": (("Holder", _path("spec.holderIdentity")),),
    "resourceslices.resource.k8s.io": (
        ("Node", _path("spec.nodeName")),
        ("Driver", _path("spec.driver")),
        ("Pool", _path("spec.pool.name")),
    ),
    "resourceclaims.resource.k8s.io": (("State", _claim_state),),
}


# Registry key -> columns after AGE that only ``-o wide`` shows (priority 1 in kube's printers).
WIDE_COLUMNS: Mapping[str, tuple[Column, ...]] = {
    "pods": (
        ("IP", _or_none("status.podIP")),
        ("Node", _or_none("spec.nodeName")),
        ("Nominated Node", _or_none("status.nominatedNodeName")),
        ("Readiness Gates", lambda obj: "<none>"),
    ),
    "nodes": (("Internal-IP", lambda obj: _address(obj, "InternalIP")),),
}


def _address(obj: Mapping[str, Any], kind: str) -> str:
    addresses = (obj.get("status") or {}).get("addresses") or []
    return next((str(a.get("address")) for a in addresses if a.get("type") == kind), "<none>")


def wants_table(accept: str) -> bool:
    """Whether ``Accept`` prefers a Table (kubectl's human-readable output does)."""
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def human_age(timestamp: str | None, now: datetime | None = None) -> str:
    """kube's ``HumanDuration`` in short form: ``42s``, ``5m12s``, ``3h4m``, ``2d5h``, ``<unknown>``."""
    if not timestamp:
        return "<unknown>"
    try:
        created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    seconds = max(int(((now or datetime.now(UTC)) - created).total_seconds()), 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def to_table(resource: ResourceType, items: list[dict[str, Any]], list_metadata: dict[str, Any]) -> dict[str, Any]:
    """A Table of ``items``: NAME, the kind's columns, AGE."""
    columns = COLUMNS.get(resource.key, ())
    wide = WIDE_COLUMNS.get(resource.key, ())
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name of the object", "priority": 0},
        *({"name": name, "type": "string", "format": "", "description": name, "priority": 0} for name, _ in columns),
        {"name": "Age", "type": "string", "format": "", "description": "Time since creation", "priority": 0},
        *({"name": name, "type": "string", "format": "", "description": name, "priority": 1} for name, _ in wide),
    ]
    rows = [
        {
            "cells": [
                obj["metadata"]["name"],
                *(read(obj) for _, read in columns),
                human_age(obj["metadata"].get("creationTimestamp")),
                *(read(obj) for _, read in wide),
            ],
            "object": obj,
        }
        for obj in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
