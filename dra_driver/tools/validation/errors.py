"""One field-level validation error, rendered exactly as Kubernetes renders ``field.Error``.

kubectl and the Python client show these strings to people, so :meth:`FieldError.detail` reproduces
apimachinery's ``field.Error.Error()`` byte for byte: the field path, the reason's text, the bad value
for the reasons that show one (Go's ``%q`` for strings, ``%v`` for numbers and booleans, ``null`` for
nil) and the message.  The constructors mirror ``field.Invalid``, ``field.Required`` and friends, with
their fixed messages (``may not be more than N bytes``, ``must have at most N items``, ``supported
values: ...``).

This module never decides what is valid; the rule modules do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from decimal import Decimal
from typing import Final, Literal

from dra_driver.tools.validation.paths import FieldPath

Reason = Literal[
    "FieldValueInvalid",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueForbidden",
    "FieldValueDuplicate",
    "FieldValueNotSupported",
]

_REASON_TEXT: Final[dict[str, str]] = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueRequired": "Required value",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueForbidden": "Forbidden",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueNotSupported": "Unsupported value",
}

# kube never shows the value for these reasons (field.Error.ErrorBody).
_VALUELESS: Final = frozenset({"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"})

_GO_ESCAPES: Final[dict[str, str]] = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


class RawValue(str):
    """A bad value kube renders through its ``String()`` method: shown as is, without quotes.

    Used where kube reports a composite key, e.g. a device ID ``driver/pool/device``.
    """

    __slots__ = ()


@dataclass(frozen=True)
class FieldError:
    """A field that failed validation: kube's ``field.Error`` (reason = ``Type``, message = ``Detail``)."""

    field: str
    reason: Reason
    message: str = ""
    value: object = dataclass_field(default=None, hash=False)

    def body(self) -> str:
        """The error without the field path (``ErrorBody()``): what a Status cause's ``message`` holds."""
        text = _REASON_TEXT[self.reason]
        if self.reason not in _VALUELESS:
            text = f"{text}: {render_value(self.value)}"
        if self.message:
            text = f"{text}: {self.message}"
        return text

    def detail(self) -> str:
        """``spec.devices[0].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must ...``."""
        return f"{self.field}: {self.body()}"

    def as_cause(self) -> dict[str, str]:
        """The ``details.causes[]`` entry kube-apiserver sends for this error in a 422 ``Status``."""
        return {"reason": self.reason, "message": self.body(), "field": self.field}


def invalid(path: FieldPath, value: object, message: str) -> FieldError:
    """``field.Invalid``: a malformed value."""
    return FieldError(str(path), "FieldValueInvalid", message, value)


def required(path: FieldPath, message: str = "") -> FieldError:
    """``field.Required``: a value that must be given."""
    return FieldError(str(path), "FieldValueRequired", message)


def forbidden(path: FieldPath, message: str) -> FieldError:
    """``field.Forbidden``: a value that is well-formed but not allowed here."""
    return FieldError(str(path), "FieldValueForbidden", message)


def duplicate(path: FieldPath, value: object) -> FieldError:
    """``field.Duplicate``: a value that must be unique in its list."""
    return FieldError(str(path), "FieldValueDuplicate", "", value)


def not_supported(path: FieldPath, value: object, supported: Iterable[str]) -> FieldError:
    """``field.NotSupported``: a value outside an enumeration, listing the supported ones in order."""
    message = "supported values: " + ", ".join(go_quote(option) for option in supported)
    return FieldError(str(path), "FieldValueNotSupported", message, value)


def too_long(path: FieldPath, max_bytes: int) -> FieldError:
    """``field.TooLong``: a string (or serialised object) longer than ``max_bytes`` bytes."""
    return FieldError(str(path), "FieldValueTooLong", f"may not be more than {max_bytes} bytes")


def too_many(path: FieldPath, actual: int, max_items: int) -> FieldError:
    """``field.TooMany``: a list or map with more than ``max_items`` entries."""
    return FieldError(str(path), "FieldValueTooMany", f"must have at most {max_items} items", actual)


def render_value(value: object) -> str:
    """A bad value as Go's ``fmt`` shows it in ``ErrorBody``; composite values are shown as compact JSON.

    kube prints structs with ``%#v`` (Go syntax of its internal types), which has no Python equivalent;
    JSON of what the client sent is the closest readable form.
    """
    if value is None:
        return "null"  # kube JSON-encodes a nil value
    if isinstance(value, RawValue):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str)


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote``: double quotes, backslash escapes, printable Unicode kept as is."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # Go never holds a lone surrogate; its decoder substitutes U+FFFD
        elif char.isprintable():
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_float(number: float) -> str:
    """Go's ``%v`` for a float64: shortest digits, exponent form below 1e-4 and from 1e+06 on."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(repr(number)).normalize().as_tuple()
    if not isinstance(exponent, int):  # unreachable: NaN and infinities are handled above
        return repr(number)
    digits = "".join(str(d) for d in digit_tuple)
    point = len(digits) + exponent  # position of the decimal point within digits
    exp10 = point - 1
    prefix = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{prefix}{digits}{'0' * (point - len(digits))}"
    return f"{prefix}{digits[:point]}.{digits[point:]}"
