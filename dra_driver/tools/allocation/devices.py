"""A device as the search meets it: its ID, where it was published, and its parsed facts.

:class:`DeviceFacts` holds what the search needs beyond CEL (counter consumption as numbers, taints,
binding conditions, multi-allocation), parsed once per device dict and kept in a bounded cache keyed
by identity, like the CEL activation cache: kube-scheduler keeps its slices in an informer cache and
so does any caller that schedules more than one pod.  A caller that edits a slice dict in place must
call :func:`clear_device_facts`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.quantities import Amount, amount_of

if TYPE_CHECKING:
    from dra_driver.tools.allocation.pools import Pool

DeviceID = tuple[str, str, str]  # (driver, pool, device)
Consumption = tuple[tuple[str, tuple[tuple[str, Amount], ...]], ...]

DEFAULT_FACTS_CACHE_SIZE = 16384


def device_id_text(device_id: DeviceID) -> str:
    return "/".join(device_id)


def device_fields(device: JSON) -> JSON:
    """The device's own fields: v1 has them on the device, v1beta1 (read by the same code) under ``basic``."""
    basic = device.get("basic")
    return basic if isinstance(basic, Mapping) else device


class DeviceFacts:
    """One device dict, parsed for the search (never for CEL: that is the activation's job)."""

    __slots__ = (
        "allow_multiple",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "capacity",
        "consumes",
        "source",
        "taints",
    )

    def __init__(self, device: JSON) -> None:
        self.source = device
        fields = device_fields(device)
        self.consumes: Consumption = tuple(
            (
                str(entry.get("counterSet") or ""),
                tuple(
                    (str(name), amount_of((counter or {}).get("value"), f"device {device.get('name')} counter {name}"))
                    for name, counter in (entry.get("counters") or {}).items()
                ),
            )
            for entry in fields.get("consumesCounters") or ()
        )
        self.taints: tuple[JSON, ...] = tuple(fields.get("taints") or ())
        self.binding_conditions: list[str] | None = fields.get("bindingConditions")
        self.binding_failure_conditions: list[str] | None = fields.get("bindingFailureConditions")
        self.binds_to_node = bool(fields.get("bindsToNode"))
        self.allow_multiple = bool(fields.get("allowMultipleAllocations"))
        self.capacity: Any = (
            None  # capacity.DeviceCapacity, parsed on first use by dra_driver.tools.allocation.capacity
        )


class DeviceFactsCache:
    """Device dict -> :class:`DeviceFacts` by identity, least recently used out; thread-safe."""

    def __init__(self, maxsize: int = DEFAULT_FACTS_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[int, DeviceFacts] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, device: JSON) -> DeviceFacts:
        key = id(device)
        entry = self._entries.get(key)
        if entry is not None and entry.source is device:
            return entry
        facts = DeviceFacts(device)
        with self._lock:
            self._entries[key] = facts
            if len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return facts

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


DEFAULT_FACTS = DeviceFactsCache()


def clear_device_facts() -> None:
    DEFAULT_FACTS.clear()


@dataclass(slots=True)
class Candidate:
    """``deviceWithID``: a device of a slice of a pool, and its ID."""

    id: DeviceID
    device: JSON
    slice: JSON
    pool: Pool
    facts: DeviceFacts

    @property
    def name(self) -> str:
        return self.id[2]
