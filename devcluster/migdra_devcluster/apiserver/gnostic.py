"""A Swagger 2.0 document as gnostic's ``openapi.v2.Document`` protobuf: what kubectl reads from ``/openapi/v2``.

kubectl asks for ``/openapi/v2`` only as ``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``
and unmarshals the answer with gnostic-models' ``openapiv2`` package, exactly as kube-apiserver's
kube-openapi handler produces it (``ToProtoBinary``: the JSON document parsed by gnostic, then
marshalled).  This module writes the same encoding from the JSON-shaped document, with the field
numbers of gnostic-models' public ``openapiv2/OpenAPIv2.proto`` (v0.7), for the parts this server's
document has: ``swagger``, ``info``, ``paths`` (empty) and ``definitions``, whose schemas use ``$ref``,
``type``, ``format``, ``description``, ``required``, ``items``, ``properties``, ``additionalProperties``
and ``x-`` vendor extensions (carried as YAML text, as gnostic carries them).  Any other key is a
programming error here, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from migdra_devcluster.apiserver.protowire import bytes_field, string_field, varint_field

# openapi.v2.Document
_DOCUMENT_SWAGGER, _DOCUMENT_INFO, _DOCUMENT_PATHS, _DOCUMENT_DEFINITIONS = 1, 2, 8, 9
# openapi.v2.Info
_INFO_TITLE, _INFO_VERSION = 1, 2
# openapi.v2.Schema
_SCHEMA_REF, _SCHEMA_FORMAT, _SCHEMA_DESCRIPTION, _SCHEMA_REQUIRED = 1, 2, 4, 19
_SCHEMA_ADDITIONAL_PROPERTIES, _SCHEMA_TYPE, _SCHEMA_ITEMS, _SCHEMA_PROPERTIES = 21, 22, 23, 25
_SCHEMA_VENDOR_EXTENSION = 31
# openapi.v2.AdditionalPropertiesItem (a oneof), TypeItem, ItemsItem, Properties/Definitions, NamedSchema
_ADDITIONAL_SCHEMA, _ADDITIONAL_BOOLEAN = 1, 2
_TYPE_VALUE = 1
_ITEMS_SCHEMA = 1
_NAMED_SCHEMAS = 1
_NAMED_NAME, _NAMED_VALUE = 1, 2
# openapi.v2.Any
_ANY_YAML = 2


def _named(name: str, value: bytes) -> bytes:
    """A ``NamedSchema`` or ``NamedAny``: both are name 1, value 2."""
    return string_field(_NAMED_NAME, name) + bytes_field(_NAMED_VALUE, value)


def encode_schema(schema: Mapping[str, Any]) -> bytes:
    """One ``openapi.v2.Schema``, its fields in field-number order as Go's marshaller writes them."""
    fields: list[tuple[int, bytes]] = []
    extensions: list[bytes] = []
    for key, value in schema.items():
        if key == "$ref":
            fields.append((_SCHEMA_REF, string_field(_SCHEMA_REF, value)))
        elif key == "format":
            fields.append((_SCHEMA_FORMAT, string_field(_SCHEMA_FORMAT, value)))
        elif key == "description":
            fields.append((_SCHEMA_DESCRIPTION, string_field(_SCHEMA_DESCRIPTION, value)))
        elif key == "required":
            fields.append((_SCHEMA_REQUIRED, b"".join(string_field(_SCHEMA_REQUIRED, name) for name in value)))
        elif key == "additionalProperties":
            item = (
                varint_field(_ADDITIONAL_BOOLEAN, int(value))
                if isinstance(value, bool)
                else bytes_field(_ADDITIONAL_SCHEMA, encode_schema(value))
            )
            fields.append((_SCHEMA_ADDITIONAL_PROPERTIES, bytes_field(_SCHEMA_ADDITIONAL_PROPERTIES, item)))
        elif key == "type":
            types = [value] if isinstance(value, str) else value
            item = b"".join(string_field(_TYPE_VALUE, t) for t in types)
            fields.append((_SCHEMA_TYPE, bytes_field(_SCHEMA_TYPE, item)))
        elif key == "items":
            item = bytes_field(_ITEMS_SCHEMA, encode_schema(value))
            fields.append((_SCHEMA_ITEMS, bytes_field(_SCHEMA_ITEMS, item)))
        elif key == "properties":
            named = b"".join(
                bytes_field(_NAMED_SCHEMAS, _named(name, encode_schema(sub))) for name, sub in value.items()
            )
            fields.append((_SCHEMA_PROPERTIES, bytes_field(_SCHEMA_PROPERTIES, named)))
        elif key.startswith("x-"):
            text = yaml.safe_dump(value, default_flow_style=False, sort_keys=False)
            extension = _named(key, string_field(_ANY_YAML, text))
            extensions.append(bytes_field(_SCHEMA_VENDOR_EXTENSION, extension))
        else:
            raise ValueError(f"no gnostic encoding for the schema key {key!r}")
    fields.sort(key=lambda field: field[0])
    return b"".join(encoded for _, encoded in fields) + b"".join(extensions)


def encode_document(document: Mapping[str, Any]) -> bytes:
    """The whole ``openapi.v2.Document``: ``swagger``, ``info`` (title, version), ``paths``, ``definitions``."""
    info = document["info"]
    encoded_info = string_field(_INFO_TITLE, info["title"]) + string_field(_INFO_VERSION, info["version"])
    if document.get("paths"):
        raise ValueError("no gnostic encoding for paths: the document served has none")
    definitions = b"".join(
        bytes_field(_NAMED_SCHEMAS, _named(name, encode_schema(schema)))
        for name, schema in document["definitions"].items()
    )
    return (
        string_field(_DOCUMENT_SWAGGER, document["swagger"])
        + bytes_field(_DOCUMENT_INFO, encoded_info)
        + bytes_field(_DOCUMENT_PATHS, b"")
        + bytes_field(_DOCUMENT_DEFINITIONS, definitions)
    )
