"""API discovery documents, built from the registry.

Legacy discovery (``APIVersions``, ``APIGroupList``, ``APIGroup``, ``APIResourceList``) and, when a
client asks for it in ``Accept`` (kubectl and client-go do), aggregated discovery
``apidiscovery.k8s.io/v2 APIGroupDiscoveryList`` for ``/api`` and ``/apis``.
"""

from __future__ import annotations

from typing import Any

from migdra_devcluster.apiserver.registry import ALL_VERBS, Registry, ResourceType

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
SERVER_VERSION = {
    "major": "1",
    "minor": "37",
    "emulationMajor": "1",
    "emulationMinor": "37",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "36",
    "gitVersion": "v1.37.0-migdra-local",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_SUBRESOURCE_VERBS = {"status": ("get", "patch", "update"), "binding": ("create",)}
_SUBRESOURCE_KIND = {"binding": ("", "v1", "Binding")}


def wants_aggregated(accept: str) -> bool:
    """Whether the ``Accept`` header asks for aggregated discovery v2 (kubectl 1.37 does, first)."""
    return any(
        "as=APIGroupDiscoveryList" in part and "v=v2" in part and "v=v2beta1" not in part for part in accept.split(",")
    )


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    """``GET /apis``."""
    groups = [_group(name, versions) for name, versions in registry.group_versions().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    """``GET /apis/<group>``, or None if the group is not served."""
    versions = registry.group_versions().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>``, or None if not served."""
    resources = registry.in_group_version(group, version)
    if not resources:
        return None
    entries: list[dict[str, Any]] = []
    for r in resources:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(ALL_VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        for sub in r.subresources:
            sub_entry: dict[str, Any] = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": _SUBRESOURCE_KIND.get(sub, (r.group, r.version, r.kind))[2],
                "verbs": list(_SUBRESOURCE_VERBS.get(sub, ("get", "patch", "update"))),
            }
            if sub in _SUBRESOURCE_KIND:
                sub_entry["group"], sub_entry["version"] = _SUBRESOURCE_KIND[sub][:2]
            entries.append(sub_entry)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


def _aggregated_resource(r: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": list(ALL_VERBS),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    if r.subresources:
        entry["subresources"] = [
            {
                "subresource": sub,
                "responseKind": dict(
                    zip(
                        ("group", "version", "kind"),
                        _SUBRESOURCE_KIND.get(sub, (r.group, r.version, r.kind)),
                        strict=True,
                    )
                ),
                "verbs": list(_SUBRESOURCE_VERBS.get(sub, ("get", "patch", "update"))),
            }
            for sub in r.subresources
        ]
    return entry


def _aggregated_group(registry: Registry, group: str, versions: list[str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"creationTimestamp": None}
    if group:
        metadata["name"] = group
    return {
        "metadata": metadata,
        "versions": [
            {
                "version": v,
                "resources": [_aggregated_resource(r) for r in registry.in_group_version(group, v)],
                "freshness": "Current",
            }
            for v in versions
        ],
    }


def aggregated_discovery(registry: Registry, legacy: bool) -> dict[str, Any]:
    """``GET /api`` (``legacy``) or ``/apis`` as an ``APIGroupDiscoveryList``."""
    if legacy:
        items = [_aggregated_group(registry, "", ["v1"])]
    else:
        items = [_aggregated_group(registry, g, vs) for g, vs in registry.group_versions().items()]
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}
