"""The Kubernetes semantics of each verb, independent of HTTP.

create / get / list / update / patch / delete / deletecollection / watch / bind, with the rules a
client relies on: server-owned metadata (uid, resourceVersion, generation, creationTimestamp),
``generateName``, optimistic concurrency, the status-subresource split, finalizers and
``deletionTimestamp``, owner-reference propagation policies, namespaces that must exist (and refuse new
content while terminating), unknown-field handling (``fieldValidation``), ``limit``/``continue``
and ``dryRun``.  Every read-modify-write runs under the store's lock.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from dra_driver.validation import FieldError
from migdra_devcluster.apiserver.admission import admit, invalid_error
from migdra_devcluster.apiserver.apply import apply_claim_status
from migdra_devcluster.apiserver.conversion import from_storage, to_storage
from migdra_devcluster.apiserver.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    MethodNotAllowed,
    NotFound,
    UnsupportedMediaType,
)
from migdra_devcluster.apiserver.patch import (
    APPLY_PATCH_TYPES,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)
from migdra_devcluster.apiserver.registry import Registry, ResourceType
from migdra_devcluster.apiserver.schema import decode_fields
from migdra_devcluster.apiserver.selectors import FieldSelector, LabelSelector
from migdra_devcluster.apiserver.store import Store

FOREGROUND_FINALIZER = "foregroundDeletion"
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FIELD_VALIDATION = ("Strict", "Warn", "Ignore")
_UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
_SERVER_METADATA = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")


def now_rfc3339() -> str:
    """kube's ``metav1.Time`` wire format: UTC, whole seconds."""
    return _rfc3339(datetime.now(UTC))


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


GracefulState = Literal["immediate", "graceful", "pending"]
"""What :meth:`Operations._before_delete` decided, as kube's ``rest.BeforeDelete`` answers it:
``immediate`` (no graceful deletion: remove now, or mark while finalizers remain), ``graceful`` (the
object's ``deletionTimestamp``/``deletionGracePeriodSeconds`` were set or shortened) or ``pending`` (a
graceful deletion is already under way and this request does not shorten it: nothing changes)."""


def removed_once_finalized(resource: ResourceType, meta: dict[str, Any]) -> bool:
    """Whether an object with this metadata goes as soon as it has no finalizers left.

    kube's ``ShouldDeleteDuringUpdate``: only objects being deleted; for kinds with graceful deletion
    (pods) only once the grace period is 0, since a pod whose finalizers are removed while its
    containers still stop must wait for the kubelet's zero-grace delete.  Other kinds keep the rule this
    server always had (any ``deletionTimestamp``).  Namespaces are removed by the namespace cleaner.
    """
    if not meta.get("deletionTimestamp") or meta.get("finalizers") or resource.key == "namespaces":
        return False
    return resource.graceful_delete is None or not meta.get("deletionGracePeriodSeconds")


@dataclass
class WriteOptions:
    """Query options shared by create, update and patch."""

    field_validation: str = "Warn"
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    field_manager: str = ""  # server-side apply's ``fieldManager``
    force: bool = False  # ... and its ``force``


@dataclass
class DeleteOptions:
    """``DeleteOptions`` from the body and query string."""

    propagation_policy: str = "Background"
    grace_period_seconds: int | None = None
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None
    dry_run: bool = False


def _not_found(resource: ResourceType, name: str) -> NotFound:
    return NotFound(f'{resource.key} "{name}" not found', name=name, group=resource.group, kind=resource.plural)


_JSON_PATCH_FAILED = "the server rejected our request due to an error in our request"
"""What kube-apiserver answers (422) for a JSON patch that cannot be applied: a failed ``test``, a
missing path (apimachinery's default text for the code, the reason lost)."""
_GO_MAP = "map[string]interface {}"


def _go_unmarshal_error(value: Any, go_type: str) -> str:
    """encoding/json's error for a patch body of the wrong JSON type, in the words kube passes on."""
    json_type = {bool: "bool", str: "string", list: "array", dict: "object"}.get(type(value), "number")
    return f"json: cannot unmarshal {json_type} into Go value of type {go_type}"


def _conflict(resource: ResourceType, name: str, why: str) -> Conflict:
    return Conflict(
        f'Operation cannot be fulfilled on {resource.key} "{name}": {why}',
        name=name,
        group=resource.group,
        kind=resource.plural,
    )


def _precondition_failed(resource: ResourceType, name: str, why: str) -> Conflict:
    """A delete whose preconditions fail: kube's storage layer names the kind (``ResourceClaim.resource.k8s.io``),
    where an update's conflict names the resource."""
    return Conflict(
        f'Operation cannot be fulfilled on {resource.qualified_kind} "{name}": {why}',
        name=name,
        group=resource.group,
        kind=resource.kind,
    )


def _spec_view(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``generation`` tracks: everything except metadata, status and type information."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Operations:
    """The verbs, over one :class:`Store` and the resource :class:`Registry`."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    # -- decoding ----------------------------------------------------------------------------------

    def decode(self, resource: ResourceType, body: Any, options: WriteOptions) -> dict[str, Any]:
        """Check a request body's type information and drop unknown fields per ``fieldValidation``."""
        if not isinstance(body, dict):
            raise BadRequest(
                f"{resource.kind} in version {resource.version!r} cannot be handled: body is not an object"
            )
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        if api_version is not None and api_version != resource.group_version:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({resource.group_version})"
            )
        if kind is not None and kind != resource.kind:
            raise BadRequest(f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})")
        if options.field_validation not in _FIELD_VALIDATION:
            raise BadRequest(f"fieldValidation must be one of {', '.join(_FIELD_VALIDATION)}")
        decoded = decode_fields(resource.model, body)
        cannot = f'{resource.kind} in version "{resource.version}" cannot be handled as a {resource.kind}'
        if decoded.errors:
            raise BadRequest(f"{cannot}: {decoded.errors[0]}")
        if decoded.unknown and options.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{path}"' for path in decoded.unknown)
            raise BadRequest(f"{cannot}: strict decoding error: {listed}")
        if options.field_validation == "Warn":
            options.warnings.extend(f'unknown field "{path}"' for path in decoded.unknown)
        body["apiVersion"] = resource.group_version
        body["kind"] = resource.kind
        if not isinstance(body.get("metadata", {}), dict):
            raise BadRequest("metadata must be an object")
        body.setdefault("metadata", {})
        return body

    # -- reads -------------------------------------------------------------------------------------

    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """The object, or 404."""
        with self.store.lock:
            obj = self._load(resource, namespace, name)
        if obj is None:
            raise _not_found(resource, name)
        return obj

    # -- storage, in the served form -----------------------------------------------------------------

    def _load(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        stored = self.store.get(resource.storage_key, namespace, name)
        return None if stored is None else from_storage(resource, stored)

    def _load_all(self, resource: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        return [from_storage(resource, obj) for obj in self.store.objects(resource.storage_key, namespace)]

    def _save(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return from_storage(resource, self.store.put(resource.storage_key, to_storage(resource, obj)))

    def _drop(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return from_storage(resource, self.store.remove(resource.storage_key, to_storage(resource, obj)))

    def list_objects(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """A ``<Kind>List``; with ``limit``, a page and an opaque ``continue`` token for the rest."""
        start: list[str] | None = None
        with self.store.lock:
            list_version = self.store.resource_version
            if continue_token:
                token_version, start = self._decode_continue(continue_token)
                if token_version < self.store.compacted_resource_version:
                    raise Gone(
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter."
                    )
                list_version = token_version
            objects = self._load_all(resource, namespace)
        items = [
            obj
            for obj in objects
            if (start is None or [obj["metadata"].get("namespace", ""), obj["metadata"]["name"]] > start)
            and labels.matches(obj)
            and fields.matches(obj)
        ]
        metadata: dict[str, Any] = {"resourceVersion": str(list_version)}
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            metadata["continue"] = self._encode_continue(list_version, [last.get("namespace", ""), last["name"]])
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": metadata,
            "items": items,
        }

    @staticmethod
    def _encode_continue(resource_version: int, start: list[str]) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, list[str]]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            return int(data["rv"]), [str(part) for part in data["start"]]
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise BadRequest(f"continue key is not valid: {exc}") from exc

    # -- create ------------------------------------------------------------------------------------

    def create(self, resource: ResourceType, namespace: str | None, body: Any, options: WriteOptions) -> dict[str, Any]:
        """Create from ``body``; the stored object (201) or AlreadyExists/Invalid/NotFound(namespace)."""
        obj = self.decode(resource, body, options)
        meta = obj["metadata"]
        if resource.namespaced:
            body_namespace = meta.get("namespace")
            if namespace and body_namespace and body_namespace != namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or body_namespace or ""
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise BadRequest("resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_SUFFIX_ALPHABET, k=5))
        for key in (*_SERVER_METADATA, "selfLink", "managedFields"):
            meta.pop(key, None)
        obj = apply_merge_patch(copy.deepcopy(dict(resource.create_defaults)), obj) if resource.create_defaults else obj
        if resource.defaulter is not None:
            resource.defaulter(obj)
        if resource.has_status and resource.initial_status is not None:
            obj.pop("status", None)
            if resource.initial_status:
                obj["status"] = copy.deepcopy(dict(resource.initial_status))
        admit(resource, obj, None, None)
        meta = obj["metadata"]
        with self.store.lock:
            if resource.namespaced:
                self._require_namespace(meta["namespace"], creating=True)
            if self.store.get(resource.storage_key, meta.get("namespace", ""), meta["name"]) is not None:
                raise AlreadyExists(
                    f'{resource.key} "{meta["name"]}" already exists',
                    name=meta["name"],
                    group=resource.group,
                    kind=resource.plural,
                )
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if resource.tracks_generation:
                meta["generation"] = 1
            if options.dry_run:
                return obj
            return self._save(resource, obj)

    def _require_namespace(self, namespace: str, *, creating: bool) -> None:
        ns = self.store.get("namespaces", "", namespace)
        if ns is None:
            raise NotFound(f'namespaces "{namespace}" not found', name=namespace, kind="namespaces")
        if creating and ns["metadata"].get("deletionTimestamp"):
            raise Forbidden(
                f"unable to create new content in namespace {namespace} because it is being terminated",
                name=namespace,
                kind="namespaces",
            )

    # -- update and patch --------------------------------------------------------------------------

    def update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None,
        options: WriteOptions,
    ) -> dict[str, Any]:
        """Replace (PUT) the object or, with ``subresource="status"``, only its status."""
        obj = self.decode(resource, body, options)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise BadRequest(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if resource.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        with self.store.lock:
            old = self._load(resource, namespace, name)
            if old is None:
                raise _not_found(resource, name)
            return self._write_update(resource, old, obj, subresource, options)

    def patch(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        patch_body: Any,
        subresource: str | None,
        options: WriteOptions,
    ) -> dict[str, Any]:
        """Apply a JSON, merge or strategic-merge patch to the object (or its status)."""
        if patch_type in APPLY_PATCH_TYPES:
            if resource.kind != "ResourceClaim" or subresource != "status":
                raise UnsupportedMediaType(
                    "server-side apply is supported by the migdra local API server for resourceclaims/status only"
                )
            with self.store.lock:
                old = self._load(resource, namespace, name)
                if old is None:
                    raise _not_found(resource, name)
                now = datetime.now(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
                applied = apply_claim_status(old, patch_body, options.field_manager, options.force, now)
                with_fields = copy.deepcopy(old)
                with_fields["metadata"]["managedFields"] = applied["metadata"]["managedFields"]
                return self._write_update(resource, with_fields, applied, subresource, options)
        if patch_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
            raise UnsupportedMediaType("415: Unsupported Media Type")
        with self.store.lock:
            old = self._load(resource, namespace, name)
            if old is None:
                raise _not_found(resource, name)
            if patch_type == JSON_PATCH:
                if not isinstance(patch_body, list):
                    raise BadRequest(
                        f"error decoding patch: {_go_unmarshal_error(patch_body, '[]handlers.jsonPatchOp')}"
                    )
                try:
                    patched = apply_json_patch(old, patch_body)
                except (BadRequest, Invalid) as exc:  # kube: every failed operation is 422 with a generic text
                    raise Invalid(_JSON_PATCH_FAILED) from exc
            elif patch_type == MERGE_PATCH:
                if not isinstance(patch_body, dict):
                    raise BadRequest(f"error decoding patch: {_go_unmarshal_error(patch_body, _GO_MAP)}")
                patched = apply_merge_patch(old, patch_body)
            else:
                if not isinstance(patch_body, dict):
                    raise BadRequest(_go_unmarshal_error(patch_body, _GO_MAP))
                patched = apply_strategic_merge_patch(old, patch_body, resource.kind)
            obj = self.decode(resource, copy.deepcopy(patched), options)
            return self._write_update(resource, old, obj, subresource, options)

    def _write_update(
        self,
        resource: ResourceType,
        old: dict[str, Any],
        obj: dict[str, Any],
        subresource: str | None,
        options: WriteOptions,
    ) -> dict[str, Any]:
        name = old["metadata"]["name"]
        requested_version = obj["metadata"].get("resourceVersion")
        if requested_version and requested_version != old["metadata"]["resourceVersion"]:
            raise _conflict(
                resource,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        elif subresource is None:
            new = obj
            if resource.defaulter is not None:
                resource.defaulter(new)
            new_meta = new["metadata"]
            old_meta = old["metadata"]
            for key in _SERVER_METADATA:
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            new_meta.pop("managedFields", None)
            new_meta.pop("selfLink", None)
            new_meta["name"] = name
            if resource.namespaced:
                new_meta["namespace"] = old_meta["namespace"]
            if resource.has_status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            if old_meta.get("deletionTimestamp"):
                added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    message = "no new finalizers can be added if the object is being deleted"
                    raise invalid_error(
                        resource, name, [FieldError("metadata.finalizers", "FieldValueForbidden", message)]
                    )
            if resource.tracks_generation and _spec_view(new) != _spec_view(old):
                new_meta["generation"] = int(old_meta.get("generation", 1)) + 1
        else:
            raise MethodNotAllowed(f"the server does not allow this method on the requested resource ({subresource})")
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        admit(resource, new, old, subresource)
        if new == old:
            return old
        if options.dry_run:
            return new
        if removed_once_finalized(resource, new["metadata"]):
            return self._drop(resource, new)
        return self._save(resource, new)

    def bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """``pods/binding``: set ``spec.nodeName`` once, as the scheduler does; Conflict if already bound."""
        pods = self.registry.lookup("", "v1", "pods")
        if pods is None:
            raise NotFound("the server could not find the requested resource")
        if not isinstance(body, dict) or not isinstance(body.get("target"), dict) or not body["target"].get("name"):
            raise BadRequest("a Binding needs target.name")
        with self.store.lock:
            old = self.store.get(pods.key, namespace, name)
            if old is None:
                raise _not_found(pods, name)
            if old.get("spec", {}).get("nodeName"):
                raise _conflict(pods, name, f'pod {name} is already assigned to node "{old["spec"]["nodeName"]}"')
            new = copy.deepcopy(old)
            new.setdefault("spec", {})["nodeName"] = body["target"]["name"]
            conditions = [
                c for c in new.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"
            ]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            new["status"]["conditions"] = conditions
            self.store.put(pods.key, new)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- delete ------------------------------------------------------------------------------------

    def delete(self, resource: ResourceType, namespace: str, name: str, options: DeleteOptions) -> dict[str, Any]:
        """Delete now, or mark for deletion; returns the object or a Status.

        An object is only marked (``deletionTimestamp`` set, kept, 200 with the object) while
        finalizers remain or, for kinds with graceful deletion (pods), while its grace period is above
        0: some other component (the kubelet) finishes the deletion.  The steps follow kube's
        ``Store.Delete``: ``BeforeDelete`` first, so a pending graceful deletion can only be shortened
        and DeleteOptions cannot change its finalizers, then the graceful update, then the removal.
        """
        if options.propagation_policy not in ("Orphan", "Background", "Foreground"):
            raise BadRequest(
                f"propagationPolicy {options.propagation_policy!r} is not one of Orphan, Background, Foreground"
            )
        with self.store.lock:
            obj = self._load(resource, namespace, name)
            if obj is None:
                raise _not_found(resource, name)
            meta = obj["metadata"]
            if options.precondition_uid and options.precondition_uid != meta["uid"]:
                raise _precondition_failed(
                    resource,
                    name,
                    f"the UID in the precondition ({options.precondition_uid}) does not match the UID in record "
                    f"({meta['uid']}). The object might have been deleted and then recreated",
                )
            if (
                options.precondition_resource_version
                and options.precondition_resource_version != meta["resourceVersion"]
            ):
                raise _precondition_failed(
                    resource,
                    name,
                    f"the ResourceVersion in the precondition ({options.precondition_resource_version}) does not "
                    f"match the ResourceVersion in record ({meta['resourceVersion']}). The object might have been "
                    "modified",
                )
            if resource.key == "namespaces" and name in _UNDELETABLE_NAMESPACES:
                raise Forbidden(
                    f'namespaces "{name}" is forbidden: this namespace may not be deleted', name=name, kind="namespaces"
                )
            marked = copy.deepcopy(obj)
            state = self._before_delete(resource, marked, options.grace_period_seconds)
            if state == "pending":
                return obj
            if options.dry_run:
                return marked
            if options.propagation_policy == "Orphan":
                self._orphan_dependents(meta["uid"])
            finalizers = list(meta.get("finalizers") or [])
            if options.propagation_policy == "Foreground" and FOREGROUND_FINALIZER not in finalizers:
                finalizers.append(FOREGROUND_FINALIZER)
            if state == "graceful":
                # As kube: the graceful update is stored (a MODIFIED event) even when the removal follows.
                if finalizers:
                    marked["metadata"]["finalizers"] = finalizers
                saved = self._save(resource, marked)
                if finalizers or saved["metadata"]["deletionGracePeriodSeconds"]:
                    return saved
                final = self._drop(resource, saved)
            elif resource.key == "namespaces" or finalizers:
                if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
                    return obj
                marked = copy.deepcopy(obj)
                marked["metadata"]["finalizers"] = finalizers
                marked["metadata"].setdefault("deletionTimestamp", now_rfc3339())
                marked["metadata"].setdefault("deletionGracePeriodSeconds", options.grace_period_seconds or 0)
                if resource.key == "namespaces":
                    marked.setdefault("status", {})["phase"] = "Terminating"
                if not marked["metadata"]["finalizers"]:
                    del marked["metadata"]["finalizers"]
                return self._save(resource, marked)
            else:
                final = self._drop(resource, obj)
        if resource.delete_returns_object:
            return final
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": resource.group,
                "kind": resource.plural,
                "uid": final["metadata"]["uid"],
            },
        }

    @staticmethod
    def _before_delete(resource: ResourceType, obj: dict[str, Any], requested: int | None) -> GracefulState:
        """kube's ``rest.BeforeDelete`` for graceful deletion, on ``obj`` (a copy) in place.

        A kind without graceful deletion is ``immediate``.  An object not yet being deleted gets the
        kind's grace period (``ResourceType.graceful_delete``): ``deletionTimestamp`` = now + grace,
        ``deletionGracePeriodSeconds`` = grace and, as kube bumps it when deletion begins,
        ``generation`` + 1.  One already being deleted with a positive grace period may only be hurried:
        a shorter requested period moves the deadline to (deletion start + new period); none, or one
        at least as long, leaves it ``pending``.  One being deleted with grace 0 (or none recorded) is
        ``immediate``: it goes as soon as nothing holds it.  A negative requested period means 1 s.
        """
        if resource.graceful_delete is None:
            return "immediate"
        meta = obj["metadata"]
        if requested is not None and requested < 0:
            requested = 1
        if meta.get("deletionTimestamp"):
            current = int(meta.get("deletionGracePeriodSeconds") or 0)
            if current <= 0:
                return "immediate"
            if requested is None or requested >= current:
                return "pending"
            deadline = datetime.fromisoformat(meta["deletionTimestamp"])
            meta["deletionTimestamp"] = _rfc3339(deadline - timedelta(seconds=current - requested))
            meta["deletionGracePeriodSeconds"] = requested
            return "graceful"
        grace = resource.graceful_delete(obj, requested)
        meta["deletionTimestamp"] = _rfc3339(datetime.now(UTC) + timedelta(seconds=grace))
        meta["deletionGracePeriodSeconds"] = grace
        if int(meta.get("generation") or 0) > 0:
            meta["generation"] = int(meta["generation"]) + 1
        return "graceful"

    def delete_collection(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        options: DeleteOptions,
    ) -> dict[str, Any]:
        """Delete every matching object; returns the list of what was deleted or marked."""
        with self.store.lock:
            targets = [o for o in self._load_all(resource, namespace) if labels.matches(o) and fields.matches(o)]
            deleted = []
            for obj in targets:
                meta = obj["metadata"]
                result = self.delete(resource, meta.get("namespace", ""), meta["name"], options)
                deleted.append(obj if result.get("kind") == "Status" else result)
            version = self.store.resource_version
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.group_version,
            "metadata": {"resourceVersion": str(version)},
            "items": deleted,
        }

    def _orphan_dependents(self, owner_uid: str) -> None:
        for key, obj in self.store.all_objects():
            refs = obj["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in refs):
                orphaned = copy.deepcopy(obj)
                remaining = [ref for ref in refs if ref.get("uid") != owner_uid]
                if remaining:
                    orphaned["metadata"]["ownerReferences"] = remaining
                else:
                    del orphaned["metadata"]["ownerReferences"]
                self.store.put(key, orphaned)

    def remove_finalizer(self, resource_key: str, obj: dict[str, Any], finalizer: str) -> None:
        """Drop one finalizer (the garbage collector's own), removing the object if it was the last."""
        with self.store.lock:
            meta = obj["metadata"]
            current = self.store.get(resource_key, meta.get("namespace", ""), meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                return
            updated = copy.deepcopy(current)
            updated["metadata"]["finalizers"] = [f for f in current["metadata"].get("finalizers", []) if f != finalizer]
            if not updated["metadata"]["finalizers"]:
                del updated["metadata"]["finalizers"]
                if removed_once_finalized(self.registry.by_key(resource_key), updated["metadata"]):
                    self.store.remove(resource_key, updated)
                    return
            self.store.put(resource_key, updated)
