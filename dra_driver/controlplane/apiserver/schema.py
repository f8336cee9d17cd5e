"""Which fields each kind has, read from the official client's generated models (API 1.37).

kube-apiserver decodes a body into Go structs, so a field the struct does not declare is dropped and,
with ``fieldValidation=Strict``, reported.  We get the same knowledge without copying a schema: the
``kubernetes`` package's models carry ``attribute_map`` (JSON names) and ``openapi_types`` (nested
types) generated from the 1.37 OpenAPI document.  This module owns walking an object against them.

Decoding also re-renders timestamps the way kube serializes its typed values: ``metav1.Time`` as UTC
whole seconds (``2026-01-02T03:04:05Z``), ``metav1.MicroTime`` (the fields in :data:`MICRO_TIME_FIELDS`)
with six fraction digits.  Clients write them in other RFC 3339 spellings (the Python client sends
``+00:00``), and Go clients such as kubectl cannot read a MicroTime without its fraction.  Other values
are never judged here (validation does that).
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Any

import kubernetes.client.models as client_models

from dra_driver.controlplane.apiserver.errors import BadRequest

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_SCALARS = frozenset({"str", "int", "bool", "float", "date", "bytes"})
MICRO_TIME_FIELDS = frozenset({"eventTime", "lastObservedTime", "acquireTime", "renewTime"})


@functools.cache
def fields_of(model: str) -> dict[str, str]:
    """``{json field name: openapi type}`` of a client model, e.g. ``V1Pod`` -> ``{"spec": "V1PodSpec", ...}``."""
    cls = getattr(client_models, model)
    types: dict[str, str] = cls.openapi_types
    names: dict[str, str] = cls.attribute_map
    return {names[attr]: type_name for attr, type_name in types.items()}


def decode_fields(model: str, obj: dict[str, Any]) -> list[str]:
    """Remove fields ``model`` does not declare from ``obj`` in place and normalize its timestamps.

    Returns the removed fields' paths, kube-style (``spec.devices[0].foo``; map keys such as labels are
    data, not fields).  A timestamp that is not RFC 3339 is a :class:`BadRequest`, as in kube.
    """
    unknown: list[str] = []
    _walk_model(model, obj, "", unknown)
    return unknown


def _walk_model(model: str, obj: dict[str, Any], path: str, unknown: list[str]) -> None:
    known = fields_of(model)
    for name in list(obj):
        field_path = f"{path}.{name}" if path else name
        type_name = known.get(name)
        if type_name is None:
            unknown.append(field_path)
            del obj[name]
        elif type_name == "datetime" and isinstance(obj[name], str):
            obj[name] = _normalize_time(obj[name], field_path, micro=name in MICRO_TIME_FIELDS)
        else:
            _walk_type(type_name, obj[name], field_path, unknown)


def _normalize_time(text: str, path: str, *, micro: bool) -> str:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadRequest(f'{path}: parsing time "{text}" as RFC 3339 failed: {exc}') from exc
    if moment.tzinfo is None:
        raise BadRequest(f'{path}: time "{text}" has no time zone (RFC 3339 needs one)')
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _walk_type(type_name: str, value: Any, path: str, unknown: list[str]) -> None:
    if value is None or type_name in _SCALARS or type_name.startswith("object") or "object" in type_name:
        return
    if match := _LIST.match(type_name):
        if isinstance(value, list):
            for index, item in enumerate(value):
                _walk_type(match.group(1), item, f"{path}[{index}]", unknown)
        return
    if match := _DICT.match(type_name):
        if isinstance(value, dict):
            for key, item in value.items():
                _walk_type(match.group(1), item, f"{path}.{key}", unknown)
        return
    if isinstance(value, dict) and hasattr(client_models, type_name):
        _walk_model(type_name, value, path, unknown)
