"""Opaque device configuration (``config[].opaque``) and raw JSON objects in general.

A raw JSON object (``opaque.parameters``, ``status.devices[].data``) must be present, at most its limit
in bytes and a JSON object.  kube measures the bytes the client sent; we measure the object serialised
as compact JSON, which is what a client sending compact JSON sends.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, invalid, required, too_long
from dra_driver.tools.validation.fields import get_object, get_string, json_byte_length
from dra_driver.tools.validation.names import validate_driver_name
from dra_driver.tools.validation.paths import FieldPath

_OMITTED = "<value omitted>"


def validate_raw_object(value: object, path: FieldPath, max_bytes: int) -> list[FieldError]:
    """A required JSON object of at most ``max_bytes`` bytes."""
    if value is None:
        return [required(path)]
    if json_byte_length(value) > max_bytes:
        return [too_long(path, max_bytes)]
    if not isinstance(value, Mapping):
        return [invalid(path, _OMITTED, "must be a valid JSON object")]
    return []


def validate_device_configuration(config: JSON, path: FieldPath) -> list[FieldError]:
    """A ``DeviceConfiguration``: ``opaque`` is required (it is the only kind of configuration)."""
    errors: list[FieldError] = []
    opaque = get_object(config, "opaque", path, errors)
    if opaque is None:
        return [*errors, required(path.child("opaque"))]
    opaque_path = path.child("opaque")
    errors.extend(
        validate_driver_name(get_string(opaque, "driver", opaque_path, errors) or "", opaque_path.child("driver"))
    )
    errors.extend(
        validate_raw_object(
            opaque.get("parameters"), opaque_path.child("parameters"), limits.OPAQUE_PARAMETERS_MAX_BYTES
        )
    )
    return errors
