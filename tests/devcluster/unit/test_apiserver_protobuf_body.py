"""Reading kube's protobuf request bodies: bytes kubectl 1.37 really sent, and hand-built edge cases.

The ``KUBECTL_BODIES`` were captured from ``kubectl create ...`` (typed clients send
``application/vnd.kubernetes.protobuf``); each must decode to the object kubectl would have sent as JSON.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from migdra_devcluster.apiserver.errors import BadRequest
from migdra_devcluster.apiserver.protobuf_body import MAGIC, accepted_media_types, decode_object, decodes
from migdra_devcluster.apiserver.protowire import (
    WireError,
    as_signed64,
    bytes_field,
    encode_varint,
    iter_fields,
    read_varint,
    string_field,
    varint_field,
)
from migdra_devcluster.apiserver.registry import Registry, ResourceType

REGISTRY = Registry()
RBAC = "rbac.authorization.k8s.io"


def resource(group: str, plural: str) -> ResourceType:
    found = REGISTRY.lookup(group, "v1", plural)
    assert found is not None
    return found


KUBECTL_BODIES = [
    pytest.param(
        "namespaces",
        "",
        "6b3873000a0f0a02763112094e616d657370616365121e0a160a067465616d2d6112001a0022002a0032003800420012001a020a00"
        "1a002200",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}, "spec": {}, "status": {}},
        id="create-namespace",
    ),
    pytest.param(
        "configmaps",
        "",
        "6b3873000a0f0a0276311209436f6e6669674d617012360a180a0873657474696e677312001a0022002a00320038004200120c0a"
        "046d6f64651204666173741a0c0a04626c6f621204000102ff1a002200",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings"},
            "data": {"mode": "fast"},
            "binaryData": {"blob": base64.b64encode(bytes([0, 1, 2, 255])).decode()},
        },
        id="create-configmap-literal-and-binary-file",
    ),
    pytest.param(
        "secrets",
        "",
        "6b3873000a0c0a027631120653656372657412440a150a05637265647312001a0022002a0032003800420012090a05656d707479"
        "1200120d0a0475736572120561646d696e1a116578616d706c652e636f6d2f62617369631a002200",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "data": {"empty": "", "user": "YWRtaW4="},
            "type": "example.com/basic",
        },
        id="create-secret-generic",
    ),
    pytest.param(
        "serviceaccounts",
        "",
        "6b3873000a140a027631120e536572766963654163636f756e7412190a170a076275696c64657212001a0022002a003200380042"
        "001a002200",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}},
        id="create-serviceaccount",
    ),
    pytest.param(
        "clusterroles",
        RBAC,
        "6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b436c7573746572526f6c65124c0a"
        "1a0a0a6167677265676174656412001a0022002a003200380042001a2e0a2c0a2a0a22726261632e6578616d706c652e636f6d2f"
        "6167677265676174652d746f2d766965771204747275651a002200",
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "aggregated"},
            "aggregationRule": {
                "clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-view": "true"}}]
            },
        },
        id="create-clusterrole-aggregation-rule",
    ),
    pytest.param(
        "rolebindings",
        RBAC,
        "6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b526f6c6542696e64696e67129b01"
        "0a170a077265616465727312001a0022002a00320038004200122a0a04557365721219726261632e617574686f72697a6174696f"
        "6e2e6b38732e696f1a05616c696365220012240a0e536572766963654163636f756e7412001a076275696c646572220764656661"
        "756c741a2e0a19726261632e617574686f72697a6174696f6e2e6b38732e696f120b436c7573746572526f6c651a04766965771a"
        "002200",
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "readers"},
            "subjects": [
                {"kind": "User", "apiGroup": RBAC, "name": "alice"},
                {"kind": "ServiceAccount", "name": "builder", "namespace": "default"},
            ],
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
        },
        id="create-rolebinding-user-and-serviceaccount",
    ),
]


@pytest.mark.parametrize(("plural", "group", "body_hex", "expected"), KUBECTL_BODIES)
def test_kubectl_create_bodies_decode_to_the_json_object(
    plural: str, group: str, body_hex: str, expected: dict[str, Any]
) -> None:
    assert decode_object(bytes.fromhex(body_hex), resource(group, plural)) == expected


def envelope(raw: bytes, api_version: str = "v1", kind: str = "Namespace") -> bytes:
    """A ``runtime.Unknown`` around ``raw``, as client-go writes it."""
    type_meta = string_field(1, api_version) + string_field(2, kind)
    return MAGIC + bytes_field(1, type_meta) + bytes_field(2, raw) + string_field(3, "") + string_field(4, "")


def metadata(*fields: bytes) -> bytes:
    return bytes_field(1, b"".join(fields))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            metadata(string_field(1, "a"), varint_field(10, -1)),
            {"metadata": {"name": "a", "deletionGracePeriodSeconds": -1}},
            id="negative-int64-is-twos-complement",
        ),
        pytest.param(
            metadata(string_field(1, "a"), varint_field(10, 0), varint_field(7, 0)),
            {"metadata": {"name": "a", "deletionGracePeriodSeconds": 0}},
            id="pointer-zero-kept-plain-zero-dropped",
        ),
        pytest.param(
            metadata(bytes_field(8, varint_field(1, 1767225600) + varint_field(2, 5)), bytes_field(9, b"")),
            {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}},
            id="time-whole-seconds-and-empty-time-is-null",
        ),
        pytest.param(
            metadata(
                bytes_field(11, string_field(1, "k") + string_field(2, "")),
                bytes_field(11, string_field(1, "j")),
                bytes_field(14, b"f1"),
                bytes_field(14, b""),
            ),
            {"metadata": {"labels": {"k": "", "j": ""}, "finalizers": ["f1", ""]}},
            id="map-values-and-list-items-keep-empty-strings",
        ),
        pytest.param(
            metadata(string_field(1, "a"), string_field(99, "future"), varint_field(98, 7)),
            {"metadata": {"name": "a"}},
            id="unknown-fields-skipped",
        ),
        pytest.param(
            metadata(bytes_field(13, string_field(1, "Pod") + string_field(3, "p") + varint_field(6, 0))),
            {"metadata": {"ownerReferences": [{"kind": "Pod", "name": "p", "controller": False}]}},
            id="owner-reference-bool-pointer-false-kept",
        ),
        pytest.param(
            metadata(string_field(1, "\u00e9t\u00e9")) + bytes_field(2, bytes_field(1, b"kubernetes")),
            {"metadata": {"name": "\u00e9t\u00e9"}, "spec": {"finalizers": ["kubernetes"]}},
            id="utf8-and-nested-message",
        ),
    ],
)
def test_namespace_fields(raw: bytes, expected: dict[str, Any]) -> None:
    assert decode_object(envelope(raw), resource("", "namespaces")) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        **expected,
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(varint_field(4, 0), {"immutable": False}, id="configmap-immutable-false-kept"),
        pytest.param(varint_field(4, 1), {"immutable": True}, id="configmap-immutable-true"),
    ],
)
def test_configmap_pointer_bools(raw: bytes, expected: dict[str, Any]) -> None:
    decoded = decode_object(envelope(raw, kind="ConfigMap"), resource("", "configmaps"))
    assert decoded == {"apiVersion": "v1", "kind": "ConfigMap", **expected}


def test_empty_type_meta_is_defaulted_from_the_url() -> None:
    body = MAGIC + bytes_field(1, b"") + bytes_field(2, metadata(string_field(1, "x")))
    assert decode_object(body, resource("", "serviceaccounts")) == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "x"},
    }


def test_another_kind_keeps_only_its_type_for_the_mismatch_error() -> None:
    assert decode_object(envelope(b"", kind="Pod"), resource("", "namespaces")) == {"apiVersion": "v1", "kind": "Pod"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            b'{"kind":"Namespace"}',
            "the object provided is unrecognized (must be of type Namespace): provided data does not appear to be "
            "a protobuf message, expected prefix [107 56 115 0] (7b226b696e64223a224e616d657370616365227d)",
            id="json-sent-as-protobuf",
        ),
        pytest.param(
            MAGIC,
            "the object provided is unrecognized (must be of type Namespace): empty body (6b387300)",
            id="magic-only",
        ),
        pytest.param(
            MAGIC + b"\x0a\x05ab",
            "the object provided is unrecognized (must be of type Namespace): unexpected EOF (6b3873000a056162)",
            id="truncated-envelope",
        ),
        pytest.param(
            envelope(metadata(varint_field(1, 3))),
            'Namespace in version "v1" cannot be handled as a Namespace: proto: wrong wireType = 0 for field Name',
            id="wrong-wire-type",
        ),
        pytest.param(
            envelope(b"\x0f"),
            'Namespace in version "v1" cannot be handled as a Namespace: proto: illegal wireType 7',
            id="illegal-wire-type",
        ),
    ],
)
def test_malformed_bodies_are_400_in_kubes_words(body: bytes, message: str) -> None:
    with pytest.raises(BadRequest) as raised:
        decode_object(body, resource("", "namespaces"))
    assert raised.value.message == message


@pytest.mark.parametrize(
    ("group", "plural", "decoded"),
    [
        pytest.param("", "namespaces", True, id="namespaces"),
        pytest.param("", "secrets", True, id="secrets"),
        pytest.param(RBAC, "clusterrolebindings", True, id="clusterrolebindings"),
        pytest.param("", "pods", False, id="pods"),
        pytest.param("apps", "deployments", False, id="deployments"),
        pytest.param("resource.k8s.io", "resourceclaims", False, id="resourceclaims"),
    ],
)
def test_which_kinds_accept_protobuf(group: str, plural: str, decoded: bool) -> None:
    r = resource(group, plural)
    assert decodes(r) is decoded
    assert ("application/vnd.kubernetes.protobuf" in accepted_media_types(r)) is decoded
    assert accepted_media_types(r)[:2] == ["application/json", "application/yaml"]


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        pytest.param(0, "00", id="zero"),
        pytest.param(1, "01", id="one"),
        pytest.param(300, "ac02", id="two-bytes"),
        pytest.param(-1, "ffffffffffffffffff01", id="minus-one-ten-bytes"),
    ],
)
def test_varints(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    read, end = read_varint(bytes.fromhex(encoded), 0)
    assert (as_signed64(read), end) == (value, len(encoded) // 2)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(b"\x80", "unexpected EOF", id="varint-cut"),
        pytest.param(b"\x08" + b"\xff" * 10 + b"\x01", "proto: integer overflow", id="varint-too-long"),
        pytest.param(b"\x0a\x02a", "unexpected EOF", id="bytes-cut"),
        pytest.param(b"\x09\x00", "unexpected EOF", id="fixed64-cut"),
        pytest.param(b"\x0b", "proto: illegal wireType 3", id="group"),
        pytest.param(b"\x00", "proto: illegal tag 0 (wire type 0)", id="field-zero"),
    ],
)
def test_wire_errors(data: bytes, error: str) -> None:
    with pytest.raises(WireError) as raised:
        list(iter_fields(data))
    assert str(raised.value) == error
