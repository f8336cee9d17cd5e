"""FieldError renders exactly like Kubernetes' field.Error, so kubectl users read kube's own text."""

from __future__ import annotations

import pytest

from dra_driver.tools.validation import FieldError, validate, validate_object_meta
from dra_driver.tools.validation.errors import RawValue, go_float, go_quote

LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


@pytest.mark.parametrize(
    ("error", "rendered"),
    [
        pytest.param(
            FieldError("spec.devices[0].name", "FieldValueInvalid", LABEL_MESSAGE, "Bad_Name"),
            f'spec.devices[0].name: Invalid value: "Bad_Name": {LABEL_MESSAGE}',
            id="invalid-string",
        ),
        pytest.param(FieldError("spec.driver", "FieldValueRequired"), "spec.driver: Required value", id="required"),
        pytest.param(
            FieldError("spec.devices", "FieldValueTooMany", "must have at most 128 items", 129),
            "spec.devices: Too many: 129: must have at most 128 items",
            id="too-many",
        ),
        pytest.param(
            FieldError("spec.x", "FieldValueTooLong", "may not be more than 64 bytes", "ignored"),
            "spec.x: Too long: may not be more than 64 bytes",
            id="too-long-hides-value",
        ),
        pytest.param(
            FieldError("spec.x", "FieldValueForbidden", "not allowed", "ignored"),
            "spec.x: Forbidden: not allowed",
            id="forbidden-hides-value",
        ),
        pytest.param(
            FieldError("spec.devices[1]", "FieldValueDuplicate", "", "x"),
            'spec.devices[1]: Duplicate value: "x"',
            id="duplicate",
        ),
        pytest.param(
            FieldError("status.devices[1]", "FieldValueDuplicate", "", RawValue("d/p/dev")),
            "status.devices[1]: Duplicate value: d/p/dev",
            id="duplicate-stringer-unquoted",
        ),
        pytest.param(
            FieldError("spec.r", "FieldValueInvalid", "bad", None), "spec.r: Invalid value: null: bad", id="nil"
        ),
        pytest.param(FieldError("spec.g", "FieldValueInvalid", "bad", -1), "spec.g: Invalid value: -1: bad", id="int"),
        pytest.param(
            FieldError("spec.a", "FieldValueInvalid", "bad", False), "spec.a: Invalid value: false: bad", id="bool"
        ),
        pytest.param(
            FieldError("spec.p", "FieldValueInvalid", "bad", {"b": [1], "a": "x"}),
            'spec.p: Invalid value: {"a":"x","b":[1]}: bad',
            id="object-as-json",
        ),
        pytest.param(FieldError("spec.v", "FieldValueInvalid", "", "x"), 'spec.v: Invalid value: "x"', id="no-message"),
    ],
)
def test_detail_renders_like_kubernetes(error: FieldError, rendered: str) -> None:
    assert error.detail() == rendered


def test_cause_carries_the_body_without_the_field() -> None:
    error = FieldError("spec.driver", "FieldValueRequired")
    assert error.as_cause() == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.driver"}


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        pytest.param("plain", '"plain"', id="plain"),
        pytest.param('say "hi"\\', '"say \\"hi\\"\\\\"', id="quote-and-backslash"),
        pytest.param("a\nb\tc", '"a\\nb\\tc"', id="control-escapes"),
        pytest.param("\x01\x7f", '"\\x01\\x7f"', id="other-control"),
        pytest.param("grüße", '"grüße"', id="printable-unicode-kept"),
        pytest.param("a\u200bb", '"a\\u200bb"', id="format-char-escaped"),
    ],
)
def test_strings_are_quoted_like_go(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(
    ("number", "shown"),
    [
        (1.5, "1.5"),
        (100.0, "100"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5e-7, "-2.5e-07"),
        (0.0, "0"),
    ],
    ids=str,
)
def test_floats_are_shown_like_go_percent_v(number: float, shown: str) -> None:
    assert go_float(number) == shown


def _slice(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "driver": "gpu.migdra.io",
        "pool": {"name": "node-a", "generation": 0, "resourceSliceCount": 1},
        "nodeName": "node-a",
    }
    return {"metadata": {"name": "s"}, "spec": base | spec}


@pytest.mark.parametrize(
    ("obj", "old", "rendered"),
    [
        pytest.param(
            _slice(devices=[{"name": "Bad_Name"}]),
            None,
            f'spec.devices[0].name: Invalid value: "Bad_Name": {LABEL_MESSAGE}',
            id="device-name",
        ),
        pytest.param(_slice(driver=""), None, "spec.driver: Required value", id="driver-required"),
        pytest.param(
            _slice(devices=[{"name": f"d{i}"} for i in range(129)]),
            None,
            "spec.devices: Too many: 129: must have at most 128 items",
            id="devices-too-many",
        ),
        pytest.param(
            _slice(nodeName="b"),
            _slice(nodeName="a"),
            'spec.nodeName: Invalid value: "b": field is immutable',
            id="immutable",
        ),
        pytest.param(
            _slice(devices=[{"name": "x"}, {"name": "x"}]),
            None,
            'spec.devices[1]: Duplicate value: "x"',
            id="duplicate-at-index-as-kube-does",
        ),
        pytest.param(
            _slice(devices=[{"name": "d", "attributes": {"gpu.migdra.io/profile": {"string": "x" * 65}}}]),
            None,
            "spec.devices[0].attributes[gpu.migdra.io/profile].string: Too long: may not be more than 64 bytes",
            id="attribute-too-long",
        ),
        pytest.param(
            _slice(allNodes=False),
            None,
            "spec.allNodes: Invalid value: false: must be either unset or set to true",
            id="bool-value",
        ),
        pytest.param(
            _slice(pool={"name": "node-a", "generation": -1, "resourceSliceCount": 1}),
            None,
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero",
            id="int-value",
        ),
    ],
)
def test_slice_errors_render_exactly(obj: dict[str, object], old: dict[str, object] | None, rendered: str) -> None:
    details = [error.detail() for error in validate("resource.k8s.io", "v1", "ResourceSlice", obj, old, None)]
    assert rendered in details


def test_claim_errors_render_exactly() -> None:
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}},
                    {"name": "b"},
                ]
            }
        }
    }
    details = [error.detail() for error in validate("resource.k8s.io", "v1", "ResourceClaim", claim, None, None)]
    assert details == [
        "spec.devices.requests[0].exactly.allocationMode: "
        'Unsupported value: "Some": supported values: "All", "ExactCount"',
        "spec.devices.requests[1]: Required value: exactly one of `exactly` or `firstAvailable` is required",
    ]


def test_forbidden_namespace_renders_exactly() -> None:
    errors = validate_object_meta({"metadata": {"name": "c", "namespace": "default"}}, False, "dns-subdomain")
    assert [error.detail() for error in errors] == ["metadata.namespace: Forbidden: not allowed on this type"]
