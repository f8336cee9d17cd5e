"""The local API server answers as kube-apiserver does: one corpus of requests, each sent to the real
kube-apiserver (``make kube``) and to :class:`LocalAPIServer`, their answers compared.

What is compared (:func:`digest`): the status code; for a ``Status``, its ``reason``, ``message`` and
the ``field``/``reason``/``message`` of each of ``details.causes``; for an object, its kind, name,
labels and generation; for a list, the names of its items; for a watch, each event's type and object
name; for ``kubectl``, its exit status, its output and the object it made.  What legitimately differs
between two servers -- uids, resourceVersions, timestamps -- is never compared.

Each case is one entry of :data:`CORPUS`.  A difference that is not fixed is listed in
docs/local-control-plane.md under "Known differences from kube-apiserver" with its slug; the case
names that slug and the part of the digest that differs, and the test then *expects* exactly that
difference: a new one fails it, and so does a listed one that has gone.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.devcluster.integration.test_apiserver_kubectl import kubectl_binary
from tests.kube.apiservers import Answer, ApiEndpoint, local_apiserver, real_apiserver

DOC = Path(__file__).resolve().parents[2] / "docs" / "local-control-plane.md"
NAMESPACE = "differential"
JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
GROUP = "/apis/resource.k8s.io/v1"
CLAIMS = f"{GROUP}/namespaces/{NAMESPACE}/resourceclaims"
TEMPLATES = f"{GROUP}/namespaces/{NAMESPACE}/resourceclaimtemplates"
SLICES = f"{GROUP}/resourceslices"
CLASSES = f"{GROUP}/deviceclasses"
WATCH_SECONDS = 2


@dataclass(frozen=True)
class Call:
    """One request.  ``<rv:N>`` in the path or body is the ``resourceVersion`` that the case's N-th
    ``given`` call answered with, on the server the call goes to."""

    method: str
    path: str
    body: Any = None
    content_type: str = JSON


@dataclass(frozen=True)
class Case:
    """A corpus entry: the calls that set the scene (answers must succeed on both servers; a case never
    relies on another's objects, as pytest-xdist may run them in different processes), then the
    compared call, a watch (``watch``: the path is watched for :data:`WATCH_SECONDS`) or a kubectl
    command (``kubectl``: the object it made is read back with ``call``).  ``differs``: the slug of a
    known difference and the digest keys in which the local server's answer differs."""

    id: str
    call: Call
    given: tuple[Call, ...] = ()
    watch: bool = False
    kubectl: tuple[str, ...] = ()
    differs: tuple[str, frozenset[str]] | None = None


def known(slug: str, *keys: str) -> tuple[str, frozenset[str]]:
    return slug, frozenset(keys)


# --- bodies ---------------------------------------------------------------------------------------------


def request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "mig.nvidia.com", **exactly}}


def claim(name: str, *requests: dict[str, Any], labels: dict[str, str] | None = None, **devices: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": list(requests or (request(),)), **devices}},
    }


def template(name: str, *requests: dict[str, Any], **spec_metadata: Any) -> dict[str, Any]:
    inner = claim(name, *requests)["spec"]
    inner = {"metadata": spec_metadata, "spec": inner} if spec_metadata else {"spec": inner}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        **{"spec": inner},
    }


def device_class(name: str, *expressions: str, **spec: Any) -> dict[str, Any]:
    selectors = [{"cel": {"expression": e}} for e in expressions]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors, **spec} if selectors else dict(spec),
    }


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def shared_device(
    name: str, allowMultipleAllocations: bool = True, memory_policy: bool = True, **policy: Any
) -> dict[str, Any]:
    """A shared GPU-instance device as migdra publishes it; ``policy`` overrides computeSlices' requestPolicy
    fields (None removes one).  kube-apiserver visits a map in Go's random order, so a case that breaks a
    rule of one capacity keeps the others valid (``memory_policy=False`` drops memory's policy)."""
    memory: dict[str, Any] = {"value": "40Gi"}
    if memory_policy:
        memory["requestPolicy"] = {"default": "0", "validValues": ["0"]}
    request_policy: dict[str, Any] = {"default": "1", "validValues": ["1", "2", "4"], **policy}
    return device(
        name,
        allowMultipleAllocations=allowMultipleAllocations,
        attributes={"shared": {"bool": True}, "profile": {"string": "4g.40gb"}},
        capacity={
            "computeSlices": {
                "value": "4",
                "requestPolicy": {k: v for k, v in request_policy.items() if v is not None},
            },
            "memory": memory,
        },
    )


def resource_slice(
    name: str,
    *devices: dict[str, Any],
    driver: str = "gpu.migdra.dev",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    selection: dict[str, Any] = (
        {} if any(k in spec for k in ("nodeName", "allNodes", "nodeSelector")) else {"nodeName": "node-1"}
    )
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            **selection,
            "devices": list(devices or (device("gpu-0"),)),
            **spec,
        },
    }


def with_rv(body: dict[str, Any], rv: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "resourceVersion": rv}}


def relabel(body: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "labels": labels}}


def status_of(name: str, status: dict[str, Any], rv: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if rv:
        metadata["resourceVersion"] = rv
    body = claim(name)
    return {**body, "metadata": metadata, "status": status}


ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.migdra.dev", "pool": "node-1", "device": "gpu-0"}],
    },
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    },
}
RESERVED = [{"resource": "pods", "name": "p", "uid": "0b5a0c0e-0000-4000-8000-000000000001"}]
LONG_CEL = 'device.driver == "' + "x" * 10 * 1024 + '"'


def post(path: str, body: Any, content_type: str = JSON) -> Call:
    return Call("POST", path, body, content_type)


def put(path: str, body: Any) -> Call:
    return Call("PUT", path, body)


def patch(path: str, body: Any, content_type: str) -> Call:
    return Call("PATCH", path, body, content_type)


def get(path: str) -> Call:
    return Call("GET", path)


CORPUS: tuple[Case, ...] = (
    # ResourceClaim: create
    Case("claim-create", post(CLAIMS, claim("c-create"))),
    Case("claim-create-exists", post(CLAIMS, claim("c-exists")), given=(post(CLAIMS, claim("c-exists")),)),
    Case("claim-bad-name", post(CLAIMS, claim("C_bad"))),
    Case("claim-name-too-long", post(CLAIMS, claim("c" * 254))),
    Case("claim-missing-namespace", post(f"{GROUP}/namespaces/nowhere/resourceclaims", claim("c-nowhere"))),
    Case("claim-no-requests", post(CLAIMS, {**claim("c-empty"), "spec": {"devices": {"requests": []}}})),
    Case("claim-duplicate-request-names", post(CLAIMS, claim("c-dup", request("a"), request("a")))),
    Case("claim-bad-request-name", post(CLAIMS, claim("c-badreq", request("Not_A_Label")))),
    Case(
        "claim-request-exactly-and-first-available",
        post(CLAIMS, claim("c-both", {**request(), "firstAvailable": [{"name": "s", "deviceClassName": "x"}]})),
    ),
    Case("claim-request-neither", post(CLAIMS, claim("c-neither", {"name": "gpu"}))),
    Case("claim-count-zero", post(CLAIMS, claim("c-count0", request(allocationMode="ExactCount", count=0)))),
    Case("claim-all-with-count", post(CLAIMS, claim("c-allcount", request(allocationMode="All", count=2)))),
    Case("claim-bad-allocation-mode", post(CLAIMS, claim("c-mode", request(allocationMode="Some")))),
    Case("claim-no-device-class", post(CLAIMS, claim("c-noclass", {"name": "gpu", "exactly": {}}))),
    Case("claim-too-many-requests", post(CLAIMS, claim("c-many", *(request(f"r{i}") for i in range(33))))),
    Case(
        "claim-cel-syntax-error",
        post(CLAIMS, claim("c-cel1", request(selectors=[{"cel": {"expression": "device.driver =="}}]))),
        differs=known("cel-syntax-errors", "message", "causes"),
    ),
    Case(
        "claim-cel-not-bool",
        post(CLAIMS, claim("c-cel2", request(selectors=[{"cel": {"expression": "device.driver"}}]))),
    ),
    Case(
        "claim-cel-undeclared", post(CLAIMS, claim("c-cel3", request(selectors=[{"cel": {"expression": "gpu == 1"}}])))
    ),
    Case(
        "claim-cel-empty",
        post(CLAIMS, claim("c-cel4", request(selectors=[{"cel": {"expression": ""}}]))),
        differs=known("cel-syntax-errors", "message", "causes"),
    ),
    Case("claim-cel-too-long", post(CLAIMS, claim("c-cel5", request(selectors=[{"cel": {"expression": LONG_CEL}}])))),
    Case(
        "claim-constraint-unknown-request",
        post(
            CLAIMS, claim("c-constraint", constraints=[{"requests": ["nope"], "matchAttribute": "gpu.migdra.dev/uuid"}])
        ),
    ),
    Case(
        "claim-constraint-unqualified-attribute",
        post(CLAIMS, claim("c-constraint2", constraints=[{"matchAttribute": "uuid"}])),
    ),
    Case(
        "claim-config-not-object",
        post(CLAIMS, claim("c-config", config=[{"opaque": {"driver": "gpu.migdra.dev", "parameters": [1]}}])),
    ),
    Case(
        "claim-toleration-bad-operator",
        post(CLAIMS, claim("c-tol", request(tolerations=[{"key": "k", "operator": "Near"}]))),
    ),
    Case(
        "claim-wrong-json-type",
        post(CLAIMS, claim("c-type", request(count="one"))),
        differs=known("go-decode-errors", "message"),
    ),
    Case("claim-unknown-field-strict", post(f"{CLAIMS}?fieldValidation=Strict", {**claim("c-strict"), "bogus": 1})),
    Case(
        "claim-kind-mismatch",
        post(CLAIMS, {**claim("c-kind"), "kind": "DeviceClass"}),
        differs=known("go-decode-errors", "message"),
    ),
    Case("claim-malformed-json", post(CLAIMS, b'{"apiVersion": '), differs=known("go-decode-errors", "message")),
    Case("claim-dry-run", post(f"{CLAIMS}?dryRun=All", claim("c-dry"))),
    # ResourceClaim: update and patch of the main resource
    Case(
        "claim-update-spec-immutable",
        put(f"{CLAIMS}/c-immutable", with_rv(claim("c-immutable", request(count=2)), "<rv:0>")),
        given=(post(CLAIMS, claim("c-immutable")),),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "claim-update-labels",
        put(f"{CLAIMS}/c-relabel", with_rv(relabel(claim("c-relabel"), tier="gold"), "<rv:0>")),
        given=(post(CLAIMS, claim("c-relabel")),),
    ),
    Case(
        "claim-update-stale",
        put(f"{CLAIMS}/c-stale", with_rv(relabel(claim("c-stale"), tier="gold"), "<rv:0>")),
        given=(post(CLAIMS, claim("c-stale")), patch(f"{CLAIMS}/c-stale", {"metadata": {"labels": {"a": "b"}}}, MERGE)),
    ),
    Case("claim-update-missing", put(f"{CLAIMS}/c-missing", claim("c-missing"))),
    Case(
        "claim-update-name-mismatch",
        put(f"{CLAIMS}/c-other", claim("c-mismatch")),
        given=(post(CLAIMS, claim("c-other")),),
    ),
    Case(
        "claim-merge-patch-labels",
        patch(f"{CLAIMS}/c-merge", {"metadata": {"labels": {"tier": "gold"}}}, MERGE),
        given=(post(CLAIMS, claim("c-merge")),),
    ),
    Case(
        "claim-merge-patch-spec",
        patch(f"{CLAIMS}/c-merge2", {"spec": {"devices": {"requests": [request(count=3)]}}}, MERGE),
        given=(post(CLAIMS, claim("c-merge2")),),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "claim-merge-patch-stale",
        patch(f"{CLAIMS}/c-merge3", {"metadata": {"resourceVersion": "<rv:0>", "labels": {"x": "y"}}}, MERGE),
        given=(
            post(CLAIMS, claim("c-merge3")),
            patch(f"{CLAIMS}/c-merge3", {"metadata": {"labels": {"a": "b"}}}, MERGE),
        ),
    ),
    Case(
        "claim-strategic-patch-labels",
        patch(f"{CLAIMS}/c-smp", {"metadata": {"labels": {"tier": "gold"}}}, STRATEGIC),
        given=(post(CLAIMS, claim("c-smp")),),
    ),
    Case(
        "claim-strategic-patch-bad-label",
        patch(f"{CLAIMS}/c-smp2", {"metadata": {"labels": {"tier": "-gold-"}}}, STRATEGIC),
        given=(post(CLAIMS, claim("c-smp2")),),
        differs=known("repeated-update-causes", "causes"),
    ),
    Case(
        "claim-json-patch-label",
        patch(f"{CLAIMS}/c-jp", [{"op": "add", "path": "/metadata/labels", "value": {"tier": "gold"}}], JSON_PATCH),
        given=(post(CLAIMS, claim("c-jp")),),
    ),
    Case(
        "claim-json-patch-test-fails",
        patch(f"{CLAIMS}/c-jp2", [{"op": "test", "path": "/metadata/name", "value": "other"}], JSON_PATCH),
        given=(post(CLAIMS, claim("c-jp2")),),
    ),
    Case(
        "claim-json-patch-missing-path",
        patch(f"{CLAIMS}/c-jp3", [{"op": "remove", "path": "/metadata/labels/nope"}], JSON_PATCH),
        given=(post(CLAIMS, claim("c-jp3")),),
    ),
    Case(
        "claim-json-patch-unknown-op",
        patch(f"{CLAIMS}/c-jp4", [{"op": "bogus", "path": "/metadata/name"}], JSON_PATCH),
        given=(post(CLAIMS, claim("c-jp4")),),
    ),
    Case(
        "claim-json-patch-not-a-list",
        patch(f"{CLAIMS}/c-jp5", {"op": "add"}, JSON_PATCH),
        given=(post(CLAIMS, claim("c-jp5")),),
    ),
    Case(
        "claim-strategic-patch-not-object",
        patch(f"{CLAIMS}/c-smp3", 7, STRATEGIC),
        given=(post(CLAIMS, claim("c-smp3")),),
    ),
    Case(
        "claim-patch-unsupported-type",
        patch(f"{CLAIMS}/c-ptype", {"metadata": {"labels": {"a": "b"}}}, "text/plain"),
        given=(post(CLAIMS, claim("c-ptype")),),
    ),
    Case(
        "claim-merge-patch-not-object",
        patch(f"{CLAIMS}/c-pbad", "not an object", MERGE),
        given=(post(CLAIMS, claim("c-pbad")),),
    ),
    Case("claim-patch-missing", patch(f"{CLAIMS}/c-nopatch", {"metadata": {"labels": {"a": "b"}}}, MERGE)),
    Case(
        "claim-main-write-keeps-status",
        put(
            f"{CLAIMS}/c-mainstatus", with_rv({**claim("c-mainstatus"), "status": {"allocation": ALLOCATION}}, "<rv:0>")
        ),
        given=(post(CLAIMS, claim("c-mainstatus")),),
    ),
    # ResourceClaim: status
    Case(
        "claim-status-reserved-without-allocation",
        put(f"{CLAIMS}/c-st1/status", status_of("c-st1", {"reservedFor": RESERVED})),
        given=(post(CLAIMS, claim("c-st1")),),
    ),
    Case(
        "claim-status-allocate",
        put(f"{CLAIMS}/c-st2/status", status_of("c-st2", {"allocation": ALLOCATION, "reservedFor": RESERVED})),
        given=(post(CLAIMS, claim("c-st2")),),
    ),
    Case(
        "claim-status-allocation-unknown-request",
        put(
            f"{CLAIMS}/c-st3/status",
            status_of(
                "c-st3",
                {
                    "allocation": {
                        **ALLOCATION,
                        "devices": {"results": [{**ALLOCATION["devices"]["results"][0], "request": "nope"}]},
                    }
                },
            ),  # type: ignore[index]
        ),
        given=(post(CLAIMS, claim("c-st3")),),
    ),
    Case(
        "claim-status-allocation-immutable",
        patch(
            f"{CLAIMS}/c-st4/status",
            {
                "status": {
                    "allocation": {"devices": {"results": [{**ALLOCATION["devices"]["results"][0], "device": "gpu-1"}]}}
                }
            },  # type: ignore[index]
            MERGE,
        ),
        given=(
            post(CLAIMS, claim("c-st4")),
            patch(f"{CLAIMS}/c-st4/status", {"status": {"allocation": ALLOCATION}}, MERGE),
        ),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "claim-status-device-not-allocated",
        put(
            f"{CLAIMS}/c-st5/status",
            status_of(
                "c-st5",
                {
                    "allocation": ALLOCATION,
                    "devices": [{"driver": "gpu.migdra.dev", "pool": "node-1", "device": "gpu-9"}],
                },
            ),
        ),
        given=(post(CLAIMS, claim("c-st5")),),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "claim-status-stale",
        put(f"{CLAIMS}/c-st6/status", status_of("c-st6", {"allocation": ALLOCATION}, "<rv:0>")),
        given=(post(CLAIMS, claim("c-st6")), patch(f"{CLAIMS}/c-st6", {"metadata": {"labels": {"a": "b"}}}, MERGE)),
    ),
    Case(
        "claim-status-json-patch-reserve",
        patch(f"{CLAIMS}/c-st7/status", [{"op": "add", "path": "/status/reservedFor", "value": RESERVED}], JSON_PATCH),
        given=(
            post(CLAIMS, claim("c-st7")),
            patch(f"{CLAIMS}/c-st7/status", {"status": {"allocation": ALLOCATION}}, MERGE),
        ),
    ),
    Case(
        "claim-status-strategic-patch-reserve-unallocated",
        patch(f"{CLAIMS}/c-st8/status", {"status": {"reservedFor": RESERVED}}, STRATEGIC),
        given=(post(CLAIMS, claim("c-st8")),),
    ),
    # ResourceClaim: read and delete
    Case("claim-get-missing", get(f"{CLAIMS}/c-nothing")),
    Case("claim-delete-missing", Call("DELETE", f"{CLAIMS}/c-nothing")),
    Case(
        "claim-delete-wrong-uid",
        Call("DELETE", f"{CLAIMS}/c-del", {"preconditions": {"uid": "0b5a0c0e-0000-4000-8000-000000000009"}}),
        given=(post(CLAIMS, claim("c-del")),),
    ),
    Case(
        "claim-delete-stale",
        Call("DELETE", f"{CLAIMS}/c-del2", {"preconditions": {"resourceVersion": "<rv:0>"}}),
        given=(post(CLAIMS, claim("c-del2")), patch(f"{CLAIMS}/c-del2", {"metadata": {"labels": {"a": "b"}}}, MERGE)),
    ),
    # ResourceClaimTemplate
    Case("template-create", post(TEMPLATES, template("t-create"))),
    Case("template-bad-request-name", post(TEMPLATES, template("t-badreq", request("Bad_Request")))),
    Case("template-bad-claim-label", post(TEMPLATES, template("t-badlabel", labels={"a": "-x-"}))),
    Case(
        "template-update-spec",
        put(f"{TEMPLATES}/t-update", with_rv(template("t-update", request(count=2)), "<rv:0>")),
        given=(post(TEMPLATES, template("t-update")),),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "template-merge-patch-labels",
        patch(f"{TEMPLATES}/t-merge", {"metadata": {"labels": {"tier": "gold"}}}, MERGE),
        given=(post(TEMPLATES, template("t-merge")),),
    ),
    # DeviceClass
    Case("class-create", post(CLASSES, device_class("class-create", 'device.driver == "gpu.migdra.dev"'))),
    Case("class-cel-undefined-field", post(CLASSES, device_class("class-cel", "device.nope == 1"))),
    Case("class-cel-too-many-selectors", post(CLASSES, device_class("class-many", *(["true"] * 33)))),
    Case("class-bad-extended-resource", post(CLASSES, device_class("class-ext", extendedResourceName="nvidia.com/"))),
    Case(
        "class-config-not-object",
        post(CLASSES, device_class("class-cfg", config=[{"opaque": {"driver": "gpu.migdra.dev", "parameters": "x"}}])),
    ),
    Case("class-bad-name", post(CLASSES, device_class("Class_Bad"))),
    Case(
        "class-update-selectors",
        put(f"{CLASSES}/class-upd", with_rv(device_class("class-upd", "false"), "<rv:0>")),
        given=(post(CLASSES, device_class("class-upd", "true")),),
    ),
    Case(
        "class-strategic-patch-selectors",
        patch(f"{CLASSES}/class-smp", {"spec": {"selectors": [{"cel": {"expression": "device.nope"}}]}}, STRATEGIC),
        given=(post(CLASSES, device_class("class-smp", "true")),),
    ),
    Case(
        "class-update-stale",
        put(f"{CLASSES}/class-stale", with_rv(device_class("class-stale", "false"), "<rv:0>")),
        given=(
            post(CLASSES, device_class("class-stale", "true")),
            patch(f"{CLASSES}/class-stale", {"metadata": {"labels": {"a": "b"}}}, MERGE),
        ),
    ),
    # ResourceSlice
    Case("slice-create", post(SLICES, resource_slice("s-create"))),
    Case(
        "slice-no-node-selection",
        post(
            SLICES,
            {
                **resource_slice("s-nosel"),
                "spec": {k: v for k, v in resource_slice("s-nosel")["spec"].items() if k != "nodeName"},
            },
        ),
    ),
    Case("slice-two-node-selections", post(SLICES, resource_slice("s-twosel", nodeName="node-1", allNodes=True))),
    Case("slice-bad-driver", post(SLICES, resource_slice("s-driver", driver="Not A Driver"))),
    Case(
        "slice-negative-generation",
        post(
            SLICES,
            {
                **resource_slice("s-gen"),
                "spec": {
                    **resource_slice("s-gen")["spec"],
                    "pool": {"name": "p", "generation": -1, "resourceSliceCount": 0},
                },
            },
        ),
    ),
    Case("slice-duplicate-devices", post(SLICES, resource_slice("s-dup", device("gpu-0"), device("gpu-0")))),
    Case("slice-too-many-devices", post(SLICES, resource_slice("s-many", *(device(f"gpu-{i}") for i in range(129))))),
    Case(
        "slice-attribute-two-values",
        post(SLICES, resource_slice("s-attr", device("gpu-0", attributes={"model": {"string": "x", "int": 1}}))),
        differs=known("go-struct-values", "message", "causes"),
    ),
    Case(
        "slice-attribute-bad-version",
        post(SLICES, resource_slice("s-ver", device("gpu-0", attributes={"driverVersion": {"version": "1.2"}}))),
    ),
    Case(
        "slice-capacity-bad-quantity",
        post(SLICES, resource_slice("s-cap", device("gpu-0", capacity={"memory": {"value": "lots"}}))),
        differs=known("quantity-decoding", "code", "reason", "message", "causes", "details"),
    ),
    Case(
        "slice-taint-bad-effect",
        post(SLICES, resource_slice("s-taint", device("gpu-0", taints=[{"key": "k", "effect": "Evict"}]))),
    ),
    Case("slice-shared-device", post(SLICES, resource_slice("s-shared", shared_device("gpu-0-shared-4g40gb-5-0")))),
    Case(
        "slice-request-policy-without-multiple-allocations",
        post(
            SLICES,
            resource_slice("s-rp-single", shared_device("gpu-0", allowMultipleAllocations=False, memory_policy=False)),
        ),
    ),
    Case(
        "slice-request-policy-values-and-range",
        post(SLICES, resource_slice("s-rp-both", shared_device("gpu-0", validRange={"min": "1"}))),
    ),
    Case(
        "slice-request-policy-bad-values",
        post(SLICES, resource_slice("s-rp-values", shared_device("gpu-0", validValues=["2", "1", "1", "8"]))),
    ),
    Case(
        "slice-request-policy-bad-range",
        post(
            SLICES,
            resource_slice(
                "s-rp-range",
                shared_device("gpu-0", default="3", validValues=None, validRange={"min": "2", "max": "9", "step": "2"}),
            ),
        ),
    ),
    Case(
        "slice-devices-and-counters",
        post(
            SLICES,
            resource_slice(
                "s-counters", sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "1"}}}]
            ),
        ),
    ),
    Case(
        "slice-update-driver",
        put(f"{SLICES}/s-upd", with_rv(resource_slice("s-upd", driver="other.migdra.dev"), "<rv:0>")),
        given=(post(SLICES, resource_slice("s-upd")),),
    ),
    Case(
        "slice-update-node-name",
        patch(f"{SLICES}/s-upd2", {"spec": {"nodeName": "node-2"}}, MERGE),
        given=(post(SLICES, resource_slice("s-upd2")),),
    ),
    Case(
        "slice-json-patch-device",
        patch(f"{SLICES}/s-jp", [{"op": "add", "path": "/spec/devices/-", "value": device("gpu-1")}], JSON_PATCH),
        given=(post(SLICES, resource_slice("s-jp")),),
    ),
    Case(
        "slice-strategic-patch-devices",
        patch(f"{SLICES}/s-smp", {"spec": {"devices": [device("gpu-1")]}}, STRATEGIC),
        given=(post(SLICES, resource_slice("s-smp")),),
    ),
    # lists with selectors
    Case(
        "list-slices-by-driver",
        get(f"{SLICES}?fieldSelector=spec.driver%3Dlist.migdra.dev"),
        given=(
            post(SLICES, resource_slice("s-list-a", driver="list.migdra.dev")),
            post(
                SLICES,
                resource_slice("s-list-b", driver="list.migdra.dev", nodeName="node-2", devices=[device("gpu-0")]),
            ),
        ),
    ),
    Case(
        "list-slices-by-node",
        get(f"{SLICES}?fieldSelector=spec.nodeName%3Dnode-list,spec.driver%3Dlist2.migdra.dev"),
        given=(
            post(SLICES, resource_slice("s-list-c", driver="list2.migdra.dev", nodeName="node-list")),
            post(SLICES, resource_slice("s-list-d", driver="list2.migdra.dev", allNodes=True)),
        ),
    ),
    Case(
        "list-slices-by-name-not",
        get(f"{SLICES}?fieldSelector=spec.driver%3Dlist3.migdra.dev,metadata.name!%3Ds-list-e"),
        given=(
            post(SLICES, resource_slice("s-list-e", driver="list3.migdra.dev")),
            post(SLICES, resource_slice("s-list-f", driver="list3.migdra.dev", nodeName="node-2")),
        ),
    ),
    Case(
        "list-claims-by-label",
        get(f"{CLAIMS}?labelSelector=list%20in%20(a,b),tier!%3Dgold"),
        given=(
            post(CLAIMS, claim("c-list-a", labels={"list": "a"})),
            post(CLAIMS, claim("c-list-b", labels={"list": "b", "tier": "gold"})),
            post(CLAIMS, claim("c-list-c", labels={"list": "c"})),
        ),
    ),
    Case(
        "list-claims-by-name",
        get(f"{CLAIMS}?fieldSelector=metadata.name%3Dc-list-d"),
        given=(post(CLAIMS, claim("c-list-d")), post(CLAIMS, claim("c-list-e"))),
    ),
    Case("list-unsupported-field", get(f"{SLICES}?fieldSelector=spec.pool.generation%3D1")),
    Case("list-claims-unsupported-field", get(f"{CLAIMS}?fieldSelector=spec.devices%3Dx")),
    Case("list-core-unsupported-field", get(f"/api/v1/namespaces/{NAMESPACE}/configmaps?fieldSelector=data%3Dx")),
    Case(
        "list-bad-label-selector",
        get(f"{CLAIMS}?labelSelector=a%20in%20("),
        differs=known("label-selector-parse-errors", "message"),
    ),
    Case("list-bad-field-selector", get(f"{CLAIMS}?fieldSelector=metadata.name")),
    # watches from a resourceVersion
    Case(
        "watch-claim-changes",
        get(f"{CLAIMS}?fieldSelector=metadata.name%3Dc-watch&resourceVersion=<rv:0>"),
        given=(
            post(CLAIMS, claim("c-watch")),
            patch(f"{CLAIMS}/c-watch", {"metadata": {"labels": {"a": "b"}}}, MERGE),
            patch(f"{CLAIMS}/c-watch/status", {"status": {"allocation": ALLOCATION}}, MERGE),
            Call("DELETE", f"{CLAIMS}/c-watch"),
        ),
        watch=True,
    ),
    Case(
        "watch-label-transitions",
        get(f"{CLAIMS}?labelSelector=watched%3Dyes&resourceVersion=<rv:0>"),
        given=(
            post(CLAIMS, claim("c-watch2", labels={"watched": "no"})),
            patch(f"{CLAIMS}/c-watch2", {"metadata": {"labels": {"watched": "yes"}}}, MERGE),
            patch(f"{CLAIMS}/c-watch2", {"metadata": {"labels": {"watched": "yes", "b": "c"}}}, MERGE),
            patch(f"{CLAIMS}/c-watch2", {"metadata": {"labels": {"watched": "no"}}}, MERGE),
        ),
        watch=True,
    ),
    Case(
        "watch-slices-by-driver",
        get(f"{SLICES}?fieldSelector=spec.driver%3Dwatch.migdra.dev&resourceVersion=<rv:0>"),
        given=(
            post(SLICES, resource_slice("s-watch-0", driver="watch.migdra.dev")),
            post(SLICES, resource_slice("s-watch-1", driver="watch.migdra.dev", nodeName="node-2")),
            put(
                f"{SLICES}/s-watch-1",
                resource_slice(
                    "s-watch-1", device("gpu-0"), device("gpu-1"), driver="watch.migdra.dev", nodeName="node-2"
                ),
            ),
            Call("DELETE", f"{SLICES}/s-watch-0"),
        ),
        watch=True,
    ),
    # protobuf bodies from the real kubectl
    Case(
        "kubectl-create-namespace", get("/api/v1/namespaces/kubectl-ns"), kubectl=("create", "namespace", "kubectl-ns")
    ),
    Case(
        "kubectl-create-configmap",
        get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/kubectl-cm"),
        kubectl=("create", "configmap", "kubectl-cm", "-n", NAMESPACE, "--from-literal=a=b"),
    ),
    Case(
        "kubectl-create-secret",
        get(f"/api/v1/namespaces/{NAMESPACE}/secrets/kubectl-secret"),
        kubectl=("create", "secret", "generic", "kubectl-secret", "-n", NAMESPACE, "--from-literal=k=v"),
    ),
    Case(
        "kubectl-create-serviceaccount",
        get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/kubectl-sa"),
        kubectl=("create", "serviceaccount", "kubectl-sa", "-n", NAMESPACE),
    ),
    Case(
        "kubectl-create-bad-namespace",
        get("/api/v1/namespaces/Kubectl_NS"),
        kubectl=("create", "namespace", "Kubectl_NS"),
    ),
    Case(
        "kubectl-create-role",
        get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/kubectl-role"),
        kubectl=(
            "create",
            "role",
            "kubectl-role",
            "-n",
            NAMESPACE,
            "--verb=get",
            "--resource=resourceclaims.resource.k8s.io",
        ),
    ),
)


# --- comparison -----------------------------------------------------------------------------------------

_RESOURCE_VERSION = re.compile(r"(ResourceVersion in (?:the precondition|record) )\(\d+\)")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def digest(answer: Answer) -> dict[str, Any]:
    """What must be the same on both servers, with uids replaced by ``<uid>``."""
    body = answer.body
    seen: dict[str, Any] = {"code": answer.status}
    if not isinstance(body, dict):
        seen["text"] = body.strip()
    elif body.get("kind") == "Status":
        details = body.get("details") or {}
        seen["reason"] = body.get("reason")
        seen["message"] = _RESOURCE_VERSION.sub(r"\1(<rv>)", _UID.sub("<uid>", str(body.get("message"))))
        seen["causes"] = [
            (c.get("field"), c.get("reason"), _UID.sub("<uid>", str(c.get("message"))))
            for c in details.get("causes") or []
        ]
        seen["details"] = {k: details.get(k) for k in ("name", "group", "kind")}
    elif str(body.get("kind", "")).endswith("List"):
        seen["kind"] = body["kind"]
        seen["items"] = sorted(item["metadata"]["name"] for item in body.get("items") or [])
    else:
        metadata = body.get("metadata") or {}
        seen["kind"] = body.get("kind")
        seen["object"] = {k: metadata.get(k) for k in ("name", "namespace", "labels", "generation")}
    return seen


def digest_watch(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "events": [
            (e["type"], e["object"].get("kind"), (e["object"].get("metadata") or {}).get("name")) for e in events
        ]
    }


def substitute(value: Any, versions: list[str]) -> Any:
    if isinstance(value, str):
        return re.sub(r"<rv:(\d+)>", lambda m: versions[int(m.group(1))], value)
    if isinstance(value, dict):
        return {k: substitute(v, versions) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, versions) for v in value]
    return value


def kubectl(server: ApiEndpoint, args: tuple[str, ...]) -> dict[str, Any]:
    done = subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(server.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {"exit": done.returncode, "output": (done.stdout + done.stderr).strip()}


def run_case(case: Case, server: ApiEndpoint) -> dict[str, Any]:
    versions: list[str] = []
    for call in case.given:
        answer = server.request(
            call.method, substitute(call.path, versions), substitute(call.body, versions), call.content_type
        )
        assert answer.status < 300, f"{server.name}: {call.method} {call.path}: {answer}"
        versions.append(str(((answer.body or {}).get("metadata") or {}).get("resourceVersion", "")))
    seen: dict[str, Any] = {}
    if case.kubectl:
        seen["kubectl"] = kubectl(server, case.kubectl)
    call = case.call
    path = substitute(call.path, versions)
    if case.watch:
        seen.update(digest_watch(server.watch(path, WATCH_SECONDS)))
    else:
        seen.update(digest(server.request(call.method, path, substitute(call.body, versions), call.content_type)))
    return seen


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiEndpoint, ApiEndpoint]]:
    with real_apiserver(tmp_path_factory.mktemp("kube")) as real, local_apiserver() as local:
        for server in (real, local):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            assert server.request("POST", "/api/v1/namespaces", namespace).status == 201
        yield real, local


def known_differences() -> set[str]:
    """The slugs listed in the doc's "Known differences from kube-apiserver" section."""
    text = DOC.read_text()
    section = text.split("## Known differences from kube-apiserver", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- \*\*`([a-z0-9-]+)`\*\*", section, flags=re.MULTILINE))


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_the_local_api_server_answers_as_kube_apiserver(case: Case, servers: tuple[ApiEndpoint, ApiEndpoint]) -> None:
    real, local = servers
    expected, got = run_case(case, real), run_case(case, local)
    if case.differs is None:
        assert got == expected
        return
    slug, keys = case.differs
    assert slug in known_differences(), f"{slug}: not listed in {DOC.name}"
    assert {k: v for k, v in got.items() if k not in keys} == {k: v for k, v in expected.items() if k not in keys}
    for key in keys:
        assert got.get(key) != expected.get(key), f"{key} is now the same on both servers: drop {slug} from the case"


def test_every_listed_difference_is_one_the_corpus_expects() -> None:
    used = {c.differs[0] for c in CORPUS if c.differs}
    assert known_differences() == used


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CORPUS]
    assert len(ids) == len(set(ids))
