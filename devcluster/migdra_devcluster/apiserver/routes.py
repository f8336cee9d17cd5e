"""Turning a request path into what it addresses: a resource collection, an object, or a subresource.

Paths follow kube-apiserver's layout: ``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...``
otherwise; namespaced resources under ``namespaces/<ns>/<plural>[/<name>[/<subresource>]]``, plus the
all-namespaces collection ``<plural>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from migdra_devcluster.apiserver.registry import Registry, ResourceType


@dataclass(frozen=True)
class ResourceRoute:
    """A resolved resource path; ``name`` None means the collection."""

    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_resource_path(registry: Registry, path: str) -> ResourceRoute | None:
    """The route of ``path``, or None when no served resource lives there."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        candidate = registry.lookup(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    resource = registry.lookup(group, version, rest[0])
    if resource is None or len(rest) > 3:
        return None
    if namespace is None and resource.namespaced and len(rest) > 1:
        return None  # a namespaced object must be addressed through its namespace
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return ResourceRoute(resource, namespace, name, subresource)
