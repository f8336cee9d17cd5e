"""The schema of migdra's ``status.devices[]`` entries on a ResourceClaim, who owns which field of them,
and the server-side apply bodies its writers send.

Three writers keep an entry per allocated device (docs/claim-status.md), each a field manager of its
own that applies, through the ``status`` subresource, only its own entries and fields -- never
``status.allocation`` or ``reservedFor``, so nothing depends on the API server re-reading bytes it sent
(an allocation's opaque parameters are a ``RawExtension``: sent back re-serialized, they differ and the
server refuses an allocation change):

=====================  ===================================  ============================================
writer                 field manager                        owns in each entry it writes
=====================  ===================================  ============================================
controller             ``<driver>/controller``              ``Reserved``; ``data`` while no other
                                                            manager holds it (the reservation keys)
plugin (one per node)  ``<driver>/kubeletplugin/<node>``    ``Ready``; ``data`` (applied with force: the
                                                            reservation keys and the identity keys)
realizer (per node)    ``<driver>/realizer/<node>``         ``<driver>/realized``,
                                                            ``<driver>/realization-failed``
=====================  ===================================  ============================================

Why ``data`` changes hands: it is a ``RawExtension``, which server-side apply owns as one atomic value
(two managers applying different keys of it conflict).  So one writer holds it at a time.  The
controller writes the reservation keys as soon as the claim is allocated; once the instance exists the
plugin takes ``data`` over with a forced apply, writing the reservation keys it knows itself plus the
identity (``migUUID``...), and the controller, finding ``data`` held by another manager in the claim's
``managedFields`` (or told so by a 409 naming ``data``), applies its condition alone.  The plugin's
unprepare applies without the entry, which gives ``data`` up: the API server removes it, and the
controller's next pass writes the reservation keys again while ``Reserved`` stands.  Conditions are a
map list keyed by ``type``, so each writer owns its own types and none of them can conflict.  An entry
is keyed by driver, pool, device and ``shareID``, as the API server keys it: it stays while any manager
holds a field of it, and goes with the last.  Entries and fields of anyone else are never sent, so
never touched.  Consumers read ``schemaVersion`` first: keys are only ever added within one version.

Everything here is pure: bodies and answers computed from what a writer read.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dra_driver.resourceclaim import AllocatedDeviceStatus, ConditionView, EntryKey, ResourceClaimView

SCHEMA_VERSION: Final = "v1"
"""``data.schemaVersion`` of every entry migdra writes (docs/claim-status.md)."""

READY: Final = "Ready"
"""The plugin's condition: the MIG instance (or whole GPU) exists for kubelet (created by its prepare,
or realized before the pod was bound)."""
RESERVED: Final = "Reserved"
"""The controller's condition: the claim holds exactly this placement (False: a conflict or a gone device)."""

REASON_ALLOCATED: Final = "Allocated"
REASON_PLACEMENT_CONFLICT: Final = "PlacementConflict"
REASON_DEVICE_GONE: Final = "DeviceGone"

EVENT_STATUS_WRITE_REFUSED: Final = "ClaimStatusRefused"
"""The Warning Event's reason when the API server refuses a writer's status for a reason retrying cannot
fix (422, 403, 400): the message names the claim, the writer and the server's reason."""

_FIELD_MANAGER_MAX = 128  # the API server's limit on ``fieldManager``


def rfc3339(moment: dt.datetime) -> str:
    """A condition's ``lastTransitionTime`` (and an Event's timestamps): UTC, whole seconds."""
    return moment.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_memory(memory_bytes: int) -> str:
    """``data.memory``: whole MiB as ``40448Mi``, anything else in bytes (both writers write it alike)."""
    mib, rest = divmod(memory_bytes, 1 << 20)
    return f"{mib}Mi" if rest == 0 else str(memory_bytes)


# -- who writes --------------------------------------------------------------------------------------


def _manager(name: str) -> str:
    """``name`` as a field manager: longer than the API server allows, its end becomes a digest."""
    if len(name) <= _FIELD_MANAGER_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: _FIELD_MANAGER_MAX - 17]}-{digest}"


def controller_field_manager(driver: str) -> str:
    """The reservation controller's field manager (every replica the same: one owner, whoever leads)."""
    return _manager(f"{driver}/controller")


def plugin_field_manager(driver: str, node: str) -> str:
    """One node's plugin: its own manager, so one node's apply never gives up another node's entries
    (a claim deallocated on one node and allocated on another may hold both for a moment)."""
    return _manager(f"{driver}/kubeletplugin/{node}")


def realizer_field_manager(driver: str, node: str) -> str:
    """One node's realizer (realize before bind): its binding conditions only."""
    return _manager(f"{driver}/realizer/{node}")


# -- entries -----------------------------------------------------------------------------------------


def entry_key(entry: Mapping[str, Any]) -> EntryKey:
    """The key of an entry as JSON (a ``managedFields`` map-list key): see :data:`EntryKey`."""
    share = entry.get("shareID")
    return (
        str(entry.get("driver", "")),
        str(entry.get("pool", "")),
        str(entry.get("device", "")),
        share if isinstance(share, str) and share else None,
    )


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """What one writer applies to one device's entry: its conditions, and ``data`` when it writes it
    (None: it leaves ``data`` to whoever holds it)."""

    pool: str
    device: str
    conditions: tuple[Mapping[str, Any], ...]
    data: Mapping[str, Any] | None = None
    share_id: str | None = None

    def key(self, driver: str) -> EntryKey:
        return (driver, self.pool, self.device, self.share_id)


def keep_transition_time(existing: AllocatedDeviceStatus | None, condition: Mapping[str, Any]) -> dict[str, Any]:
    """``condition`` with the ``lastTransitionTime`` of the same type in ``existing`` (an entry) while its
    status does not change: the Kubernetes condition convention."""
    new = dict(condition)
    old = existing.condition(str(new["type"])) if existing is not None else None
    if old is not None and old.status == new.get("status") and old.last_transition_time:
        new["lastTransitionTime"] = old.last_transition_time
    return new


def build_apply_body(
    namespace: str, name: str, uid: str, driver: str, entries: Iterable[DeviceEntry]
) -> dict[str, Any]:
    """The server-side apply body of one writer for one claim: everything it wants to hold, nothing else.

    The ``uid`` makes the API server refuse the body (422, ``metadata.uid``) when the name now belongs
    to a re-created claim.  No entries gives every entry this manager holds up.
    """
    devices: list[dict[str, Any]] = []
    for entry in entries:
        body: dict[str, Any] = {"driver": driver, "pool": entry.pool, "device": entry.device}
        if entry.share_id is not None:
            body["shareID"] = entry.share_id
        if entry.conditions:
            body["conditions"] = [dict(condition) for condition in entry.conditions]
        if entry.data is not None:
            body["data"] = dict(entry.data)
        devices.append(body)
    status: dict[str, Any] = {"devices": devices} if devices else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": status,
    }


# -- what a claim's managedFields say ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holding:
    """What one manager holds of one entry: its condition types, and whether it holds ``data``."""

    conditions: frozenset[str] = field(default_factory=frozenset)
    data: bool = False


def _status_entries(fields: Any) -> Mapping[str, Any]:
    status = fields.get("f:status") if isinstance(fields, Mapping) else None
    devices = status.get("f:devices") if isinstance(status, Mapping) else None
    return devices if isinstance(devices, Mapping) else {}


def _parse_key(token: str) -> EntryKey | None:
    """``k:{"device":...,"driver":...,"pool":...}`` of a managedFields map-list item, as an entry key."""
    if not token.startswith("k:"):
        return None
    try:
        key = json.loads(token[2:])
    except ValueError:
        return None
    return entry_key(key) if isinstance(key, Mapping) else None


def _condition_types(fields: Mapping[str, Any]) -> frozenset[str]:
    conditions = fields.get("f:conditions")
    types: set[str] = set()
    for token in conditions if isinstance(conditions, Mapping) else ():
        if token.startswith("k:"):
            try:
                key = json.loads(token[2:])
            except ValueError:
                continue
            if isinstance(key, Mapping) and isinstance(key.get("type"), str):
                types.add(key["type"])
    return frozenset(types)


def compute_holdings(claim: ResourceClaimView) -> dict[str, dict[EntryKey, Holding]]:
    """Per field manager, what it holds of each ``status.devices`` entry, from ``metadata.managedFields``;
    pure.  Managers of any operation count (an ``Update`` holds what it last wrote, as for apply)."""
    holdings: dict[str, dict[EntryKey, Holding]] = {}
    for managed in claim.metadata.managed_fields:
        manager = managed.manager
        for token, fields in _status_entries(managed.fields_v1).items():
            key = _parse_key(token)
            if key is None or not isinstance(fields, Mapping):
                continue
            old = holdings.setdefault(manager, {}).get(key, Holding())
            holdings[manager][key] = Holding(old.conditions | _condition_types(fields), old.data or "f:data" in fields)
    return holdings


def data_held_by_others(holdings: Mapping[str, Mapping[EntryKey, Holding]], manager: str, key: EntryKey) -> bool:
    """Whether a manager other than ``manager`` holds ``data`` of the entry ``key``."""
    return any(held.get(key, Holding()).data for other, held in holdings.items() if other != manager)


def _same_condition(old: ConditionView | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return False
    return (old.status, old.reason, old.message, old.observed_generation, old.last_transition_time) == (
        new.get("status"),
        new.get("reason", ""),
        new.get("message", ""),
        new.get("observedGeneration"),
        new.get("lastTransitionTime"),
    )


def is_applied(
    claim: ResourceClaimView,
    manager: str,
    driver: str,
    entries: Sequence[DeviceEntry],
    holdings: Mapping[str, Mapping[EntryKey, Holding]] | None = None,
) -> bool:
    """Whether ``claim`` already says what ``manager`` would apply (``entries``, nothing more of its own):
    then the write is skipped; pure.  ``holdings``: :func:`compute_holdings` of ``claim``, when the caller
    has them already."""
    held_by = compute_holdings(claim) if holdings is None else holdings
    holdings_of_manager = held_by.get(manager, {})
    wanted = {entry.key(driver): entry for entry in entries}
    if set(holdings_of_manager) != set(wanted):
        return False
    for key, entry in wanted.items():
        current = claim.status_entry(*key)
        if current is None:
            return False
        held = holdings_of_manager[key]
        if held.conditions != {str(c["type"]) for c in entry.conditions}:
            return False
        if not all(_same_condition(current.condition(str(c["type"])), c) for c in entry.conditions):
            return False
        if (entry.data is not None) != held.data or (entry.data is not None and current.data != entry.data):
            return False
    return True


# -- the answer to an apply ----------------------------------------------------------------------------


def is_uid_mismatch(status: Mapping[str, Any]) -> bool:
    """A 422 whose cause is ``metadata.uid``: the claim of that name was re-created with another UID."""
    causes = (status.get("details") or {}).get("causes") or []
    return any(isinstance(c, Mapping) and c.get("field") == "metadata.uid" for c in causes)
