"""OpenAPI v3 documents: the root index and one document per group-version.

kubectl decides from these whether the server does server-side field validation: for the kind it
is about to send, it looks for a PATCH operation tagged ``x-kubernetes-group-version-kind`` with a
``fieldValidation`` query parameter; finding one, it sends ``?fieldValidation=Strict`` and skips its
client-side (OpenAPI v2) validation.  The component schemas are generated from the official client's
models (see ``schema.py``), so ``kubectl explain`` has real field names and types.  The OpenAPI v2
document, which kubectl still reads for what v3 cannot answer (``kind: List`` files), is built from the
same schemas in ``openapi_v2.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import Any

from migdra_devcluster.apiserver.registry import Registry, ResourceType
from migdra_devcluster.apiserver.schema import fields_of

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
_SCALAR_SCHEMAS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"},
    "float": {"type": "number", "format": "double"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytes": {"type": "string", "format": "byte"},
    "object": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}


def _query(name: str, schema_type: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": schema_type},
        "uniqueItems": True,
    }


_WRITE_PARAMETERS = [
    _query("dryRun", "string", "When present, indicates that modifications should not be persisted."),
    _query("fieldManager", "string", "A name associated with the actor or entity that is making these changes."),
    _query(
        "fieldValidation",
        "string",
        "Instructs the server how to handle objects in the request containing unknown or duplicate fields: "
        "Ignore, Warn (default) or Strict.",
    ),
]
_LIST_PARAMETERS = [
    _query(name, schema_type, description)
    for name, schema_type, description in (
        ("allowWatchBookmarks", "boolean", "requests watch events with type BOOKMARK"),
        ("continue", "string", "continue token of a previous paginated list"),
        ("fieldSelector", "string", "selector restricting the list by fields"),
        ("labelSelector", "string", "selector restricting the list by labels"),
        ("limit", "integer", "maximum number of items to return"),
        ("resourceVersion", "string", "resource version to list or watch from"),
        ("timeoutSeconds", "integer", "timeout for the list/watch call"),
        ("watch", "boolean", "watch for changes instead of listing"),
    )
]


def _schema_for(type_name: str, seen: set[str]) -> dict[str, Any]:
    if type_name in _SCALAR_SCHEMAS:
        return dict(_SCALAR_SCHEMAS[type_name])
    if match := _LIST.match(type_name):
        return {"type": "array", "items": _schema_for(match.group(1), seen)}
    if match := _DICT.match(type_name):
        return {"type": "object", "additionalProperties": _schema_for(match.group(1), seen)}
    seen.add(type_name)
    return {"$ref": f"#/components/schemas/{type_name}"}


def component_schemas(roots: list[str]) -> dict[str, Any]:
    """The schema of each client model in ``roots`` and of every model they reach, by model name, with
    references as ``#/components/schemas/<model>`` (``openapi_v2.py`` rewrites them for v2)."""
    schemas: dict[str, Any] = {}
    pending = set(roots)
    while pending:
        model = pending.pop()
        if model in schemas:
            continue
        refs: set[str] = set()
        try:
            fields = fields_of(model)
        except AttributeError:
            schemas[model] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            continue
        schemas[model] = {
            "type": "object",
            "properties": {name: _schema_for(type_name, refs) for name, type_name in sorted(fields.items())},
        }
        pending |= refs - schemas.keys()
    return schemas


def gvk(r: ResourceType) -> dict[str, str]:
    """The ``x-kubernetes-group-version-kind`` entry of a resource's kind."""
    return {"group": r.group, "version": r.version, "kind": r.kind}


def _operation(r: ResourceType, action: str, operation_id: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{r.model}"}
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(r),
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
    }
    if action in ("post", "put", "patch"):
        content_types = (
            ["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"]
            if action == "patch"
            else ["application/json"]
        )
        schema = {"type": "object"} if action == "patch" else ref
        operation["requestBody"] = {"content": {ct: {"schema": schema} for ct in content_types}, "required": True}
    return operation


def _paths(r: ResourceType) -> dict[str, Any]:
    prefix = f"/apis/{r.group}/{r.version}" if r.group else "/api/v1"
    name_id = f"{r.group.split('.')[0].capitalize()}{r.version.capitalize()}" if r.group else "CoreV1"
    scope = "Namespaced" if r.namespaced else ""
    collection = f"{prefix}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{prefix}/{r.plural}"
    path_params = (
        [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}] if r.namespaced else []
    )
    name_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    paths: dict[str, Any] = {
        collection: {
            "get": _operation(r, "list", f"list{name_id}{scope}{r.kind}", _LIST_PARAMETERS),
            "post": _operation(r, "post", f"create{name_id}{scope}{r.kind}", _WRITE_PARAMETERS),
            "delete": _operation(r, "deletecollection", f"deletecollection{name_id}{scope}{r.kind}", _LIST_PARAMETERS),
            "parameters": path_params,
        },
        f"{collection}/{{name}}": {
            "get": _operation(r, "get", f"read{name_id}{scope}{r.kind}", []),
            "put": _operation(r, "put", f"replace{name_id}{scope}{r.kind}", _WRITE_PARAMETERS),
            "patch": _operation(
                r,
                "patch",
                f"patch{name_id}{scope}{r.kind}",
                [*_WRITE_PARAMETERS, _query("force", "boolean", "force apply")],
            ),
            "delete": _operation(
                r, "delete", f"delete{name_id}{scope}{r.kind}", [_query("dryRun", "string", "dry run")]
            ),
            "parameters": [name_param, *path_params],
        },
    }
    if "status" in r.subresources:
        paths[f"{collection}/{{name}}/status"] = {
            "get": _operation(r, "get", f"read{name_id}{scope}{r.kind}Status", []),
            "put": _operation(r, "put", f"replace{name_id}{scope}{r.kind}Status", _WRITE_PARAMETERS),
            "patch": _operation(r, "patch", f"patch{name_id}{scope}{r.kind}Status", _WRITE_PARAMETERS),
            "parameters": [name_param, *path_params],
        }
    if r.namespaced:
        paths[f"{prefix}/{r.plural}"] = {
            "get": _operation(r, "list", f"list{name_id}{r.kind}ForAllNamespaces", _LIST_PARAMETERS)
        }
    return paths


_DOCUMENTS: dict[int, tuple[object, dict[str, bytes]]] = {}
_DOCUMENTS_LOCK = threading.Lock()


class OpenAPIV3:
    """The ``/openapi/v3`` documents of one registry, built once per resource table (process-wide cache:
    generating the schemas takes a noticeable fraction of a second) and served with their hashes."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @staticmethod
    def gv_path(group: str, version: str) -> str:
        """``api/v1`` or ``apis/<group>/<version>``: the key of a group-version in the root index."""
        return f"apis/{group}/{version}" if group else f"api/{version}"

    @property
    def _documents(self) -> dict[str, bytes]:
        with _DOCUMENTS_LOCK:
            resources = self.registry.resources
            cached = _DOCUMENTS.get(id(resources))
            if cached is None or cached[0] is not resources:
                cached = _DOCUMENTS[id(resources)] = (resources, self._build())
            return cached[1]

    def _build(self) -> dict[str, bytes]:
        documents: dict[str, bytes] = {}
        gvs = [("", "v1")] + [(g, v) for g, vs in self.registry.group_versions().items() for v in vs]
        for group, version in gvs:
            resources = self.registry.in_group_version(group, version)
            paths: dict[str, Any] = {}
            for r in resources:
                paths.update(_paths(r))
            doc: dict[str, Any] = {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes (migdra local API server)", "version": "v1.37.0"},
                "paths": paths,
                "components": {"schemas": component_schemas([r.model for r in resources])},
            }
            for r in resources:
                doc["components"]["schemas"][r.model]["x-kubernetes-group-version-kind"] = [gvk(r)]
            documents[self.gv_path(group, version)] = json.dumps(doc, separators=(",", ":")).encode()
        return documents

    def root(self) -> dict[str, Any]:
        """``GET /openapi/v3``: where each group-version's document lives, with a content hash."""
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={hashlib.sha512(doc).hexdigest()[:32].upper()}"}
                for path, doc in self._documents.items()
            }
        }

    def document(self, path: str) -> bytes | None:
        """``GET /openapi/v3/<path>`` as JSON bytes, or None if not served."""
        return self._documents.get(path)
