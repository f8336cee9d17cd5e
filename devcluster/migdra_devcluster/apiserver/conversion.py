"""Resources that share storage with another resource, and how their objects convert.

kube-apiserver stores ``events.k8s.io/v1`` Events and core ``v1`` Events as one resource: an Event
written through either API is read through both (``kubectl describe`` reads core Events, recorders
write ``events.k8s.io``).  The store holds the storage form (the core Event); a resource whose registry
entry names ``storage`` converts on the way in and out, field by field as kube's
``pkg/apis/events/v1`` conversion does.  Everything else is stored as served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migdra_devcluster.apiserver.registry import ResourceType

# events.k8s.io/v1 field -> core/v1 field; fields not listed have the same name in both.
_EVENTS_V1_TO_CORE: Mapping[str, str] = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_CORE_TO_EVENTS_V1 = {core: v1 for v1, core in _EVENTS_V1_TO_CORE.items()}

# (served apiVersion, kind) -> (renames into storage, apiVersion and kind stored)
_CONVERSIONS: Mapping[tuple[str, str], tuple[Mapping[str, str], Mapping[str, str], str, str]] = {
    ("events.k8s.io/v1", "Event"): (_EVENTS_V1_TO_CORE, _CORE_TO_EVENTS_V1, "v1", "Event"),
}


def _rename(obj: Mapping[str, Any], renames: Mapping[str, str], api_version: str, kind: str) -> dict[str, Any]:
    converted = {renames.get(key, key): value for key, value in obj.items()}
    converted["apiVersion"] = api_version
    converted["kind"] = kind
    return converted


def to_storage(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The stored form of a served object (identity for resources with their own storage)."""
    conversion = _CONVERSIONS.get((resource.group_version, resource.kind))
    if resource.storage is None or conversion is None:
        return obj
    into, _, api_version, kind = conversion
    return _rename(obj, into, api_version, kind)


def from_storage(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The served form of a stored object (identity for resources with their own storage)."""
    conversion = _CONVERSIONS.get((resource.group_version, resource.kind))
    if resource.storage is None or conversion is None:
        return obj
    _, out_of, _, _ = conversion
    return _rename(obj, out_of, resource.group_version, resource.kind)
