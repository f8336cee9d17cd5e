"""Typed reads from a decoded JSON object, the way Go's decoder sees the same bytes.

kube-apiserver decodes a body into Go structs before it validates, so a string where an integer
belongs never reaches its validation.  We validate plain dicts, so every read here checks the JSON type
first: a wrong type is reported once, as ``FieldValueInvalid`` naming the expected type, and the field
then reads as absent so that no rule trips over it.  ``null`` reads as absent, as it does for Go's
pointers, slices and maps.  :func:`byte_length` is Go's ``len()`` of a string: UTF-8 bytes.

This module owns type checks only; it never judges a value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation.errors import FieldError, invalid
from dra_driver.tools.validation.paths import FieldPath

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def byte_length(text: str) -> int:
    """Length in UTF-8 bytes, as Go's ``len(string)`` counts it."""
    return len(text.encode("utf-8", "surrogatepass"))


def json_byte_length(value: object) -> int:
    """Bytes of ``value`` serialised as compact JSON: the size of a ``RawExtension`` kube would store."""
    return byte_length(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str))


def _type_error(path: FieldPath, value: object, expected: str) -> FieldError:
    return invalid(path, value, f"must be of type {expected}")


def as_object(value: object, path: FieldPath, errors: list[FieldError]) -> JSON | None:
    """``value`` as a JSON object; ``None`` for null, or (with an error recorded) for another type."""
    if value is None or isinstance(value, Mapping):
        return value
    errors.append(_type_error(path, value, "object"))
    return None


def as_string(value: object, path: FieldPath, errors: list[FieldError]) -> str | None:
    """``value`` as a string; ``None`` for null, or (with an error recorded) for another type."""
    if value is None or isinstance(value, str):
        return value
    errors.append(_type_error(path, value, "string"))
    return None


def get_object(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> JSON | None:
    """``obj[name]`` as a JSON object (``None`` when absent)."""
    return as_object(obj.get(name), parent.child(name), errors)


def get_string(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> str | None:
    """``obj[name]`` as a string (``None`` when absent)."""
    return as_string(obj.get(name), parent.child(name), errors)


def get_array(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> list[object] | None:
    """``obj[name]`` as a JSON array (``None`` when absent; ``[]`` is present and empty, as in Go)."""
    value = obj.get(name)
    if value is None or isinstance(value, list):
        return value
    errors.append(_type_error(parent.child(name), value, "array"))
    return None


def get_boolean(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> bool | None:
    """``obj[name]`` as a boolean (``None`` when absent)."""
    value = obj.get(name)
    if value is None or isinstance(value, bool):
        return value
    errors.append(_type_error(parent.child(name), value, "boolean"))
    return None


def get_integer(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> int | None:
    """``obj[name]`` as an int64 (``None`` when absent); JSON ``true`` and ``1.5`` are not integers."""
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX:
        return value
    errors.append(_type_error(parent.child(name), value, "integer"))
    return None


def get_string_map(obj: JSON, name: str, parent: FieldPath, errors: list[FieldError]) -> dict[str, str]:
    """``obj[name]`` as a map of strings (labels, annotations); values of another type are reported and dropped."""
    path = parent.child(name)
    mapping = as_object(obj.get(name), path, errors) or {}
    strings: dict[str, str] = {}
    for key, value in mapping.items():
        if isinstance(value, str):
            strings[key] = value
        else:
            errors.append(_type_error(path.key(key), value, "string"))
    return strings
