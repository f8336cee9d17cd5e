"""The OpenAPI v2 (Swagger 2.0) document at ``/openapi/v2``, as JSON or as gnostic protobuf.

kubectl 1.37 validates what it sends with OpenAPI v3 and server-side ``fieldValidation``, except for a
file of ``kind: List``: ``List`` is a client-side kind that no server document names, so kubectl's v3
check reports it unsupported and kubectl falls back to client-side validation of each item against the
v2 document (cli-runtime ``queryParamVerifierV3.HasSupport``; kubectl ``schemaValidation.validateList``)
before it splits the List and sends the items one by one.  Without ``/openapi/v2`` that validation, and
so ``kubectl apply -f list.yaml``, fails.

The definitions are the v3 component schemas (``openapi.component_schemas``, from the client models),
with each served kind's model named as kube names it (``io.k8s.api.core.v1.ConfigMap``) and carrying its
``x-kubernetes-group-version-kind``, so kubectl finds each item's schema and reports unknown fields as
kube does.  There are no ``paths``: kubectl reads paths from v3.  Negotiation and the ``ETag`` follow
kube-openapi's handler: JSON for ``application/json`` and ``*/*``, protobuf for both spellings of the
gnostic media type, 406 otherwise.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from migdra_devcluster.apiserver import gnostic
from migdra_devcluster.apiserver.openapi import component_schemas, gvk
from migdra_devcluster.apiserver.registry import Registry, ResourceType

JSON = "application/json"
PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_PROTOBUF_DEPRECATED = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_SERVED = ((JSON, JSON), (_PROTOBUF_DEPRECATED, PROTOBUF), (PROTOBUF, PROTOBUF))
"""(media type accepted, content type answered), in kube-openapi's order of preference."""
_V3_REF = "#/components/schemas/"


def definition_name(r: ResourceType) -> str:
    """kube's v2 definition name of a served kind: ``io.k8s.api.<package>.<version>.<Kind>``."""
    package = r.group.split(".")[0] if r.group else "core"
    return f"io.k8s.api.{package}.{r.version}.{r.kind}"


def _to_v2(schema: Any, names: dict[str, str]) -> Any:
    """A v3 component schema in v2's terms: references to ``#/definitions/<name>``, and the client's
    untyped ``object`` (int-or-string, raw JSON, opaque parameters) without a ``type``, which kubectl
    reads as "any value" (with ``type: object`` it would demand a map, and refuse ``targetPort: http``)."""
    if isinstance(schema, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return {key: value for key, value in schema.items() if key != "type"}
        out = {key: _to_v2(value, names) for key, value in schema.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith(_V3_REF):
            model = ref.removeprefix(_V3_REF)
            out["$ref"] = f"#/definitions/{names.get(model, model)}"
        return out
    if isinstance(schema, list):
        return [_to_v2(item, names) for item in schema]
    return schema


def build_document(registry: Registry) -> dict[str, Any]:
    """The Swagger 2.0 document of every served kind (definitions only, sorted by name)."""
    names = {r.model: definition_name(r) for r in registry.resources}
    schemas = component_schemas([r.model for r in registry.resources])
    definitions = {names.get(model, model): _to_v2(schema, names) for model, schema in schemas.items()}
    for r in registry.resources:
        definitions[names[r.model]]["x-kubernetes-group-version-kind"] = [gvk(r)]
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes (migdra local API server)", "version": "v1.37.0"},
        "paths": {},
        "definitions": dict(sorted(definitions.items())),
    }


_DOCUMENTS: dict[int, tuple[object, dict[str, bytes]]] = {}
_DOCUMENTS_LOCK = threading.Lock()


class OpenAPIV2:
    """The ``/openapi/v2`` answers of one registry, in both encodings, built on first use and then kept
    process-wide per resource table (as ``OpenAPIV3``'s are: building takes a noticeable moment)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @staticmethod
    def negotiate(accept: str) -> str | None:
        """The content type to answer ``Accept`` with, or None (406): the first clause, by quality, that
        names a served type or a wildcard over one (an empty ``Accept`` is ``*/*``)."""
        clauses: list[tuple[float, int, str]] = []
        for position, clause in enumerate((accept or "*/*").split(",")):
            media_type, *params = (part.strip() for part in clause.split(";"))
            quality = 1.0
            for param in params:
                name, _, value = param.partition("=")
                if name.strip() == "q":
                    try:
                        quality = float(value)
                    except ValueError:
                        quality = 0.0
            if media_type and quality > 0:
                clauses.append((-quality, position, media_type.lower()))
        for _, _, media_type in sorted(clauses):
            kind, _, subtype = media_type.partition("/")
            for served, answered in _SERVED:
                served_kind, _, served_subtype = served.partition("/")
                if kind in (served_kind, "*") and subtype in (served_subtype, "*"):
                    return answered
        return None

    def _encodings(self) -> dict[str, bytes]:
        with _DOCUMENTS_LOCK:
            resources = self.registry.resources
            cached = _DOCUMENTS.get(id(resources))
            if cached is None or cached[0] is not resources:
                document = build_document(self.registry)
                encodings = {
                    JSON: json.dumps(document, separators=(",", ":")).encode(),
                    PROTOBUF: gnostic.encode_document(document),
                }
                cached = _DOCUMENTS[id(resources)] = (resources, encodings)
            return cached[1]

    def body(self, content_type: str) -> bytes:
        """The document in ``content_type`` (a value :meth:`negotiate` returned)."""
        return self._encodings()[content_type]

    def etag(self) -> str:
        """kube-openapi's ``ETag``: the quoted upper-case SHA-512 of the JSON, shared by both encodings."""
        return '"' + hashlib.sha512(self._encodings()[JSON]).hexdigest().upper() + '"'
