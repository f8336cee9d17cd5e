"""Reading ``application/vnd.kubernetes.protobuf`` request bodies into the JSON form the verbs work on.

client-go's typed clients (kubectl ``create namespace``, ``create secret generic``, ...) send objects
as kube's protobuf: the magic ``k8s\\x00``, then a ``runtime.Unknown`` envelope (``typeMeta`` 1 with
``apiVersion`` 1 and ``kind`` 2, ``raw`` 2 holding the object's own message, ``contentEncoding`` 3 and
``contentType`` 4, both ignored as kube-apiserver's serializer ignores them).  The object is read with
the field tables of ``protobuf_messages.py`` and becomes the dict the same object would have been as
JSON (Go's zero values omitted, ``bytes`` in base64, ``metav1.Time`` as RFC 3339 whole seconds), so
every later step (field validation, defaults, admission, storage) is the JSON path's.

Errors read as kube-apiserver's ``transformDecodeError`` words them (400).  This module never decides
*whether* a body may be protobuf; the HTTP layer asks :func:`decodes` first.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from migdra_devcluster.apiserver.errors import BadRequest
from migdra_devcluster.apiserver.protobuf_messages import KIND_MESSAGES, MESSAGES, Field
from migdra_devcluster.apiserver.protowire import (
    LENGTH_DELIMITED,
    VARINT,
    WireError,
    as_signed64,
    iter_fields,
)
from migdra_devcluster.apiserver.registry import ResourceType

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
JSON_MEDIA_TYPES = ("application/json", "application/yaml")
_SUMMARY_BYTES = 30


def decodes(resource: ResourceType) -> bool:
    """Whether a protobuf body for this resource can be read (its kind has a field table)."""
    return (resource.group_version, resource.kind) in KIND_MESSAGES


def accepted_media_types(resource: ResourceType | None) -> list[str]:
    """The body media types kube-apiserver would list in a 415 for this resource (``None``: a body that is
    not an object of a kind, such as ``DeleteOptions``, which this server reads as JSON or YAML only)."""
    if resource is not None and decodes(resource):
        return [*JSON_MEDIA_TYPES, PROTOBUF]
    return list(JSON_MEDIA_TYPES)


def _summary(data: bytes) -> str:
    """kube's ``summarizeData``: the first 30 bytes in hex, for errors before the kind is known."""
    if not data:
        return "<empty>"
    text = data[:_SUMMARY_BYTES].hex()
    return f"{text} ..." if len(data) > _SUMMARY_BYTES else text


def decode_object(raw: bytes, resource: ResourceType) -> dict[str, Any]:
    """The object in a protobuf body sent to ``resource``, as the dict its JSON would decode to.

    The envelope's ``apiVersion``/``kind`` are kept (defaulted from the URL's when empty, as kube does),
    so a body of another kind is refused later with the JSON path's wording.
    """
    unrecognized = f"the object provided is unrecognized (must be of type {resource.kind})"
    if not raw.startswith(MAGIC):
        raise BadRequest(
            f"{unrecognized}: provided data does not appear to be a protobuf message, expected prefix "
            f"[107 56 115 0] ({_summary(raw)})"
        )
    if len(raw) == len(MAGIC):
        raise BadRequest(f"{unrecognized}: empty body ({_summary(raw)})")
    try:
        api_version, kind, payload = _envelope(raw[len(MAGIC) :])
    except WireError as exc:
        raise BadRequest(f"{unrecognized}: {exc} ({_summary(raw)})") from exc
    if not kind:
        kind = resource.kind
    if not api_version:
        api_version = resource.group_version
    message = KIND_MESSAGES.get((api_version, kind))
    if message is None:  # another kind than the URL's: the caller refuses the mismatch as for JSON
        return {"apiVersion": api_version, "kind": kind}
    version = api_version.rsplit("/", 1)[-1]
    try:
        obj = decode_message(payload, message)
    except (ValueError, OverflowError, OSError) as exc:  # WireError, or a time out of range
        raise BadRequest(f'{kind} in version "{version}" cannot be handled as a {resource.kind}: {exc}') from exc
    return {"apiVersion": api_version, "kind": kind, **obj}


def _envelope(data: bytes) -> tuple[str, str, bytes]:
    """``runtime.Unknown``: ``(apiVersion, kind, raw)``."""
    api_version = kind = ""
    payload = b""
    for number, wire_type, value in iter_fields(data):
        if number == 1 and isinstance(value, bytes):
            for meta_number, _, meta_value in iter_fields(value):
                if isinstance(meta_value, bytes) and meta_number in (1, 2):
                    text = meta_value.decode("utf-8", "replace")
                    api_version, kind = (text, kind) if meta_number == 1 else (api_version, text)
        elif number == 2 and wire_type == LENGTH_DELIMITED and isinstance(value, bytes):
            payload = value
    return api_version, kind, payload


def decode_message(data: bytes, message: str) -> dict[str, Any]:
    """One message of :data:`MESSAGES`, as Go's JSON encoder would write the struct it decodes to.

    Unknown field numbers are skipped (gogo-protobuf skips them: protobuf has no strict decoding), a
    known field with the wrong wire type is an error, and a repeated field collects its elements.
    """
    table = MESSAGES[message]
    obj: dict[str, Any] = {}
    for number, wire_type, value in iter_fields(data):
        spec = table.get(number)
        if spec is None:
            continue
        expected = VARINT if spec.type in ("int", "bool") else LENGTH_DELIMITED
        if wire_type != expected:
            raise WireError(f"proto: wrong wireType = {wire_type} for field {spec.name[:1].upper()}{spec.name[1:]}")
        if spec.type in ("string-map", "bytes-map"):
            assert isinstance(value, bytes)
            key, entry = _map_entry(value, spec)
            obj.setdefault(spec.name, {})[key] = entry
            continue
        decoded = _value(spec, value)
        if spec.repeated:
            obj.setdefault(spec.name, []).append(decoded)
        elif decoded is None or (spec.type != "message" and not spec.keep_zero and decoded in ("", 0, False)):
            obj.pop(spec.name, None)  # Go's zero value: omitted from JSON (a later one may set it again)
        else:
            obj[spec.name] = decoded
    return obj


def _value(spec: Field, value: int | bytes) -> Any:
    if spec.type == "int":
        assert isinstance(value, int)
        return as_signed64(value)
    if spec.type == "bool":
        return bool(value)
    assert isinstance(value, bytes)
    if spec.type == "string":
        return value.decode("utf-8", "replace")  # Go copies the bytes; its JSON encoder then replaces bad UTF-8
    if spec.type == "bytes":
        return base64.b64encode(value).decode()
    if spec.type == "time":
        return _time(value)
    return decode_message(value, spec.message)


def _time(data: bytes) -> str | None:
    """``metav1.Time``: an empty message is the zero time (``null``); otherwise whole seconds, since kube
    drops ``nanos`` on decode too."""
    if not data:
        return None
    seconds = 0
    for number, wire_type, value in iter_fields(data):
        if number == 1 and wire_type == VARINT and isinstance(value, int):
            seconds = as_signed64(value)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _map_entry(data: bytes, spec: Field) -> tuple[str, str]:
    """A map field's entry message: key 1, value 2 (absent ones are Go's zero values)."""
    key, value = "", b""
    for number, wire_type, item in iter_fields(data):
        if wire_type != LENGTH_DELIMITED or not isinstance(item, bytes):
            raise WireError(f"proto: wrong wireType = {wire_type} for field {spec.name}")
        if number == 1:
            key = item.decode("utf-8", "replace")
        elif number == 2:
            value = item
    if spec.type == "bytes-map":
        return key, base64.b64encode(value).decode()
    return key, value.decode("utf-8", "replace")
