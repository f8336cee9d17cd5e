"""The ``device`` variable: one ResourceSlice device turned into celpy values, once, and reused.

Owns: the conversion of a ``resource.k8s.io/v1`` device (a dict as the API returns it) into
``device.driver``, ``device.attributes[domain][id]`` (int/bool/string/version -> Semver),
``device.capacity[domain][id]`` (the ``value`` as a Quantity) and ``device.allowMultipleAllocations``;
the lookup rules (a bare name belongs to the driver's domain; an unknown domain is an empty map; an
unknown id is ``no such key``); and the cache that lets every selector reuse one conversion.

Must never: evaluate a selector, or mutate the device dict it was given.  A device dict is treated as
an immutable snapshot (as published slices are); a caller that edits one in place must build a new
:class:`DeviceActivation` or call :meth:`ActivationCache.clear`.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from celpy import celtypes

from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.cel.errors import DeviceValueError
from dra_driver.tools.cel.semver import Semver, SemverError

DEFAULT_CACHE_SIZE = 4096  # about 8 KiB per converted device: ~32 MiB when full


class DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a missing *domain* is an empty map, as in Kubernetes.

    celpy looks keys up through ``__getitem__`` (``m['d']``, the InterpretedRunner's ``m.d``) and
    through ``get`` (the CompiledRunner's ``m.d``), so both are overridden; ``in`` still reports false.
    """

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and not super().__contains__(key):
            return _EMPTY
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if isinstance(key, str) and not super().__contains__(key):
            return _EMPTY
        return super().get(key, default)


_EMPTY = celtypes.MapType()


class DeviceActivation:
    """The ``device`` variable of one device, ready for any number of evaluations.

    ``source`` keeps the device dict alive for identity checks in :class:`ActivationCache`;
    ``runtime`` is where the evaluator keeps its own per-device state (a celpy Activation), built on
    first use and shared by every selector, since it holds no per-evaluation state.
    """

    __slots__ = ("context", "driver", "name", "runtime", "source", "value")

    def __init__(self, device: Mapping[str, Any], driver: str) -> None:
        self.source = device
        self.driver = driver
        self.name = str(device.get("name", ""))
        self.value = _device_value(device, driver)
        self.context: dict[str, Any] = {"device": self.value}
        self.runtime: object | None = None

    def __repr__(self) -> str:
        return f"DeviceActivation({self.name!r}, driver={self.driver!r})"


def build_device_activation(device: Mapping[str, Any], driver: str) -> DeviceActivation:
    """Convert one device of a slice whose ``spec.driver`` is ``driver``; DeviceValueError if malformed."""
    return DeviceActivation(device, driver)


def _device_value(device: Mapping[str, Any], driver: str) -> celtypes.MapType:
    # v1beta1 wrapped the fields in ``basic``; v1 has them on the device itself.
    basic = device.get("basic")
    fields: Mapping[str, Any] = basic if isinstance(basic, Mapping) else device
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in (fields.get("attributes") or {}).items():
        domain, ident = _qualify(str(name), driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(device, str(name), attribute)
    capacity: dict[str, dict[str, Any]] = {}
    for name, entry in (fields.get("capacity") or {}).items():
        domain, ident = _qualify(str(name), driver)
        capacity.setdefault(domain, {})[ident] = _capacity_value(device, str(name), entry)
    value = celtypes.MapType()
    dict.update(
        value,
        {
            _string("driver"): _string(driver),
            _string("attributes"): _domains(attributes),
            _string("capacity"): _domains(capacity),
            _string("allowMultipleAllocations"): celtypes.BoolType(bool(fields.get("allowMultipleAllocations", False))),
        },
    )
    return value


def _domains(by_domain: Mapping[str, Mapping[str, Any]]) -> DomainMap:
    domains = DomainMap()
    for domain, ids in by_domain.items():
        values = celtypes.MapType()
        dict.update(values, {_string(k): v for k, v in ids.items()})
        dict.__setitem__(domains, _string(domain), values)
    return domains


# celpy's IntType/StringType constructors rebuild a checking wrapper on every call; a device has a few
# dozen values and a node thousands of devices, so build them directly after our own checks.
def _string(value: str) -> Any:
    return str.__new__(celtypes.StringType, value)


def _int(value: int) -> Any:
    if not -(1 << 63) <= value < 1 << 63:
        raise OverflowError(value)
    return int.__new__(celtypes.IntType, value)


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> Quantity:
    """Quantities repeat across devices ("16", "1"); parsed values are immutable, so share them."""
    return Quantity.parse(text)


@functools.lru_cache(maxsize=1024)
def _version(text: str) -> Semver:
    return Semver.parse(text)


def _qualify(name: str, driver: str) -> tuple[str, str]:
    """``domain/id`` -> (domain, id); a bare id belongs to the driver's domain."""
    domain, slash, ident = name.partition("/")
    return (domain, ident) if slash else (driver, name)


def _attribute_value(device: Mapping[str, Any], name: str, attribute: Any) -> Any:
    if not isinstance(attribute, Mapping):
        raise _bad(device, f"attribute {name!r} must be an object with one of int, bool, string, version")
    present = [key for key in ("int", "bool", "string", "version") if attribute.get(key) is not None]
    if len(present) != 1:
        raise _bad(device, f"attribute {name!r} must set exactly one of int, bool, string, version")
    kind = present[0]
    value = attribute[kind]
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63:
        return _int(value)
    if kind == "bool" and isinstance(value, bool):
        return celtypes.BoolType(value)
    if kind == "string" and isinstance(value, str):
        return _string(value)
    if kind == "version" and isinstance(value, str):
        try:
            return _version(value)
        except SemverError as exc:
            raise _bad(device, f"attribute {name!r}: {value!r} is not a semantic version: {exc}") from exc
    raise _bad(device, f"attribute {name!r}: {kind} value {value!r} has the wrong type")


def _capacity_value(device: Mapping[str, Any], name: str, entry: Any) -> Quantity:
    value = entry.get("value") if isinstance(entry, Mapping) else entry
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _bad(device, f"capacity {name!r} has no quantity value")
    try:
        return _quantity(str(value))
    except QuantityError as exc:
        raise _bad(device, f"capacity {name!r}: {value!r}: {exc}") from exc


def _bad(device: Mapping[str, Any], message: str) -> DeviceValueError:
    return DeviceValueError("", f"device {device.get('name', '?')!r}: {message}")


class ActivationCache:
    """Device dict -> :class:`DeviceActivation`, by identity, least recently used first out.

    Keyed by ``(id(device), driver)``; each entry keeps its dict alive, so an id cannot be reused by
    another dict while the entry exists.  Thread-safe.
    """

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[int, str], DeviceActivation] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, device: Mapping[str, Any], driver: str) -> DeviceActivation:
        key = (id(device), driver)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.source is device:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
        activation = DeviceActivation(device, driver)
        with self._lock:
            self.misses += 1
            self._entries[key] = activation
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return activation

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
