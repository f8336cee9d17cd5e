"""Server-side printing: the ``meta.k8s.io/v1 Table`` that ``kubectl get`` asks for.

kubectl prints whatever columns the server sends; we send NAME and AGE (like kube-apiserver does for
kinds without printer columns) and the whole object in each row, so ``-o wide``/``--show-labels`` and
``-A`` work from it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dra_driver.controlplane.apiserver.registry import ResourceType


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
    """A Table of ``items`` with NAME and AGE columns."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name of the object", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "Time since creation", "priority": 0},
        ],
        "rows": [
            {
                "cells": [obj["metadata"]["name"], human_age(obj["metadata"].get("creationTimestamp"))],
                "object": obj,
            }
            for obj in items
        ],
    }
