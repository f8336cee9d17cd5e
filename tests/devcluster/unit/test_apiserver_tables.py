"""Server-side printing of pods: the STATUS column as kube's printer derives it."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.apiserver.registry import Registry
from migdra_devcluster.apiserver.tables import to_table


def _status_cell(pod: dict[str, Any]) -> str:
    pods = Registry().lookup("", "v1", "pods")
    assert pods is not None
    table = to_table(pods, [pod], {})
    names = [c["name"] for c in table["columnDefinitions"]]
    return str(table["rows"][0]["cells"][names.index("Status")])


def _pod(status: dict[str, Any], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "c"}]}, "status": status}


@pytest.mark.parametrize(
    ("status", "deleting", "shown"),
    [
        ({"phase": "Pending"}, False, "Pending"),
        (
            {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]},
            False,
            "ContainerCreating",
        ),
        ({"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}, False, "Running"),
        (
            {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}]},
            False,
            "Completed",
        ),
        ({"phase": "Failed", "reason": "Evicted"}, False, "Evicted"),
        ({"phase": "Running"}, True, "Terminating"),
        ({"phase": "Running", "reason": "NodeLost"}, True, "Unknown"),
    ],
)
def test_pod_status_column(status: dict[str, Any], deleting: bool, shown: str) -> None:
    assert _status_cell(_pod(status, deleting)) == shown
