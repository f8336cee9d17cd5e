"""resource.k8s.io validation over HTTP: the official client gets kube's 422 with ``details.causes``.

The rules themselves are tested as unit calls in ``tests/unit/test_validation_kinds.py``; this module
sends a representative failing case of each rule family through ``ResourceV1Api`` against a
:class:`LocalAPIServer`, so the wiring (create, update, the ``status`` subresource, decoding, the Status
body) is covered for each.  The bad objects are the unit tests' own cases, looked up by their ids.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

import tests.unit.test_validation_kinds as unit
from migdra_devcluster.apiserver import LocalAPIServer

NAMESPACE: Final = "default"
_names = itertools.count()


@pytest.fixture  # per test: a server per test keeps every thread inside its test
def resource(api_server: LocalAPIServer) -> Iterator[client.ResourceV1Api]:
    with client.ApiClient(client.Configuration(host=api_server.url)) as api_client:
        yield client.ResourceV1Api(api_client)


def _cases(params: Sequence[Any], *ids: str) -> list[Any]:
    """The unit cases named by ``ids`` (all of them must exist), each as ``pytest.param(case, id=id)``."""
    by_id = {param.id: param.values[0] for param in params}
    return [pytest.param(by_id[case_id], id=case_id) for case_id in ids]


def _as_client_sends(value: Any, key: str = "") -> Any:
    """``value`` in the shape the v37 client's models accept before sending anything.

    The client checks bodies against its pydantic models: a Quantity must be a JSON string (kube also
    takes a number, and the unit objects use one), and a Condition needs ``message``.
    """
    if isinstance(value, dict):
        converted = {name: _as_client_sends(item, name) for name, item in value.items()}
        if isinstance(converted.get("value"), int) and not isinstance(converted["value"], bool):
            converted["value"] = str(converted["value"])
        return converted
    if isinstance(value, list):
        items = [_as_client_sends(item) for item in value]
        if key == "conditions":
            items = [{"message": "", **item} if isinstance(item, dict) else item for item in items]
        return items
    return value


def _body(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as a request body with a fresh name, so that cases never meet in the shared server."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": kind, **_as_client_sends(obj)}
    body["metadata"] = {**obj.get("metadata", {}), "name": f"case-{next(_names)}"}
    if kind in {"ResourceClaim", "ResourceClaimTemplate"}:
        body["metadata"]["namespace"] = NAMESPACE
    else:
        body["metadata"].pop("namespace", None)
    return body


def _create(resource: client.ResourceV1Api, kind: str, body: dict[str, Any]) -> Any:
    creators: dict[str, Callable[[], Any]] = {
        "ResourceSlice": lambda: resource.create_resource_slice(body),
        "DeviceClass": lambda: resource.create_device_class(body),
        "ResourceClaim": lambda: resource.create_namespaced_resource_claim(NAMESPACE, body),
        "ResourceClaimTemplate": lambda: resource.create_namespaced_resource_claim_template(NAMESPACE, body),
    }
    return creators[kind]()


def _refused(write: Callable[[], Any]) -> list[dict[str, str]]:
    """The causes of the 422 ``Invalid`` Status that ``write`` must get."""
    with pytest.raises(ApiException) as info:
        write()
    assert info.value.status == 422, info.value.body
    status = json.loads(info.value.body)
    assert (status["kind"], status["status"], status["reason"], status["code"]) == ("Status", "Failure", "Invalid", 422)
    causes: list[dict[str, str]] = status["details"]["causes"]
    assert causes, status
    return causes


def _assert_causes(causes: list[dict[str, str]], case: unit.Case, prefix: str = "") -> None:
    """The case's error is among the causes (field, reason, message) and nothing else is wrong."""
    field = prefix + case.field
    rendered = [f"{c['reason']} {c['field']}: {c['message']}" for c in causes]
    hits = [
        c
        for c in causes
        if c["field"] == field and c["reason"] == case.reason and case.fragment in f"{c['field']}: {c['message']}"
    ]
    assert hits, f"expected {case.reason} at {field} containing {case.fragment!r}, got:\n" + "\n".join(rendered)
    allowed = {field, *(prefix + other for other in case.also)}
    strays = [c for c in causes if c["field"] not in allowed]
    assert not strays, "unexpected causes:\n" + "\n".join(rendered)


# --- create: one case per rule family --------------------------------------------------------------------------------

CREATE_CASES = [
    *(
        pytest.param("ResourceSlice", unit.DEVICE_SLICE, *param.values, id=f"slice-{param.id}")
        for param in _cases(
            unit.SLICE_CASES,
            "driver-lower-case",  # names
            "device-name",
            "pool-name-segments",  # pool fields
            "pool-slice-count",
            "attribute-name-identifier",  # qualified names
            "attribute-two-values",  # one value type
            "attributes-and-capacities-32",
            "devices-128",
            "devices-64-with-taints",
            "devices-64-with-counters",
            "devices-xor-shared-counters",
            "consumes-counters-2",
            "node-selection-one-of",  # one node-selection field
            "node-selection-required",
        )
    ),
    *(
        pytest.param("ResourceSlice", unit.COUNTER_SLICE, *param.values, id=f"counter-slice-{param.id}")
        for param in _cases(unit.COUNTER_SLICE_CASES, "counter-sets-8", "counters-32")
    ),
    *(
        pytest.param("ResourceClaim", unit.CLAIM, *param.values, id=f"claim-{param.id}")
        for param in _cases(
            unit.CLAIM_CASES,
            "exactly-and-first-available",
            "exactly-or-first-available",
            "count-positive",  # counts
            "count-with-all",
            "requests-32",
            "expression-10k",  # selector length
            "expression-syntax",  # CEL compiled at admission
            "expression-not-bool",
            "subrequest-expression-compiles",
        )
    ),
    *(
        pytest.param("DeviceClass", unit.DEVICE_CLASS, *param.values, id=f"class-{param.id}")
        for param in _cases(unit.CLASS_CASES, "selectors-32", "expression-compiles", "expression-too-complex")
    ),
]


@pytest.mark.parametrize(("kind", "base", "case"), CREATE_CASES)
def test_create_is_refused_with_the_field(
    resource: client.ResourceV1Api, kind: str, base: dict[str, Any], case: unit.Case
) -> None:
    body = _body(kind, unit.changed(base, case.path, case.value))
    _assert_causes(_refused(lambda: _create(resource, kind, body)), case)


@pytest.mark.parametrize(
    "case", _cases(unit.CLAIM_CASES, "exactly-or-first-available", "count-positive", "expression-undeclared")
)
def test_template_create_applies_the_claim_rules_under_spec_spec(
    resource: client.ResourceV1Api, case: unit.Case
) -> None:
    body = _body("ResourceClaimTemplate", unit.changed(unit.TEMPLATE, "spec." + case.path, case.value))
    _assert_causes(_refused(lambda: _create(resource, "ResourceClaimTemplate", body)), case, prefix="spec.")


def test_valid_objects_are_created(resource: client.ResourceV1Api) -> None:
    for kind, obj in [
        ("ResourceSlice", unit.DEVICE_SLICE),
        ("ResourceSlice", unit.COUNTER_SLICE),
        ("ResourceClaim", unit.CLAIM),
        ("ResourceClaimTemplate", unit.TEMPLATE),
        ("DeviceClass", unit.DEVICE_CLASS),
    ]:
        _create(resource, kind, _body(kind, obj))


# --- the status subresource -----------------------------------------------------------------------------------------


def _claim_with_status(resource: client.ResourceV1Api, status_of: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new claim (``unit.CLAIM``), with ``status_of``'s status written through ``/status`` when given."""
    body = _body("ResourceClaim", unit.CLAIM)
    created = resource.create_namespaced_resource_claim(NAMESPACE, body)
    stored: dict[str, Any] = resource.api_client.sanitize_for_serialization(created)
    if status_of is not None:
        stored["status"] = _as_client_sends(status_of["status"])
        written = resource.replace_namespaced_resource_claim_status(stored["metadata"]["name"], NAMESPACE, stored)
        stored = resource.api_client.sanitize_for_serialization(written)
    return stored


@pytest.mark.parametrize(
    "case",
    _cases(
        unit.STATUS_CASES,
        "data-10k",  # status.devices data at most 10 KiB
        "conditions-8",
        "device-status-not-allocated",  # status invariants
        "device-status-same-share",
        "reserved-for-needs-allocation",
        "reserved-for-name-required",
        "reserved-for-unique-uid",
        "result-request",
    ),
)
def test_status_write_is_refused_with_the_field(resource: client.ResourceV1Api, case: unit.Case) -> None:
    stored = _claim_with_status(resource)
    bad = _as_client_sends(unit.changed(unit.ALLOCATED_CLAIM, case.path, case.value))
    body = {**stored, "status": bad.get("status", {})}
    name = stored["metadata"]["name"]
    _assert_causes(_refused(lambda: resource.replace_namespaced_resource_claim_status(name, NAMESPACE, body)), case)


def test_allocation_cannot_change_or_go_while_reserved(resource: client.ResourceV1Api) -> None:
    stored = _claim_with_status(resource, unit.ALLOCATED_CLAIM)
    name = stored["metadata"]["name"]

    changed = unit.changed(stored, "status.allocation.devices.results[1].device", "gpu-2")
    causes = _refused(lambda: resource.replace_namespaced_resource_claim_status(name, NAMESPACE, changed))
    assert [(c["field"], c["reason"]) for c in causes] == [("status.allocation", "FieldValueInvalid")]
    assert causes[0]["message"].endswith(": field is immutable")

    cleared = unit.changed(unit.changed(stored, "status.allocation", unit.DELETE), "status.devices", unit.DELETE)
    causes = _refused(lambda: resource.replace_namespaced_resource_claim_status(name, NAMESPACE, cleared))
    assert [(c["field"], c["reason"]) for c in causes] == [("status.reservedFor", "FieldValueForbidden")]

    released = resource.patch_namespaced_resource_claim_status(
        name, NAMESPACE, {"status": {"allocation": None, "devices": None, "reservedFor": None}}
    )
    assert released.status is None or released.status.allocation is None


def test_a_claim_being_deleted_takes_no_new_consumers(resource: client.ResourceV1Api) -> None:
    stored = _claim_with_status(resource, unit.ALLOCATED_CLAIM)
    name = stored["metadata"]["name"]
    resource.patch_namespaced_resource_claim(name, NAMESPACE, {"metadata": {"finalizers": ["migdra.dev/hold"]}})
    resource.delete_namespaced_resource_claim(name, NAMESPACE)
    consumer = {"resource": "pods", "name": "train-1", "uid": "6f1c2a3e-0000-4000-8000-000000000002"}
    reserved = stored["status"]["reservedFor"]
    causes = _refused(
        lambda: resource.patch_namespaced_resource_claim_status(
            name, NAMESPACE, {"status": {"reservedFor": [*reserved, consumer]}}
        )
    )
    assert [(c["field"], c["reason"]) for c in causes] == [("status.reservedFor", "FieldValueForbidden")]
    released = resource.patch_namespaced_resource_claim_status(name, NAMESPACE, {"status": {"reservedFor": None}})
    assert not released.status.reserved_for, "consumers may still go"
    resource.patch_namespaced_resource_claim(name, NAMESPACE, {"metadata": {"finalizers": None}})


# --- updates of immutable fields ------------------------------------------------------------------------------------


def test_slice_identity_is_immutable(resource: client.ResourceV1Api) -> None:
    body = _body("ResourceSlice", unit.DEVICE_SLICE)
    resource.create_resource_slice(body)
    moved = unit.changed(body, "spec.driver", "other.migdra.io")
    causes = _refused(lambda: resource.replace_resource_slice(body["metadata"]["name"], moved))
    assert [(c["field"], c["reason"], c["message"]) for c in causes] == [
        ("spec.driver", "FieldValueInvalid", 'Invalid value: "other.migdra.io": field is immutable')
    ]


def test_claim_spec_is_immutable(resource: client.ResourceV1Api) -> None:
    stored = _claim_with_status(resource)
    name = stored["metadata"]["name"]
    patch = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "other"}}]}}}
    causes = _refused(lambda: resource.patch_namespaced_resource_claim(name, NAMESPACE, patch))
    assert [(c["field"], c["reason"]) for c in causes] == [("spec", "FieldValueInvalid")]
    assert causes[0]["message"].endswith(": field is immutable")
