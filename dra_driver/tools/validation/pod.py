"""The DRA part of a Pod's validation: ``spec.resourceClaims``, as kube's core validation checks it
(``validatePodResourceClaims``): each entry a unique DNS label naming exactly one source, a claim or a
template, whose name is a DNS subdomain.  The rest of a Pod is not validated here.
"""

from __future__ import annotations

import json

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation.errors import FieldError, RawValue, duplicate, invalid
from dra_driver.tools.validation.fields import as_object, get_array, get_string
from dra_driver.tools.validation.names import validate_dns_label, validate_dns_subdomain
from dra_driver.tools.validation.paths import ROOT, FieldPath

_BOTH = "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"
_NEITHER = "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"


def validate_pod(obj: JSON, old: JSON | None) -> list[FieldError]:
    """Every error of ``spec.resourceClaims`` (on create and update: the list is immutable anyway)."""
    errors: list[FieldError] = []
    spec = as_object(obj.get("spec") or {}, ROOT.child("spec"), errors) or {}
    path = ROOT.child("spec", "resourceClaims")
    seen: set[str] = set()
    for position, value in enumerate(get_array(spec, "resourceClaims", ROOT.child("spec"), errors) or []):
        entry_path = path.index(position)
        entry = as_object(value, entry_path, errors)
        if entry is None:
            continue
        name = get_string(entry, "name", entry_path, errors) or ""
        if name in seen:
            errors.append(duplicate(entry_path.child("name"), name))
        else:
            errors.extend(validate_dns_label(name, entry_path.child("name")))
            seen.add(name)
        errors.extend(_validate_source(entry, name, entry_path, errors))
    return errors


def _validate_source(entry: JSON, name: str, path: FieldPath, errors: list[FieldError]) -> list[FieldError]:
    claim = get_string(entry, "resourceClaimName", path, errors)
    template = get_string(entry, "resourceClaimTemplateName", path, errors)
    if claim is not None and template is not None:
        return [invalid(path, _go_struct(name, claim, template), _BOTH)]
    if claim is None and template is None:
        return [invalid(path, _go_struct(name, claim, template), _NEITHER)]
    if claim is not None:
        return validate_dns_subdomain(claim, path.child("resourceClaimName"))
    return validate_dns_subdomain(template or "", path.child("resourceClaimTemplateName"))


def _go_struct(name: str, claim: str | None, template: str | None) -> RawValue:
    """kube shows the whole entry as its internal Go struct, JSON-encoded (field names unexported-style)."""
    value = {"Name": name, "ResourceClaimName": claim, "ResourceClaimTemplateName": template}
    return RawValue(json.dumps(value, separators=(",", ":")))
