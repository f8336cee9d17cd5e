"""Reading Kubernetes objects from YAML/JSON files, and finding what the CEL tools work on in them.

Owns: loading one or many objects from a file (multi-document YAML, JSON, ``kind: List``, or a
bare sequence), the devices of ResourceSlices (with each slice's driver and pool), and the CEL
selectors of DeviceClasses, ResourceClaims and ResourceClaimTemplates with their YAML paths
(``spec.devices.requests[1].exactly.selectors[0].cel.expression``).

Must never: evaluate or lint an expression, or talk to a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.errors import ConfigurationError, describe_yaml_error


@dataclass(frozen=True, slots=True)
class Document:
    """One Kubernetes object and where it came from."""

    source: str  # file name, or "cluster"
    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        metadata = self.body.get("metadata") or {}
        return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""

    @property
    def label(self) -> str:
        """``Kind/name`` as kubectl prints it."""
        return f"{self.kind}/{self.name}" if self.name else self.kind


def load_documents(path: Path) -> list[Document]:
    """Every object in ``path``; ``List`` objects and top-level sequences are flattened.

    A file that cannot be read, is not UTF-8 text, is not YAML/JSON, or holds something other than
    objects (a number, a string) is a :class:`ConfigurationError` naming the file; an empty file
    gives no documents (the caller says whether that is wrong).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{path}: not a YAML or JSON text file (not UTF-8: {exc.reason})") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix == ".json":
            loaded: list[Any] = [json.loads(text)]
        else:
            loaded = list(yaml.safe_load_all(text))
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path}: not valid YAML: {describe_yaml_error(exc)}") from exc
    return [Document(str(path), body) for body in _flatten(loaded, path)]


def _flatten(items: list[Any], path: Path, item_kind: str = "") -> Iterator[Mapping[str, Any]]:
    for number, item in enumerate(items, start=1):
        if item is None:  # an empty YAML document (``---`` twice)
            continue
        if isinstance(item, list):
            yield from _flatten(item, path, item_kind)
        elif isinstance(item, Mapping):
            kind = str(item.get("kind", ""))
            if kind.endswith("List") and isinstance(item.get("items"), list):
                # The API's typed lists (ResourceSliceList) leave ``kind`` out of their items.
                yield from _flatten(item["items"], path, kind.removesuffix("List"))
            elif item_kind and "kind" not in item:
                yield {"kind": item_kind, **item}
            else:
                yield item
        else:
            raise ConfigurationError(
                f"{path}: item {number} is {describe_value(item)}, not a Kubernetes object (a mapping with kind)"
            )


def describe_value(value: object) -> str:
    """``the number 5``, ``a string 'abc...'``: what a user wrote where something else belongs."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"a string {value[:40] + '...' if len(value) > 40 else value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def _mapping(document: Document, value: object, path: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping (an absent one is empty); otherwise the object is malformed."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise shape_error(document, path, "a mapping", value)
    return value


def _sequence(document: Document, value: object, path: str, what: str) -> list[Any]:
    """``value`` if it is a list (an absent one is empty); otherwise the object is malformed."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise shape_error(document, path, f"a list of {what}", value)
    return value


def shape_error(document: Document, path: str, expected: str, value: object) -> ConfigurationError:
    """The object has a field of the wrong type: Kubernetes would refuse it, and so do the CEL tools."""
    return ConfigurationError(
        f"{document.source}: {document.label}: {path} must be {expected}, not {describe_value(value)}"
    )


# -- ResourceSlice devices --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a ResourceSlice, with what a selector needs besides the device itself."""

    driver: str
    pool: str
    slice_name: str
    device: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.device.get("name", "?"))


def slice_devices(documents: list[Document], *, default_driver: str) -> list[SliceDevice]:
    """The devices of every ResourceSlice in ``documents`` (other kinds are ignored).

    A slice whose ``spec``, ``devices`` or a device has the wrong shape (``devices: 5``, a device
    without a name) is a :class:`ConfigurationError` naming the file, the slice and the field.
    """
    found: list[SliceDevice] = []
    for document in documents:
        if document.kind != "ResourceSlice":
            continue
        spec = _mapping(document, document.body.get("spec"), "spec")
        driver = spec.get("driver") or default_driver
        if not isinstance(driver, str):
            raise shape_error(document, "spec.driver", "a driver name", driver)
        pool = _mapping(document, spec.get("pool"), "spec.pool")
        pool_name = str(pool.get("name", ""))
        for index, item in enumerate(_sequence(document, spec.get("devices"), "spec.devices", "devices")):
            where = f"spec.devices[{index}]"
            device = _mapping(document, item, where)
            if not isinstance(device.get("name"), str) or not device["name"]:
                raise shape_error(document, f"{where}.name", "the device's name", device.get("name"))
            for field in ("attributes", "capacity"):
                _mapping(document, device.get(field), f"{where}.{field}")
            found.append(SliceDevice(driver, pool_name, document.name, device))
    return found


# -- selectors --------------------------------------------------------------------------------------

SELECTOR_KINDS = frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate"})


@dataclass(frozen=True, slots=True)
class SelectorSite:
    """One ``cel.expression`` in an object, with the context a linter needs.

    ``earlier`` are the selectors before it in the same list (evaluated first, in order: a false one
    stops evaluation); ``device_class`` is the class a request names (its selectors run before the
    request's own); ``in_class`` is true for a DeviceClass's own selectors.
    """

    document: Document
    path: str
    expression: str
    earlier: tuple[str, ...]
    device_class: str | None
    in_class: bool


def holds_selectors(document: Document) -> bool:
    """Whether the object is of a kind whose CEL selectors the tools check."""
    return document.kind in SELECTOR_KINDS


def selector_sites(document: Document) -> list[SelectorSite]:
    """Every CEL selector in a DeviceClass, ResourceClaim or ResourceClaimTemplate (other kinds: none).

    Where the object's shape is wrong -- an ``apiVersion`` outside ``resource.k8s.io``, ``selectors``
    that is not a list, a ``cel`` or ``expression`` of the wrong type -- Kubernetes would refuse the
    object, so this raises a :class:`ConfigurationError` naming the file, the object and the field
    instead of finding no selectors there.
    """
    body = document.body
    if document.kind not in SELECTOR_KINDS:
        return []
    api_version = body.get("apiVersion")
    if not isinstance(api_version, str) or not api_version.startswith("resource.k8s.io/"):
        raise shape_error(document, "apiVersion", "resource.k8s.io/v1 (or v1beta1, v1beta2)", api_version)
    spec = _mapping(document, body.get("spec"), "spec")
    if document.kind == "DeviceClass":
        return _selectors(document, spec, "spec", device_class=None, in_class=True)
    return [
        site
        for path, holder in request_holders(document)
        for site in _selectors(document, holder, path, _class_of(holder), in_class=False)
    ]


def request_holders(document: Document) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, mapping) of every request and subrequest of a ResourceClaim or ResourceClaimTemplate that
    can hold ``deviceClassName`` and ``selectors`` (``exactly``, each ``firstAvailable`` entry, and a
    v1beta1 request itself); none for other kinds."""
    if document.kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        return []
    spec = _mapping(document, document.body.get("spec"), "spec")
    prefix = "spec"
    if document.kind == "ResourceClaimTemplate":
        spec = _mapping(document, spec.get("spec"), "spec.spec")
        prefix = "spec.spec"
    holders: list[tuple[str, Mapping[str, Any]]] = []
    devices = _mapping(document, spec.get("devices"), f"{prefix}.devices")
    requests = _sequence(document, devices.get("requests"), f"{prefix}.devices.requests", "requests")
    for index, item in enumerate(requests):
        path = f"{prefix}.devices.requests[{index}]"
        request = _mapping(document, item, path)
        if "exactly" in request:  # resource.k8s.io/v1
            holders.append((f"{path}.exactly", _mapping(document, request["exactly"], f"{path}.exactly")))
        subrequests = _sequence(document, request.get("firstAvailable"), f"{path}.firstAvailable", "subrequests")
        for sub_index, sub_item in enumerate(subrequests):
            sub_path = f"{path}.firstAvailable[{sub_index}]"
            holders.append((sub_path, _mapping(document, sub_item, sub_path)))
        if "selectors" in request or "deviceClassName" in request:  # v1beta1: the request itself holds them
            holders.append((path, request))
    return holders


def class_references(document: Document) -> list[tuple[str, str]]:
    """(path of ``deviceClassName``, the class) of every request and subrequest of a claim or template."""
    return [
        (f"{path}.deviceClassName", name)
        for path, holder in request_holders(document)
        if (name := _class_of(holder)) is not None
    ]


def _class_of(holder: Mapping[str, Any]) -> str | None:
    name = holder.get("deviceClassName")
    return str(name) if name else None


def _selectors(
    document: Document, holder: Mapping[str, Any], path: str, device_class: str | None, *, in_class: bool
) -> list[SelectorSite]:
    sites: list[SelectorSite] = []
    earlier: list[str] = []
    selectors = _sequence(
        document, holder.get("selectors"), f"{path}.selectors", "selectors ({cel: {expression: ...}})"
    )
    for index, item in enumerate(selectors):
        where = f"{path}.selectors[{index}]"
        selector = _mapping(document, item, where)
        cel = selector.get("cel")
        if not isinstance(cel, Mapping):
            raise shape_error(document, f"{where}.cel", "a mapping with an expression ({expression: ...})", cel)
        expression = cel.get("expression")
        if not isinstance(expression, str):
            raise shape_error(document, f"{where}.cel.expression", "a CEL expression (a string)", expression)
        sites.append(
            SelectorSite(
                document,
                f"{where}.cel.expression",
                expression,
                tuple(earlier),
                device_class,
                in_class,
            )
        )
        earlier.append(expression)
    return sites
