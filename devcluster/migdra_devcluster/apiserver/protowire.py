"""The protocol-buffers wire format: reading a message's fields and writing them, nothing more.

Two things here speak protobuf without a ``.proto`` compiled into Python: request bodies that typed
clients send as ``application/vnd.kubernetes.protobuf`` (``protobuf_body.py`` reads them through field
tables) and the OpenAPI v2 document kubectl asks for as protobuf (``gnostic.py`` writes it).  Both need
only the encoding rules of https://protobuf.dev/programming-guides/encoding/: varints, tags, and
length-delimited fields; this module owns exactly those and knows no message types.  It must never
grow a schema: which field number means what belongs to its callers.

A malformed input raises :class:`WireError` (a ``ValueError``), worded as gogo-protobuf words the same
failure, so callers can pass the text on to the client as kube-apiserver would.
"""

from __future__ import annotations

from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5
_MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (truncated, an overlong varint, a group)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = shift = 0
    for offset in range(_MAX_VARINT_BYTES):
        if pos + offset >= len(data):
            raise WireError("unexpected EOF")
        byte = data[pos + offset]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos + offset + 1
        shift += 7
    raise WireError("proto: integer overflow")


def as_signed64(value: int) -> int:
    """An ``int64``/``int32`` read as a varint: negatives arrive as their 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


def iter_fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Each field of a message in wire order: ``(field_number, wire_type, value)``.

    ``value`` is the integer of a varint or fixed field and the payload of a length-delimited one;
    repeated fields and map entries arrive once per element, as they are written.
    """
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number <= 0:
            raise WireError(f"proto: illegal tag {number} (wire type {wire_type})")
        if wire_type == VARINT:
            value, pos = read_varint(data, pos)
            yield number, wire_type, value
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
            if pos + size > len(data):
                raise WireError("unexpected EOF")
            yield number, wire_type, int.from_bytes(data[pos : pos + size], "little")
            pos += size
        elif wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(data, pos)
            if pos + length > len(data):
                raise WireError("unexpected EOF")
            yield number, wire_type, data[pos : pos + length]
            pos += length
        else:  # 3 and 4 are proto2 groups, which no Kubernetes message uses; 6 and 7 do not exist
            raise WireError(f"proto: illegal wireType {wire_type}")


def encode_varint(value: int) -> bytes:
    """``value`` as a varint; a negative one as its 64-bit two's complement (ten bytes), as Go writes it."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """A varint field (integers, booleans, enums)."""
    return encode_varint(number << 3 | VARINT) + encode_varint(value)


def bytes_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: a string's UTF-8, raw bytes, or an embedded message's encoding."""
    return encode_varint(number << 3 | LENGTH_DELIMITED) + encode_varint(len(payload)) + payload


def string_field(number: int, text: str) -> bytes:
    """A string field."""
    return bytes_field(number, text.encode())
