"""Claim constraints: ``matchAttribute`` (one value for all) and ``distinctAttribute`` (all different).

A constraint applies to the requests it names (``<request>`` covers its sub-requests, or
``<request>/<sub-request>`` one of them), or to all when it names none.  A device lacking the
attribute violates it.  Values are typed (string, int, bool, version): ``"1"`` and ``1`` differ, and
versions compare as strings (semver 2.0.0 forbids leading zeros, so equal versions are equal text).
Constraints are monotonic: once one fails, more devices cannot repair it, so the search prunes there.
Every successful ``add`` is undone by exactly one ``remove`` with the same device when backtracking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.devices import DeviceID, device_fields

TypedValue = tuple[str, Any]
VALUE_TYPES = ("string", "int", "bool", "version")


def lookup_attribute(device: JSON, device_id: DeviceID, qualified_name: str) -> TypedValue | None:
    """The typed attribute value, by fully qualified name or, in the driver's domain, by bare name."""
    fields = device_fields(device)
    attributes: Mapping[str, Any] = fields.get("attributes") or {}
    attribute = attributes.get(qualified_name)
    if attribute is None:
        domain, slash, ident = qualified_name.partition("/")
        if not slash or domain != device_id[0]:
            return None
        attribute = attributes.get(ident)
        if attribute is None:
            return None
    if not isinstance(attribute, Mapping):
        return None
    for kind in VALUE_TYPES:
        if attribute.get(kind) is not None:
            return (kind, attribute[kind])
    return ("unknown", None)


class Constraint(ABC):
    """One claim constraint over the devices of the requests it names; subclasses say what must hold."""

    def __init__(self, request_names: list[str], attribute: str) -> None:
        self.request_names = frozenset(request_names)
        self.attribute = attribute

    def applies(self, request: str, sub_request: str) -> bool:
        if not self.request_names:
            return True
        if request in self.request_names:
            return True
        return bool(sub_request) and f"{request}/{sub_request}" in self.request_names

    @abstractmethod
    def add(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> bool:
        """Take the device into the constraint's set if it keeps the constraint true; else False."""

    @abstractmethod
    def remove(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> None:
        """Undo one successful :meth:`add` of the same device (backtracking)."""


class MatchAttribute(Constraint):
    """All devices of the named requests share one value of the attribute."""

    def __init__(self, request_names: list[str], attribute: str) -> None:
        super().__init__(request_names, attribute)
        self.value: TypedValue | None = None
        self.count = 0

    def add(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> bool:
        if not self.applies(request, sub_request):
            return True
        value = lookup_attribute(device, device_id, self.attribute)
        if value is None or value[0] == "unknown":
            return False
        if self.count == 0:
            self.value = value
        elif value != self.value:
            return False
        self.count += 1
        return True

    def remove(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> None:
        if self.applies(request, sub_request):
            self.count -= 1


class DistinctAttribute(Constraint):
    """Every device of the named requests has a different value of the attribute."""

    def __init__(self, request_names: list[str], attribute: str) -> None:
        super().__init__(request_names, attribute)
        self.values: dict[DeviceID, TypedValue] = {}

    def add(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> bool:
        if not self.applies(request, sub_request):
            return True
        value = lookup_attribute(device, device_id, self.attribute)
        if value is None or value[0] == "unknown":
            return False
        if value in self.values.values():
            return False
        self.values[device_id] = value
        return True

    def remove(self, request: str, sub_request: str, device: JSON, device_id: DeviceID) -> None:
        if self.applies(request, sub_request):
            self.values.pop(device_id, None)
