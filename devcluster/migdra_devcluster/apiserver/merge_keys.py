"""The one table of strategic-merge-patch list rules for the kinds this server serves.

kube-apiserver reads these from ``patchStrategy``/``patchMergeKey`` struct tags; we keep the same
facts here, keyed by kind (``"*"`` applies to every kind) and by dotted path, where a list item adds
no path segment (``spec.containers.env`` is the ``env`` list inside any container).  The value is the
merge key, or ``None`` for a list of scalars merged as a set (``patchStrategy: merge`` without a key).
A list that is not listed here is atomic: a patch replaces it whole, as kube does.
"""

from __future__ import annotations

from collections.abc import Mapping

_POD_CONTAINER_LISTS = {
    "ports": "containerPort",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}

STRATEGIC_MERGE_KEYS: Mapping[str, Mapping[str, str | None]] = {
    "*": {
        "metadata.finalizers": None,
        "metadata.ownerReferences": "uid",
    },
    "Pod": {
        "spec.volumes": "name",
        "spec.containers": "name",
        "spec.initContainers": "name",
        "spec.ephemeralContainers": "name",
        "spec.imagePullSecrets": "name",
        "spec.hostAliases": "ip",
        "spec.resourceClaims": "name",
        "spec.schedulingGates": "name",
        **{f"spec.containers.{name}": key for name, key in _POD_CONTAINER_LISTS.items()},
        **{f"spec.initContainers.{name}": key for name, key in _POD_CONTAINER_LISTS.items()},
        "status.conditions": "type",
        "status.podIPs": "ip",
        "status.hostIPs": "ip",
        "status.resourceClaimStatuses": "name",
    },
    "Node": {
        "spec.podCIDRs": None,
        "status.conditions": "type",
        "status.addresses": "type",
    },
    "Namespace": {"status.conditions": "type"},
    "ServiceAccount": {"secrets": "name"},
    "ResourceClaim": {
        "status.reservedFor": "uid",
        "status.devices.conditions": "type",
    },
}


def list_merge_rule(kind: str, path: str) -> tuple[bool, str | None]:
    """``(merges, key)`` for the list at ``path`` of ``kind``; ``merges`` false means replace it."""
    for table in (STRATEGIC_MERGE_KEYS.get(kind, {}), STRATEGIC_MERGE_KEYS["*"]):
        if path in table:
            return True, table[path]
    return False, None
