"""Which fields each kind has, read from the official client's generated models (API 1.37).

kube-apiserver decodes a body into Go structs, so a field the struct does not declare is dropped and,
with ``fieldValidation=Strict``, reported.  We get the same knowledge without copying a schema: the
``kubernetes`` package's models carry ``attribute_map`` (JSON names) and ``openapi_types`` (nested
types) generated from the 1.37 OpenAPI document.  This module owns walking an object against them; it
never judges values (validation does) and never changes known fields.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import kubernetes.client.models as client_models

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_SCALARS = frozenset({"str", "int", "bool", "float", "datetime", "date", "bytes"})


@functools.cache
def fields_of(model: str) -> dict[str, str]:
    """``{json field name: openapi type}`` of a client model, e.g. ``V1Pod`` -> ``{"spec": "V1PodSpec", ...}``."""
    cls = getattr(client_models, model)
    types: dict[str, str] = cls.openapi_types
    names: dict[str, str] = cls.attribute_map
    return {names[attr]: type_name for attr, type_name in types.items()}


def prune_unknown_fields(model: str, obj: dict[str, Any]) -> list[str]:
    """Remove fields ``model`` does not declare from ``obj`` in place; return their paths, kube-style.

    Paths read like kube's strict-decoding errors: ``spec.devices[0].foo``, ``metadata.labels`` keys are
    data, not fields, so maps of values are not searched for unknown keys.
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
            continue
        _walk_type(type_name, obj[name], field_path, unknown)


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
