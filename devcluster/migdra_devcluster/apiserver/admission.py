"""Admission: the checks an object passes before it is stored, and how failures read.

Generic metadata rules (``metadata.py``) run first, then the kind's validation hook (by default the
product's ``dra_driver.validation.validate``).  Any error becomes one 422 ``Invalid`` whose message and
causes are formatted exactly like kube-apiserver's, so tools that parse them (and people) are not
surprised.  This module decides nothing about fields itself.
"""

from __future__ import annotations

from typing import Any

from dra_driver import validation
from dra_driver.validation import FieldError
from migdra_devcluster.apiserver.errors import Invalid
from migdra_devcluster.apiserver.metadata import validate_metadata
from migdra_devcluster.apiserver.registry import ResourceType


def admit(resource: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, subresource: str | None) -> None:
    """Raise :class:`Invalid` listing every problem of ``obj`` (``old`` is None on create)."""
    errors: list[FieldError] = [] if subresource else validate_metadata(resource, obj, old)
    hook = resource.validate or validation.validate
    errors.extend(hook(resource.group, resource.version, resource.kind, obj, old, subresource))
    if errors:
        raise invalid_error(resource, obj.get("metadata", {}).get("name", ""), errors)


def invalid_error(resource: ResourceType, name: str, errors: list[FieldError]) -> Invalid:
    """kube's ``NewInvalid``: ``<Kind>.<group> "<name>" is invalid: [<detail>, ...]`` with causes."""
    details = [error.detail() for error in errors]
    summary = details[0] if len(details) == 1 else "[" + ", ".join(details) + "]"
    causes = [error.as_cause() for error in errors]
    return Invalid(
        f'{resource.qualified_kind} "{name}" is invalid: {summary}',
        name=name,
        group=resource.group,
        kind=resource.kind,
        causes=causes,
    )
