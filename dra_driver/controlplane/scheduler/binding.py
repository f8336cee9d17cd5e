"""Binding conditions (DRADeviceBindingConditions): may the scheduler bind the pod yet?

After allocating devices that carry ``bindingConditions``, kube-scheduler waits in PreBind until
every one of them is ``True`` in the claim's ``status.devices[].conditions``; any
``bindingFailureConditions`` entry that is ``True`` means the binding failed and the claim is
deallocated so the pod can be scheduled anew (structured-allocator.md section 9).  Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

JSON = Mapping[str, Any]


class Binding(enum.Enum):
    READY = "ready"
    WAITING = "waiting"
    FAILED = "failed"


def binding_state(claims: Iterable[JSON]) -> tuple[Binding, str]:
    """READY when no allocated device waits for a condition; FAILED with the failure's message."""
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
                    message = condition.get("message") or condition.get("reason") or failure
                    return Binding.FAILED, f"device {result.get('device')}: {failure}: {message}"
            for condition_type in wanted:
                condition = conditions.get(condition_type)
                if condition is None or condition.get("status") != "True":
                    waiting.append(f"{result.get('device')}: {condition_type}")
    if waiting:
        return Binding.WAITING, "waiting for binding conditions: " + ", ".join(waiting)
    return Binding.READY, ""
