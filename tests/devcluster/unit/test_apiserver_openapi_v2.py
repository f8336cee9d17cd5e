"""``/openapi/v2``: the Swagger document kubectl validates ``kind: List`` items with, its gnostic protobuf
encoding, and kube-openapi's content negotiation."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from migdra_devcluster.apiserver.gnostic import encode_document, encode_schema
from migdra_devcluster.apiserver.openapi_v2 import JSON, PROTOBUF, OpenAPIV2, build_document
from migdra_devcluster.apiserver.protowire import iter_fields
from migdra_devcluster.apiserver.registry import Registry

DOCUMENT = build_document(Registry())
DEFINITIONS: dict[str, Any] = DOCUMENT["definitions"]


@pytest.mark.parametrize(
    ("accept", "answer"),
    [
        pytest.param("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", PROTOBUF, id="kubectl-1.37"),
        pytest.param("application/com.github.proto-openapi.spec.v2.v1.0+protobuf", PROTOBUF, id="new-spelling"),
        pytest.param("", JSON, id="no-accept-is-any"),
        pytest.param("*/*", JSON, id="wildcard"),
        pytest.param("application/*", JSON, id="subtype-wildcard"),
        pytest.param("application/json", JSON, id="json"),
        pytest.param(
            "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            PROTOBUF,
            id="quality-orders",
        ),
        pytest.param("text/html", None, id="nothing-served-406"),
        pytest.param("application/json;q=0", None, id="q0-refuses"),
    ],
)
def test_negotiation_follows_kube_openapi(accept: str, answer: str | None) -> None:
    assert OpenAPIV2.negotiate(accept) == answer


@pytest.mark.parametrize(
    ("name", "group", "kind"),
    [
        pytest.param("io.k8s.api.core.v1.ConfigMap", "", "ConfigMap", id="core"),
        pytest.param("io.k8s.api.core.v1.Secret", "", "Secret", id="secret"),
        pytest.param("io.k8s.api.rbac.v1.ClusterRole", "rbac.authorization.k8s.io", "ClusterRole", id="rbac"),
        pytest.param("io.k8s.api.resource.v1.ResourceClaim", "resource.k8s.io", "ResourceClaim", id="resource"),
        pytest.param("io.k8s.api.events.v1.Event", "events.k8s.io", "Event", id="events-v1"),
    ],
)
def test_served_kinds_are_named_as_kube_names_them_and_carry_their_gvk(name: str, group: str, kind: str) -> None:
    assert DEFINITIONS[name]["x-kubernetes-group-version-kind"] == [{"group": group, "version": "v1", "kind": kind}]
    assert "metadata" in DEFINITIONS[name]["properties"]


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["$ref"]] if "$ref" in schema else []
        return own + [ref for value in schema.values() for ref in _refs(value)]
    if isinstance(schema, list):
        return [ref for item in schema for ref in _refs(item)]
    return []


def test_every_reference_resolves_since_kubectl_refuses_a_dangling_one() -> None:
    refs = set(_refs(DEFINITIONS))
    assert refs, "the document has references"
    assert {ref.removeprefix("#/definitions/") for ref in refs} <= DEFINITIONS.keys()
    assert all(ref.startswith("#/definitions/") for ref in refs)


def test_untyped_client_fields_accept_any_value() -> None:
    """int-or-string (``targetPort: http``) must validate: a schema with ``type: object`` would not."""
    port = DEFINITIONS["V1ServicePort"]["properties"]
    assert "type" not in port["targetPort"]
    assert port["port"]["type"] == "integer"


def _message(data: bytes) -> dict[int, list[Any]]:
    fields: dict[int, list[Any]] = {}
    for number, _, value in iter_fields(data):
        fields.setdefault(number, []).append(value)
    return fields


def test_gnostic_encoding_carries_every_definition_in_order() -> None:
    document = _message(encode_document(DOCUMENT))
    assert document[1] == [b"2.0"]
    assert _message(document[2][0])[1] == [b"Kubernetes (migdra local API server)"]
    definitions = _message(document[9][0])[1]
    names = [_message(named)[1][0].decode() for named in definitions]
    assert names == list(DEFINITIONS)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"$ref": "#/definitions/x"}, {1: [b"#/definitions/x"]}, id="ref"),
        pytest.param(
            {"type": "string", "format": "date-time"}, {2: [b"date-time"], 22: [b"\x0a\x06string"]}, id="type"
        ),
        pytest.param({"required": ["a", "b"]}, {19: [b"a", b"b"]}, id="required"),
        pytest.param({"additionalProperties": True}, {21: [b"\x10\x01"]}, id="additional-boolean"),
        pytest.param({"items": {"type": "integer"}}, {23: [b"\x0a\x0c\xb2\x01\x09\x0a\x07integer"]}, id="items"),
    ],
)
def test_schema_fields_use_gnostic_numbers(schema: dict[str, Any], expected: dict[int, list[bytes]]) -> None:
    assert _message(encode_schema(schema)) == expected


def test_vendor_extensions_are_yaml_kubectl_reads_back() -> None:
    gvk = [{"group": "", "version": "v1", "kind": "ConfigMap"}]
    encoded = _message(encode_schema({"type": "object", "x-kubernetes-group-version-kind": gvk}))
    named = _message(encoded[31][0])
    assert named[1] == [b"x-kubernetes-group-version-kind"]
    assert yaml.safe_load(_message(named[2][0])[2][0]) == gvk


def test_a_schema_key_without_an_encoding_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="minimum"):
        encode_schema({"minimum": 1})
