"""Extended resources backed by DRA (KEP-5004): which DeviceClass serves ``example.com/gpu: 2``, and the
one special ResourceClaim kube-scheduler creates for a pod that asks for such resources.

A DeviceClass serves an extended resource under the name in its ``spec.extendedResourceName`` and, in
any case, under ``deviceclass.resource.kubernetes.io/<class name>``.  On a node whose allocatable
already lists the resource (a device plugin advertises it) the resource stays the device plugin's;
elsewhere the scheduler asks DRA for it through one claim per pod, with one ``ExactCount`` device
request per (container, resource).  The request names (``container-<i>-request-<j>``) and the claim's
metadata follow kube-scheduler's dynamicresources plugin so that a kubelet, ``kubectl`` and the
tests see what a real cluster would show.

Pure functions of API objects as JSON dicts: creating the claim, allocating it and writing the pod's
``status.extendedResourceClaimStatus`` are the scheduling loop's.  One simplification against the
newest kube-scheduler: containers do not share requests (a non-sidecar init container gets its own
request even where it could reuse a later container's devices).  Quantities that are not whole
numbers (``1500m``) get no request, as kube-scheduler skips them when ``AsInt64`` fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dra_driver.cel.quantity import Quantity, QuantityError
from dra_driver.validation import names

JSON = Mapping[str, Any]

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"

_NO_TIMESTAMP = datetime.min.replace(tzinfo=UTC)


def device_class_mapping(classes: Iterable[JSON]) -> dict[str, str]:
    """Extended resource name → DeviceClass name, for explicit and implicit names.

    Several classes claiming one ``extendedResourceName``: the most recently created wins, so an
    admin can replace a class by creating its successor; equal creation times go to the
    lexicographically first class name, so every scheduler replica picks the same one.
    """
    explicit: dict[str, tuple[datetime, str]] = {}
    implicit: dict[str, str] = {}
    for device_class in classes:
        metadata: JSON = device_class.get("metadata") or {}
        class_name = str(metadata.get("name") or "")
        if not class_name:
            continue
        implicit[IMPLICIT_PREFIX + class_name] = class_name
        resource_name = str((device_class.get("spec") or {}).get("extendedResourceName") or "")
        if not resource_name:
            continue
        created = _timestamp(metadata.get("creationTimestamp"))
        current = explicit.get(resource_name)
        if current is None or created > current[0] or (created == current[0] and class_name < current[1]):
            explicit[resource_name] = (created, class_name)
    # Validation keeps explicit names out of kubernetes.io, so the two kinds of names never collide.
    return {name: class_name for name, (_, class_name) in explicit.items()} | implicit


def is_extended_resource_name(name: str) -> bool:
    """``IsDRAExtendedResourceName``: an extended resource name, or any implicit DeviceClass name.

    An extended resource name carries a domain outside ``kubernetes.io`` (``kubernetes.io/`` anywhere
    in the name makes it native), does not start with ``requests.``, and is a valid label key once
    ``requests.`` is put in front (quota's spelling).  The implicit names are inside
    ``kubernetes.io`` yet count, on their prefix alone.
    """
    return name.startswith(IMPLICIT_PREFIX) or names.is_extended_resource_name(name)


def extended_claim_requests(pod: JSON, mapping: Mapping[str, str], node: JSON) -> list[dict[str, Any]]:
    """The device requests of the pod's extended-resource claim if it runs on ``node``, sorted by name.

    ``[]`` when the node needs none: no extended resource maps to a DeviceClass, the node's device
    plugin provides every mapped one, or every mapped request is zero.  ``j`` in
    ``container-<i>-request-<j>`` counts all the container's resource names (``cpu`` and ``memory``
    too) in sorted order, so the name stays the same whichever node the pod lands on.
    """
    allocatable: JSON = (node.get("status") or {}).get("allocatable") or {}
    requests: list[dict[str, Any]] = []
    for container_index, container in enumerate(_containers(pod)):
        effective = _effective_requests(container)
        for resource_index, resource_name in enumerate(sorted(effective)):
            class_name = mapping.get(resource_name)
            if not class_name or not is_extended_resource_name(resource_name):
                continue
            if _provided_by_node(allocatable, resource_name):
                continue
            count = _whole_count(effective[resource_name])
            if count is None or count <= 0:
                continue
            requests.append(
                {
                    "name": f"container-{container_index}-request-{resource_index}",
                    "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count},
                }
            )
    requests.sort(key=lambda request: str(request["name"]))
    return requests


def new_extended_claim(pod: JSON, requests: Sequence[JSON]) -> dict[str, Any]:
    """The ResourceClaim to create for the pod: owned by it (so it is deleted with it), annotated so
    :func:`find_extended_claim` recognises it, named by the API server from ``<pod>-extended-resources-``."""
    metadata: JSON = pod.get("metadata") or {}
    pod_name = str(metadata.get("name") or "")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod_name}-extended-resources-",
            "namespace": str(metadata.get("namespace") or ""),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": str(metadata.get("uid") or ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": [_copy_request(request) for request in requests]}},
    }


def find_extended_claim(pod: JSON, claims: Iterable[JSON]) -> JSON | None:
    """The pod's extended-resource claim from an earlier attempt, if one exists.

    It is recognised by the annotation and a controller owner reference to this very pod (name and
    UID, so a recreated pod of the same name does not adopt its predecessor's claim).
    """
    metadata: JSON = pod.get("metadata") or {}
    pod_name = metadata.get("name")
    pod_uid = metadata.get("uid")
    for claim in claims:
        claim_metadata: JSON = claim.get("metadata") or {}
        if (claim_metadata.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
            continue
        for owner in claim_metadata.get("ownerReferences") or []:
            if owner.get("controller") is True and owner.get("name") == pod_name and owner.get("uid") == pod_uid:
                return claim
    return None


def request_mappings(claim: JSON, pod: JSON) -> list[dict[str, str]]:
    """``status.extendedResourceClaimStatus.requestMappings`` for the pod: which of the claim's requests
    serves which container's resource, in container order, then resource-name order.

    Read back from the request names, so it also serves a claim created in an earlier attempt.
    """
    request_names = {str(request.get("name") or "") for request in _claim_requests(claim)}
    mappings: list[dict[str, str]] = []
    for container_index, container in enumerate(_containers(pod)):
        for resource_index, resource_name in enumerate(sorted(_effective_requests(container))):
            request_name = f"container-{container_index}-request-{resource_index}"
            if request_name in request_names:
                mappings.append(
                    {
                        "containerName": str(container.get("name") or ""),
                        "resourceName": resource_name,
                        "requestName": request_name,
                    }
                )
    return mappings


def unmapped_extended_resources(pod: JSON, mapping: Mapping[str, str], node: JSON) -> list[str]:
    """Extended resources the pod requests (a non-zero amount) that the node cannot have at all, sorted.

    Neither the node's allocatable (a device plugin) nor a DeviceClass provides them, so
    kube-scheduler's noderesources plugin filters the node out with ``Insufficient <name>``.  A
    resource the node does advertise, only too little of it, is not listed: that is ordinary resource
    accounting, the caller's.
    """
    allocatable: JSON = (node.get("status") or {}).get("allocatable") or {}
    requested: set[str] = set()
    for container in _containers(pod):
        for resource_name, amount in _effective_requests(container).items():
            quantity = _quantity(amount)
            if quantity is not None and quantity.value != 0 and is_extended_resource_name(resource_name):
                requested.add(resource_name)
    return sorted(name for name in requested if name not in mapping and not _provided_by_node(allocatable, name))


# -- helpers for the functions above -----------------------------------------------------------------


def _containers(pod: JSON) -> list[JSON]:
    """Init containers, then containers: the order the ``<i>`` of a request name counts in."""
    spec: JSON = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _effective_requests(container: JSON) -> dict[str, Any]:
    """``resources.requests``, plus each limit that has no request (the API server's defaulting)."""
    resources: JSON = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _claim_requests(claim: JSON) -> list[JSON]:
    return list(((claim.get("spec") or {}).get("devices") or {}).get("requests") or [])


def _copy_request(request: JSON) -> dict[str, Any]:
    exactly = request.get("exactly")
    copied = dict(request)
    if isinstance(exactly, Mapping):
        copied["exactly"] = dict(exactly)
    return copied


def _provided_by_node(allocatable: JSON, resource_name: str) -> bool:
    """The node advertises a positive amount, so its device plugin, not DRA, serves the resource."""
    quantity = _quantity(allocatable.get(resource_name))
    return quantity is not None and quantity.value > 0


def _quantity(amount: Any) -> Quantity | None:
    """A quantity from JSON (a string, or a number from YAML); None for anything else or a bad string."""
    if isinstance(amount, bool):
        return None
    if isinstance(amount, float) and amount.is_integer():
        amount = int(amount)
    try:
        if isinstance(amount, int):
            return Quantity.from_int(amount)
        if isinstance(amount, str):
            return Quantity.parse(amount)
    except QuantityError:
        return None
    return None


def _whole_count(amount: Any) -> int | None:
    """``Quantity.AsInt64`` of the quantity as kube-scheduler receives it: the device count, or None for a
    fraction, an overflow or no quantity.

    The API server stores and sends quantities in canonical form, so a manifest's ``2000m`` reaches the
    scheduler as ``2`` (a whole count) while ``1500m`` stays milli and is skipped; canonicalising here
    gives the same answer whether or not the pod came through an API server that canonicalises.
    """
    quantity = _quantity(amount)
    return None if quantity is None else Quantity.parse(quantity.canonical()).as_int64()


def _timestamp(value: Any) -> datetime:
    """``metadata.creationTimestamp`` (RFC 3339); a missing or unreadable one counts as the oldest."""
    if not isinstance(value, str):
        return _NO_TIMESTAMP
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return _NO_TIMESTAMP
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
