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

from dra_driver.errors import ConfigurationError


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
    """Every object in ``path``; ``List`` objects and top-level sequences are flattened."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix == ".json":
            loaded: list[Any] = [json.loads(text)]
        else:
            loaded = list(yaml.safe_load_all(text))
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"{path}: not valid YAML/JSON: {exc}") from exc
    return [Document(str(path), body) for body in _flatten(loaded)]


def _flatten(items: list[Any]) -> Iterator[Mapping[str, Any]]:
    for item in items:
        if isinstance(item, list):
            yield from _flatten(item)
        elif isinstance(item, Mapping):
            if str(item.get("kind", "")).endswith("List") and isinstance(item.get("items"), list):
                yield from _flatten(item["items"])
            else:
                yield item


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
    """The devices of every ResourceSlice in ``documents`` (other kinds are ignored)."""
    found: list[SliceDevice] = []
    for document in documents:
        if document.kind != "ResourceSlice":
            continue
        spec = document.body.get("spec") or {}
        driver = str(spec.get("driver") or default_driver)
        pool = spec.get("pool") or {}
        pool_name = str(pool.get("name", "")) if isinstance(pool, Mapping) else ""
        for device in spec.get("devices") or []:
            if isinstance(device, Mapping):
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


def selector_sites(document: Document) -> list[SelectorSite]:
    """Every CEL selector in a DeviceClass, ResourceClaim or ResourceClaimTemplate."""
    body = document.body
    if document.kind not in SELECTOR_KINDS or not str(body.get("apiVersion", "")).startswith("resource.k8s.io/"):
        return []
    spec = body.get("spec") or {}
    if document.kind == "DeviceClass":
        return _selectors(document, spec, "spec", device_class=None, in_class=True)
    prefix = "spec"
    if document.kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
        prefix = "spec.spec"
    sites: list[SelectorSite] = []
    requests = (spec.get("devices") or {}).get("requests") or []
    for index, request in enumerate(requests):
        if not isinstance(request, Mapping):
            continue
        path = f"{prefix}.devices.requests[{index}]"
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping):  # resource.k8s.io/v1
            sites += _selectors(document, exactly, f"{path}.exactly", _class_of(exactly), in_class=False)
        for sub_index, sub in enumerate(request.get("firstAvailable") or []):
            if isinstance(sub, Mapping):
                sub_path = f"{path}.firstAvailable[{sub_index}]"
                sites += _selectors(document, sub, sub_path, _class_of(sub), in_class=False)
        if "selectors" in request:  # v1beta1: the request itself holds the selectors
            sites += _selectors(document, request, path, _class_of(request), in_class=False)
    return sites


def _class_of(holder: Mapping[str, Any]) -> str | None:
    name = holder.get("deviceClassName")
    return str(name) if name else None


def _selectors(
    document: Document, holder: Mapping[str, Any], path: str, device_class: str | None, *, in_class: bool
) -> list[SelectorSite]:
    sites: list[SelectorSite] = []
    earlier: list[str] = []
    for index, selector in enumerate(holder.get("selectors") or []):
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            continue
        sites.append(
            SelectorSite(
                document,
                f"{path}.selectors[{index}].cel.expression",
                expression,
                tuple(earlier),
                device_class,
                in_class,
            )
        )
        earlier.append(expression)
    return sites
