"""Device taints and request tolerations (DRADeviceTaints), as ``resourceclaim.ToleratesTaint``.

Only ``NoSchedule`` and ``NoExecute`` keep a device from being allocated; ``None`` and effects this
version does not know are ignored, so a newer driver cannot make old schedulers refuse devices.
``tolerationSeconds`` matters only for eviction, never for scheduling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def taint_prevents_allocation(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some blocking taint of the device is tolerated by none of the request's tolerations."""
    for taint in taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return True
    return False
