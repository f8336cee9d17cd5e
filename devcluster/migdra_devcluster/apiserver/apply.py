"""Server-side apply of a ResourceClaim's ``status.devices``: the one apply the local API server serves.

migdra's claim status writers (docs/claim-status.md) apply their own entries of ``status.devices`` as
field managers of their own; kube-apiserver merges the body with what other managers own, answers 409
when a field another manager holds would change (unless ``force``), and removes what a manager held and
no longer applies when nobody else holds it.  This module does exactly that for the fields those
writers send -- entries keyed by driver, pool, device and shareID; their ``conditions`` keyed by type;
their ``data`` as one atomic value -- and records ownership in ``metadata.managedFields`` in
kube-apiserver's own ``FieldsV1`` form, which the writers read.  Every other apply is refused (415).

It bridges the local control plane until the upstream one replaces it; the real kube-apiserver is its
judge (``tests/kube/test_apiserver_differential.py`` sends both the same applies).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import EntryKey
from dra_driver.claimstatus import entry_key as _key
from migdra_devcluster.apiserver.errors import BadRequest, Conflict, Invalid

_KEY_FIELDS = ("device", "driver", "pool", "shareID")
_CONDITION_FIELDS = ("lastTransitionTime", "message", "observedGeneration", "reason", "status", "type")


@dataclass
class _Held:
    conditions: set[str] = field(default_factory=set)
    data: bool = False


def _key_token(key: EntryKey) -> str:
    fields = {"device": key[2], "driver": key[0], "pool": key[1]}
    if key[3] is not None:
        fields["shareID"] = key[3]
    return "k:" + json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _path(key: EntryKey) -> str:
    """How kube-apiserver names an entry in a conflict: ``.status.devices[device="d",driver="x",pool="p"]``."""
    fields = [f'device="{key[2]}"', f'driver="{key[0]}"', f'pool="{key[1]}"']
    if key[3] is not None:
        fields.append(f'shareID="{key[3]}"')
    return f".status.devices[{','.join(fields)}]"


def _fields_v1(held: Mapping[EntryKey, _Held]) -> dict[str, Any]:
    devices: dict[str, Any] = {}
    for key, entry in held.items():
        fields: dict[str, Any] = {".": {}, **{f"f:{name}": {} for name in _KEY_FIELDS if name != "shareID"}}
        if key[3] is not None:
            fields["f:shareID"] = {}
        if entry.conditions:
            fields["f:conditions"] = {
                "k:" + json.dumps({"type": t}, separators=(",", ":")): {
                    ".": {},
                    **{f"f:{name}": {} for name in _CONDITION_FIELDS if name != "observedGeneration"},
                }
                for t in sorted(entry.conditions)
            }
        if entry.data:
            fields["f:data"] = {}
        devices[_key_token(key)] = fields
    return {"f:status": {"f:devices": devices}} if devices else {"f:status": {}}


def _condition(entry: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    for condition in entry.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return condition
    return None


def apply_claim_status(old: Mapping[str, Any], body: Any, manager: str, force: bool, now: str) -> dict[str, Any]:
    """The claim after ``manager`` applied ``body`` (its whole intent for ``status.devices``); raises the
    API server's answer for a body it refuses: 400, 409 (a field another manager holds), 422 (a UID
    that is not the claim's)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("metadata"), Mapping):
        raise BadRequest("error decoding apply body: metadata is required")
    if not manager:
        raise BadRequest("PATCH ... is invalid: fieldManager: Required value: is required for apply patch")
    uid = body["metadata"].get("uid")
    if uid and uid != old["metadata"].get("uid"):
        message = f'Invalid value: "{uid}": field is immutable'
        raise Invalid(
            f'ResourceClaim.resource.k8s.io "{old["metadata"]["name"]}" is invalid: metadata.uid: {message}',
            name=old["metadata"]["name"],
            group="resource.k8s.io",
            kind="ResourceClaim",
            causes=[{"reason": "FieldValueInvalid", "message": message, "field": "metadata.uid"}],
        )
    status = body.get("status") or {}
    applied = [e for e in (status.get("devices") or []) if isinstance(e, Mapping)]
    new = copy.deepcopy(dict(old))
    managed = [m for m in new["metadata"].get("managedFields") or [] if isinstance(m, Mapping)]
    applies = [m for m in managed if m.get("operation") == "Apply" and m.get("subresource") == "status"]
    holdings = {
        who: {key: _Held(set(held.conditions), held.data) for key, held in entries.items()}
        for who, entries in claimstatus.compute_holdings({"metadata": {"managedFields": applies}}).items()
    }
    mine_before = holdings.pop(manager, {})
    devices = [dict(e) for e in (new.get("status") or {}).get("devices") or [] if isinstance(e, Mapping)]
    by_key = {_key(e): e for e in devices}

    conflicts: list[tuple[str, str]] = []
    for entry in applied:
        key = _key(entry)
        current = by_key.get(key, {})
        for other, held in holdings.items():
            theirs = held.get(key)
            if theirs is None:
                continue
            if "data" in entry and theirs.data and current.get("data") != entry["data"]:
                conflicts.append((other, f"{_path(key)}.data"))
                if force:
                    theirs.data = False
            for condition in entry.get("conditions") or []:
                kind = str(condition.get("type"))
                if kind in theirs.conditions and _condition(current, kind) != condition:
                    conflicts.append((other, f'{_path(key)}.conditions[type="{kind}"]'))
                    if force:
                        theirs.conditions.discard(kind)
    if conflicts and not force:
        causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{who}" with subresource "status"',
                "field": f,
            }
            for who, f in conflicts
        ]
        listed = "\n".join(f'- conflict with "{who}" with subresource "status": {f}' for who, f in conflicts)
        raise Conflict(
            f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: {listed}", causes=causes
        )

    mine: dict[EntryKey, _Held] = {}
    for entry in applied:
        key = _key(entry)
        target = by_key.get(key)
        if target is None:
            target = {name: entry[name] for name in _KEY_FIELDS if name in entry}
            devices.append(target)
            by_key[key] = target
        mine_entry = mine.setdefault(key, _Held())
        for condition in entry.get("conditions") or []:
            kind = str(condition.get("type"))
            kept = [c for c in target.get("conditions") or [] if c.get("type") != kind]
            position = next((i for i, c in enumerate(target.get("conditions") or []) if c.get("type") == kind), None)
            if position is None:
                kept.append(dict(condition))
            else:
                kept.insert(position, dict(condition))
            target["conditions"] = kept
            mine_entry.conditions.add(kind)
        if "data" in entry:
            target["data"] = copy.deepcopy(entry["data"])
            mine_entry.data = True

    # What this manager held and no longer applies goes, unless another manager holds it too.
    for key, before in mine_before.items():
        target = by_key.get(key)
        if target is None:
            continue
        now_held = mine.get(key, _Held())
        others = [held[key] for held in holdings.values() if key in held]
        for kind in before.conditions - now_held.conditions:
            if not any(kind in o.conditions for o in others):
                target["conditions"] = [c for c in target.get("conditions") or [] if c.get("type") != kind]
                if not target["conditions"]:
                    del target["conditions"]
        if before.data and not now_held.data and not any(o.data for o in others):
            target.pop("data", None)
        if key not in mine and not others:
            devices = [e for e in devices if _key(e) != key]
            by_key.pop(key)

    new.setdefault("status", {})
    if devices:
        new["status"]["devices"] = devices
    else:
        new["status"].pop("devices", None)
    rebuilt = [m for m in managed if m not in applies]
    times = {str(m.get("manager")): m.get("time", now) for m in managed}
    for who, held in [*holdings.items(), (manager, mine)]:
        rebuilt.append(
            {
                "manager": who,
                "operation": "Apply",
                "apiVersion": "resource.k8s.io/v1",
                "time": now if who == manager else times.get(who, now),
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(held),
                "subresource": "status",
            }
        )
    new["metadata"]["managedFields"] = rebuilt
    return new
