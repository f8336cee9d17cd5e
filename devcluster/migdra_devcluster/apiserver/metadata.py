"""The server's own ``metadata`` rules on top of the shared ``validate_object_meta``.

``validation.validate_object_meta`` owns what kube's ``ValidateObjectMeta`` checks on create (names,
namespace, labels, annotations).  This module adds what only the server can judge: finalizer names and,
on update, the immutability of ``name``, ``namespace``, ``uid`` and ``creationTimestamp``.  It only
reports :class:`FieldError` values; it never raises and never changes the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.validation import FieldError, validate_object_meta
from dra_driver.validation.names import is_qualified_name
from migdra_devcluster.apiserver.registry import ResourceType

_IMMUTABLE = ("name", "namespace", "uid", "creationTimestamp")


def validate_metadata(
    resource: ResourceType, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[FieldError]:
    """Every generic metadata error of ``obj`` (a create when ``old`` is None, else an update)."""
    errors = validate_object_meta(dict(obj), resource.namespaced, resource.name_rule)
    meta = obj.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    for index, finalizer in enumerate(finalizers):
        field = f"metadata.finalizers[{index}]"
        if not isinstance(finalizer, str) or not finalizer:
            errors.append(FieldError(field, "FieldValueInvalid", "must be a non-empty string", finalizer))
        elif "/" in finalizer:
            errors.extend(
                FieldError(field, "FieldValueInvalid", message, finalizer) for message in is_qualified_name(finalizer)
            )
    if old is not None:
        old_meta = old.get("metadata") or {}
        for key in _IMMUTABLE:
            if meta.get(key) != old_meta.get(key):
                errors.append(FieldError(f"metadata.{key}", "FieldValueInvalid", "field is immutable", meta.get(key)))
    return errors
