"""Which fields each kind has, read from the official client's generated models (API 1.37).

kube-apiserver decodes a body into Go structs, so a field the struct does not declare is dropped and,
with ``fieldValidation=Strict``, reported.  We get the same knowledge without copying a schema: the
``kubernetes`` package's models carry ``attribute_map`` (JSON names) and ``openapi_types`` (nested
types) generated from the 1.37 OpenAPI document.  This module owns walking an object against them.

Decoding also re-renders timestamps the way kube serializes its typed values: ``metav1.Time`` as UTC
whole seconds (``2026-01-02T03:04:05Z``), ``metav1.MicroTime`` (the fields in :data:`MICRO_TIME_FIELDS`)
with six fraction digits.  Clients write them in other RFC 3339 spellings (the Python client sends
``+00:00``), and Go clients such as kubectl cannot read a MicroTime without its fraction.  Values are
checked only for their JSON type, as Go's decoder does; what they mean is validation's business.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes.client.models as client_models

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
MICRO_TIME_FIELDS = frozenset({"eventTime", "lastObservedTime", "acquireTime", "renewTime"})


@functools.cache
def fields_of(model: str) -> dict[str, str]:
    """``{json field name: openapi type}`` of a client model, e.g. ``V1Pod`` -> ``{"spec": "V1PodSpec", ...}``."""
    cls = getattr(client_models, model)
    types: dict[str, str] = cls.openapi_types
    names: dict[str, str] = cls.attribute_map
    return {names[attr]: type_name for attr, type_name in types.items()}


@dataclass
class Decoded:
    """What decoding found: unknown fields (removed) and values of the wrong JSON type (kept)."""

    unknown: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Messages in Go's ``encoding/json`` words; kube refuses the body at the first one."""


def decode_fields(model: str, obj: dict[str, Any]) -> Decoded:
    """Check ``obj`` against ``model`` as kube's typed decoding would, in place.

    Unknown fields are removed and reported by path, kube-style (``spec.devices[0].foo``; map keys such
    as labels are data, not fields).  A value of the wrong JSON type (a string for an integer, a map for
    a list) or a timestamp that is not RFC 3339 is an error.  Scalars typed as strings also accept
    numbers, because the models type ``resource.Quantity`` as a string and kube reads ``10`` there.
    """
    decoded = Decoded()
    _walk_model(model, obj, "", model, decoded)
    return decoded


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _mismatch(decoded: Decoded, value: Any, struct_path: str, go_type: str) -> None:
    decoded.errors.append(
        f"json: cannot unmarshal {_json_type(value)} into Go struct field {struct_path} of type {go_type}"
    )


def _walk_model(model: str, obj: dict[str, Any], path: str, struct_path: str, decoded: Decoded) -> None:
    known = fields_of(model)
    for name in list(obj):
        field_path = f"{path}.{name}" if path else name
        type_name = known.get(name)
        if type_name is None:
            decoded.unknown.append(field_path)
            del obj[name]
        elif type_name == "datetime" and isinstance(obj[name], str):
            try:
                obj[name] = _normalize_time(obj[name], micro=name in MICRO_TIME_FIELDS)
            except ValueError as exc:
                decoded.errors.append(f'{field_path}: parsing time "{obj[name]}" as RFC 3339: {exc}')
        else:
            _walk_type(type_name, obj[name], field_path, f"{struct_path}.{name}", decoded)


def _normalize_time(text: str, *, micro: bool) -> str:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("no time zone")
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


# openapi scalar type -> (Go type named in errors, which JSON values decode into it)
_SCALAR_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("string", lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool)),
    "bytes": ("[]uint8", lambda v: isinstance(v, str)),
    "date": ("string", lambda v: isinstance(v, str)),
    "datetime": ("v1.Time", lambda v: isinstance(v, str)),
    "int": ("int64", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("float64", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("bool", lambda v: isinstance(v, bool)),
}


def _walk_type(type_name: str, value: Any, path: str, struct_path: str, decoded: Decoded) -> None:
    if value is None or "object" in type_name:
        return
    if type_name in _SCALAR_CHECKS:
        go_type, accepts = _SCALAR_CHECKS[type_name]
        if not accepts(value):
            _mismatch(decoded, value, struct_path, go_type)
        return
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            _mismatch(decoded, value, struct_path, f"[]{match.group(1)}")
            return
        for index, item in enumerate(value):
            _walk_type(match.group(1), item, f"{path}[{index}]", struct_path, decoded)
        return
    if match := _DICT.match(type_name):
        if not isinstance(value, dict):
            _mismatch(decoded, value, struct_path, f"map[string]{match.group(1)}")
            return
        for key, item in value.items():
            _walk_type(match.group(1), item, f"{path}.{key}", struct_path, decoded)
        return
    if hasattr(client_models, type_name):
        if not isinstance(value, dict):
            _mismatch(decoded, value, struct_path, type_name)
            return
        _walk_model(type_name, value, path, struct_path, decoded)
