"""Decoding against the official client's models: unknown fields, JSON types and timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.apiserver.schema import decode_fields


def claim(**exactly: Any) -> dict[str, Any]:
    return {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c", **exactly}}]}}}


def test_unknown_fields_are_removed_and_reported_with_kube_paths() -> None:
    obj = {"metadata": {"name": "x", "bogus": 1, "labels": {"any/key": "v"}}, **claim(extra=True), "top": 1}
    decoded = decode_fields("ResourceV1ResourceClaim", obj)
    assert decoded.unknown == ["metadata.bogus", "spec.devices.requests[0].exactly.extra", "top"]
    assert decoded.errors == []
    assert obj == {"metadata": {"name": "x", "labels": {"any/key": "v"}}, **claim()}


@pytest.mark.parametrize(
    ("exactly", "error"),
    [
        pytest.param(
            {"count": "1"},
            "json: cannot unmarshal string into Go struct field "
            "ResourceV1ResourceClaim.spec.devices.requests.exactly.count of type int64",
            id="string-for-integer",
        ),
        pytest.param({"count": True}, "cannot unmarshal bool", id="bool-for-integer"),
        pytest.param({"count": 1.5}, "cannot unmarshal number", id="float-for-integer"),
        pytest.param({"adminAccess": "true"}, "of type bool", id="string-for-bool"),
        pytest.param({"selectors": {"cel": {}}}, "cannot unmarshal object", id="map-for-list"),
        pytest.param({"deviceClassName": ["c"]}, "cannot unmarshal array", id="list-for-string"),
        pytest.param({"capacity": {"requests": ["1Gi"]}}, "cannot unmarshal array", id="list-for-map"),
    ],
)
def test_values_of_the_wrong_json_type_are_errors(exactly: dict[str, Any], error: str) -> None:
    decoded = decode_fields("ResourceV1ResourceClaim", claim(**exactly))
    assert len(decoded.errors) == 1
    assert error in decoded.errors[0]


def test_numbers_are_accepted_where_a_quantity_string_is_typed() -> None:
    obj = {
        "spec": {
            "driver": "d",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "a", "capacity": {"memory": {"value": 10}}}],
        }
    }
    assert decode_fields("V1ResourceSlice", obj).errors == []


@pytest.mark.parametrize(
    ("field", "sent", "stored"),
    [
        pytest.param("lastTransitionTime", "2026-03-04T05:06:07.891+01:00", "2026-03-04T04:06:07Z", id="time"),
        pytest.param("lastTransitionTime", "2026-03-04T04:06:07Z", "2026-03-04T04:06:07Z", id="time-canonical"),
    ],
)
def test_times_are_rendered_like_kube(field: str, sent: str, stored: str) -> None:
    obj = {"status": {"conditions": [{"type": "Ready", "status": "True", field: sent}]}}
    assert decode_fields("V1Pod", obj).errors == []
    assert obj["status"]["conditions"][0][field] == stored


def test_micro_times_keep_six_fraction_digits() -> None:
    obj = {"spec": {"holderIdentity": "me", "renewTime": "2026-01-01T00:00:00+00:00"}}
    decode_fields("V1Lease", obj)
    assert obj["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"


@pytest.mark.parametrize("sent", ["yesterday", "2026-01-01T00:00:00"], ids=["not-a-time", "no-time-zone"])
def test_bad_times_are_errors(sent: str) -> None:
    decoded = decode_fields("V1Lease", {"spec": {"renewTime": sent}})
    assert decoded.errors
    assert decoded.errors[0].startswith("spec.renewTime: parsing time")
