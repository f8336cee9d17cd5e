"""The schema of migdra's ``status.devices[]`` entries on a ResourceClaim, and the one merge its writers use.

Two components write one entry per allocated device (docs/claim-status.md), the node plugin in two
roles:

- the **reservation controller** (:mod:`dra_driver.controller`) writes *where* the device is -- the
  reservation keys below and the ``Reserved`` condition -- as soon as the claim is allocated;
- the **node plugin** (``kubeletplugin.prepare.reporter``) writes *what it became* -- the identity
  keys and the ``Ready`` condition -- once the MIG instance exists, and also the reservation keys it
  knows (the same values: both read them off the same device), so a cluster without the controller
  still shows the placement;
- the node plugin's **realizer** (realize before bind, docs/prepare.md) writes only its binding
  conditions ``<driver>/realized`` and ``<driver>/realization-failed`` (:func:`realizer_writer`),
  which the scheduler waits for before it binds the pod.  It is a writer of its own so that the
  plugin's unprepare and status reconciliation, which clear the plugin's part, leave them alone.

Why not server-side apply: ``data`` is a ``RawExtension``, which apply treats as one atomic value, so two
field managers applying different keys of it would take the whole object from each other.  Instead
every write is a read-modify-write of the ``status`` subresource with the ``resourceVersion`` read (a
concurrent write is a 409 and the writer reads again), and each writer changes only what it owns:

=====================  ==================================  ============================================
writer                 owns alone                          shares (same values)
=====================  ==================================  ============================================
controller             ``Reserved``; ``gpuMinor``,         ``schemaVersion``, ``node``, ``gpuUUID``,
                       ``memory``, ``multiprocessors``     ``profile``, ``placement``
plugin                 ``Ready``; ``migUUID``,             the same five
                       ``gpuInstanceID``,
                       ``computeInstanceID``,
                       ``adminAccess``
realizer               ``<driver>/realized``,              nothing (no data keys)
                       ``<driver>/realization-failed``
=====================  ==================================  ============================================

A shared key stays while either writer still holds it, as a field with two managers does under
server-side apply: the controller holds its keys while its ``Reserved`` condition stands, so the
plugin's unprepare removes the shared keys only from an entry without ``Reserved``.  Keys and
condition types of anyone else (another controller, an admin) are never touched, nor are entries of
other drivers or pools.  An entry is keyed by driver, pool, device *and* ``shareID``, as the API server
keys it: a share of a shared GPU instance (docs/prepare.md, "Shares") has an entry of its own carrying
its ``shareID``, and a write for one share never touches the entry of another key.
Consumers read ``schemaVersion`` first: keys are only ever added within one version.

Everything here is pure: it computes the new ``status.devices`` from the one read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.devicemodel.vocabulary import realize_before_bind_conditions

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

SHARED_KEYS: Final = ("schemaVersion", "node", "gpuUUID", "profile", "placement")
CONTROLLER_KEYS: Final = ("gpuMinor", "memory", "multiprocessors", "computeSlices")
IDENTITY_KEYS: Final = ("migUUID", "gpuInstanceID", "computeInstanceID", "adminAccess")


@dataclass(frozen=True, slots=True)
class Writer:
    """What one writer owns in an entry: keys alone, keys shared, its condition types, and the
    condition type by which its co-writer shows it still holds the shared keys."""

    name: str
    own_keys: tuple[str, ...]
    shared_keys: tuple[str, ...]
    conditions: tuple[str, ...]
    co_writer_marker: str

    @property
    def keys(self) -> tuple[str, ...]:
        return self.own_keys + self.shared_keys


PLUGIN: Final = Writer("kubeletplugin", IDENTITY_KEYS, SHARED_KEYS, (READY,), co_writer_marker=RESERVED)
CONTROLLER: Final = Writer("controller", CONTROLLER_KEYS, SHARED_KEYS, (RESERVED,), co_writer_marker=READY)


def rfc3339(moment: dt.datetime) -> str:
    """A condition's ``lastTransitionTime`` (and an Event's timestamps): UTC, whole seconds."""
    return moment.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def realizer_writer(driver_name: str) -> Writer:
    """The realizer of ``driver_name``: its two binding condition types, no data keys."""
    binding = realize_before_bind_conditions(driver_name)
    return Writer("realizer", (), (), binding.conditions + binding.failure_conditions, co_writer_marker=READY)


@dataclass(frozen=True, slots=True)
class EntryUpdate:
    """What one writer wants one device's entry to say: its data keys and conditions (each of its
    ``Writer.conditions`` types; a type not given is left as it is)."""

    device_name: str
    data: Mapping[str, Any]
    conditions: Sequence[Mapping[str, Any]]
    share_id: str | None = None  # the allocation result's shareID: the entry of that share


def is_ours(entry: Mapping[str, Any], driver: str, pool: str) -> bool:
    """An entry migdra writes: this driver, this pool (with or without a ``shareID``)."""
    return entry.get("driver") == driver and entry.get("pool") == pool


def entry_key(entry: Mapping[str, Any]) -> tuple[str, str | None]:
    """(device, shareID or None): what tells two entries of one driver and pool apart."""
    share = entry.get("shareID")
    return str(entry.get("device")), share if isinstance(share, str) else None


def find_entry(
    entries: Sequence[Mapping[str, Any]], driver: str, pool: str, device: str, share_id: str | None = None
) -> int | None:
    """The index of our entry of ``device`` and ``share_id`` (None: the entry without a shareID)."""
    for index, entry in enumerate(entries):
        if is_ours(entry, driver, pool) and entry_key(entry) == (device, share_id):
            return index
    return None


def condition_of(entry: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    for condition in entry.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return condition
    return None


def _merge_condition(conditions: list[dict[str, Any]], condition: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``conditions`` with ``condition`` in place of its type; ``lastTransitionTime`` kept while the
    status does not change (the Kubernetes condition convention)."""
    new = dict(condition)
    old = next((c for c in conditions if c.get("type") == new["type"]), None)
    if old is not None and old.get("status") == new.get("status") and old.get("lastTransitionTime"):
        new["lastTransitionTime"] = old["lastTransitionTime"]
    replaced = [new if c.get("type") == new["type"] else c for c in conditions]
    return replaced if old is not None else [*conditions, new]


def compute_merged_devices(
    existing: Sequence[Mapping[str, Any]],
    driver: str,
    pool: str,
    writer: Writer,
    updates: Sequence[EntryUpdate],
) -> list[dict[str, Any]]:
    """``status.devices`` with ``updates`` merged in for ``writer``; pure.

    In our entries only the writer's keys and condition types change; everything else -- the other
    writer's keys and conditions, anyone else's -- is kept as read.  A missing entry is added.
    """
    result = [dict(entry) for entry in existing]
    for update in updates:
        foreign = [key for key in update.data if key not in writer.keys]
        if foreign:
            raise ValueError(f"{writer.name} does not own data keys {foreign}")
        index = find_entry(result, driver, pool, update.device_name, update.share_id)
        if index is None:
            added: dict[str, Any] = {"driver": driver, "pool": pool, "device": update.device_name}
            if update.share_id is not None:
                added["shareID"] = update.share_id
            result.append(added)
            index = len(result) - 1
        entry = result[index]
        old_data = entry.get("data")
        if update.data or old_data is not None:  # a writer of conditions alone adds no empty data
            entry["data"] = {**(dict(old_data) if isinstance(old_data, Mapping) else {}), **update.data}
        conditions = [dict(c) for c in entry.get("conditions") or [] if isinstance(c, Mapping)]
        for condition in update.conditions:
            if condition.get("type") not in writer.conditions:
                raise ValueError(f"{writer.name} does not own condition {condition.get('type')!r}")
            conditions = _merge_condition(conditions, condition)
        entry["conditions"] = conditions
        if not entry["conditions"]:
            del entry["conditions"]
    return result


def compute_cleared_devices(
    existing: Sequence[Mapping[str, Any]],
    driver: str,
    pool: str,
    writer: Writer,
    device_names: Collection[str] | None = None,
    keys: Collection[tuple[str, str | None]] | None = None,
) -> list[dict[str, Any]]:
    """``status.devices`` without ``writer``'s keys and conditions in our entries of these devices
    (``None``: every device of this driver in this pool; ``keys``: only the entries of these (device,
    shareID) keys); pure.

    Shared keys stay in an entry where the co-writer's marker condition stands (it still holds them).
    An entry left with nothing but its identifying fields (driver, pool, device, shareID) goes.
    """
    result: list[dict[str, Any]] = []
    for entry in existing:
        if (
            not is_ours(entry, driver, pool)
            or (device_names is not None and entry.get("device") not in device_names)
            or (keys is not None and entry_key(entry) not in keys)
        ):
            result.append(dict(entry))
            continue
        co_written = condition_of(entry, writer.co_writer_marker) is not None
        dropped = set(writer.own_keys) | (set() if co_written else set(writer.shared_keys))
        data = entry.get("data")
        kept_data = {k: v for k, v in data.items() if k not in dropped} if isinstance(data, Mapping) else {}
        kept_conditions = [
            c
            for c in entry.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") not in writer.conditions
        ]
        others = {
            k: v for k, v in entry.items() if k not in {"driver", "pool", "device", "shareID", "data", "conditions"}
        }
        if not kept_data and not kept_conditions and not others:
            continue
        cleared = {k: v for k, v in entry.items() if k not in {"data", "conditions"}}
        if kept_data:
            cleared["data"] = kept_data
        if kept_conditions:
            cleared["conditions"] = kept_conditions
        result.append(cleared)
    return result
