"""Binding conditions (DRADeviceBindingConditions): may the scheduler bind the pod yet?

After allocating devices that carry ``bindingConditions``, kube-scheduler waits in PreBind until
every one of them is ``True`` in the claim's ``status.devices[].conditions``; any
``bindingFailureConditions`` entry that is ``True`` means the binding failed and the claim is
deallocated so the pod can be scheduled anew.  The messages are kube-scheduler's own
(``pkg/scheduler/framework/plugins/dynamicresources``: ``device binding failed: claim=…, reason=…,
message="…"``), so a FailedScheduling Event reads the same on both control planes.  Pure.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any

JSON = Mapping[str, Any]


class Binding(enum.Enum):
    READY = "ready"
    WAITING = "waiting"
    FAILED = "failed"


def binding_state(claims: Iterable[JSON]) -> tuple[Binding, str]:
    """READY when no allocated device waits for a condition; FAILED with the failure's message; WAITING
    with the name of the first claim still waiting (what a timeout names)."""
    waiting: list[str] = []
    for claim in claims:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = {(d.get("driver"), d.get("pool"), d.get("device")): d for d in status.get("devices") or []}
        for result in results:
            wanted = result.get("bindingConditions") or []
            failures = result.get("bindingFailureConditions") or []
            if not wanted and not failures:
                continue
            entry = devices.get((result.get("driver"), result.get("pool"), result.get("device"))) or {}
            conditions = {c.get("type"): c for c in entry.get("conditions") or []}
            for failure in failures:
                condition = conditions.get(failure)
                if condition is not None and condition.get("status") == "True":
                    name = (claim.get("metadata") or {}).get("name")
                    reason, message = condition.get("reason") or "", condition.get("message") or ""
                    # Go's %q: a double-quoted string, non-ASCII printable characters kept as they are
                    quoted = json.dumps(message, ensure_ascii=False)
                    return Binding.FAILED, f"device binding failed: claim={name}, reason={reason}, message={quoted}"
            for condition_type in wanted:
                condition = conditions.get(condition_type)
                if condition is None or condition.get("status") != "True":
                    waiting.append(str((claim.get("metadata") or {}).get("name")))
    if waiting:
        return Binding.WAITING, waiting[0]
    return Binding.READY, ""
