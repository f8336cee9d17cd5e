"""ResourceClaim and ResourceClaimTemplate ``spec`` rules (resource.k8s.io/v1).

Owns the claim spec (``spec.devices``: requests with ``exactly`` or ``firstAvailable``, constraints and
config, each bounded, with references to request names checked), the template's ``spec.metadata`` and
``spec.spec``, and the immutability of both specs: on update only immutability is checked, as kube does,
because the rest cannot have changed.  :class:`RequestNames` is shared with the status rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.cel_selectors import validate_selectors
from dra_driver.tools.validation.errors import FieldError, invalid, not_supported, required
from dra_driver.tools.validation.fields import (
    as_object,
    as_string,
    get_array,
    get_boolean,
    get_integer,
    get_object,
    get_string,
    get_string_map,
)
from dra_driver.tools.validation.immutability import validate_immutable
from dra_driver.tools.validation.lists import field_key, string_key, validate_list, validate_set
from dra_driver.tools.validation.metadata import validate_annotations, validate_labels
from dra_driver.tools.validation.names import (
    validate_dns_label,
    validate_dns_subdomain,
    validate_fully_qualified_name,
)
from dra_driver.tools.validation.opaque import validate_device_configuration
from dra_driver.tools.validation.paths import ROOT, FieldPath
from dra_driver.tools.validation.taints import validate_toleration

ALLOCATION_MODES: Final = ("All", "ExactCount")
_DEFAULT_ALLOCATION_MODE: Final = "ExactCount"
_REQUEST_REF_MESSAGE: Final = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)
_EXACTLY_OR_FIRST_AVAILABLE: Final = "exactly one of `exactly` or `firstAvailable` is required"
_MATCH_OR_DISTINCT: Final = 'exactly one of "matchAttribute" or "distinctAttribute" is required'


@dataclass(frozen=True)
class RequestNames:
    """The request names of a claim, each with its subrequest names (``None`` for an ``exactly`` request)."""

    requests: Mapping[str, frozenset[str] | None]

    @classmethod
    def of_claim_spec(cls, spec: JSON | None) -> RequestNames:
        """Gathered leniently from a claim ``spec``: malformed entries are simply not names."""
        devices = (spec or {}).get("devices")
        entries = devices.get("requests") if isinstance(devices, Mapping) else None
        names: dict[str, frozenset[str] | None] = {}
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                continue
            subrequests = entry.get("firstAvailable")
            if isinstance(subrequests, list) and subrequests:
                names[entry["name"]] = frozenset(
                    sub["name"] for sub in subrequests if isinstance(sub, Mapping) and isinstance(sub.get("name"), str)
                )
            else:
                names[entry["name"]] = None
        return cls(names)

    def has(self, reference: str) -> bool:
        """Whether ``reference`` (``<request>`` or ``<request>/<subrequest>``) names a request of the claim."""
        segments = reference.split("/")
        if len(segments) > 2 or segments[0] not in self.requests:
            return False
        if len(segments) == 1:
            return True
        subrequests = self.requests[segments[0]]
        return subrequests is not None and segments[1] in subrequests


def validate_request_reference(value: object, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    """An entry of a ``requests`` list in constraints, config or an allocation result."""
    errors: list[FieldError] = []
    reference = as_string(value, path, errors)
    if reference is None:
        return errors
    segments = reference.split("/")
    if len(segments) > 2:
        return [invalid(path, reference, _REQUEST_REF_MESSAGE)]
    for segment in segments:
        errors.extend(validate_dns_label(segment, path))
    if not request_names.has(reference):
        errors.append(invalid(path, reference, _REQUEST_REF_MESSAGE))
    return errors


def validate_request_references(
    items: list[object] | None, path: FieldPath, request_names: RequestNames
) -> list[FieldError]:
    """A ``requests`` list: at most 32 unique references to requests of the claim."""

    def rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return validate_request_reference(value, item_path, request_names)

    return validate_set(items, limits.CLAIM_MAX_REQUESTS, rule, string_key, path)


def validate_resource_claim(obj: JSON, old: JSON | None) -> list[FieldError]:
    """A ResourceClaim on create; on update of the main resource, only that ``spec`` did not change."""
    if old is not None:
        return validate_immutable(obj.get("spec"), old.get("spec"), ROOT.child("spec"))
    errors: list[FieldError] = []
    spec = get_object(obj, "spec", ROOT, errors) or {}
    return errors + validate_claim_spec(spec, ROOT.child("spec"))


def validate_resource_claim_template(obj: JSON, old: JSON | None) -> list[FieldError]:
    """A ResourceClaimTemplate on create; on update, only that ``spec`` did not change."""
    if old is not None:
        return validate_immutable(obj.get("spec"), old.get("spec"), ROOT.child("spec"))
    errors: list[FieldError] = []
    path = ROOT.child("spec")
    spec = get_object(obj, "spec", ROOT, errors) or {}
    template_metadata = get_object(spec, "metadata", path, errors) or {}
    metadata_path = path.child("metadata")
    errors.extend(
        validate_annotations(
            get_string_map(template_metadata, "annotations", metadata_path, errors), metadata_path.child("annotations")
        )
    )
    errors.extend(
        validate_labels(
            get_string_map(template_metadata, "labels", metadata_path, errors), metadata_path.child("labels")
        )
    )
    claim_spec = get_object(spec, "spec", path, errors) or {}
    return errors + validate_claim_spec(claim_spec, path.child("spec"))


def validate_claim_spec(spec: JSON, path: FieldPath) -> list[FieldError]:
    """A ``ResourceClaimSpec`` at ``path`` (``spec`` of a claim, ``spec.spec`` of a template)."""
    errors: list[FieldError] = []
    devices = get_object(spec, "devices", path, errors) or {}
    devices_path = path.child("devices")
    request_names = RequestNames.of_claim_spec(spec)

    requests = get_array(devices, "requests", devices_path, errors)
    errors.extend(
        validate_set(
            requests, limits.CLAIM_MAX_REQUESTS, _validate_request, field_key("name"), devices_path.child("requests")
        )
    )

    def constraint_rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return _validate_constraint(value, item_path, request_names)

    def config_rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return _validate_claim_config(value, item_path, request_names)

    constraints = get_array(devices, "constraints", devices_path, errors)
    errors.extend(
        validate_list(constraints, limits.CLAIM_MAX_CONSTRAINTS, constraint_rule, devices_path.child("constraints"))
    )
    config = get_array(devices, "config", devices_path, errors)
    errors.extend(validate_list(config, limits.CLAIM_MAX_CONFIG, config_rule, devices_path.child("config")))
    return errors


def _validate_request(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    request = as_object(value, path, errors) or {}
    errors.extend(validate_dns_label(get_string(request, "name", path, errors) or "", path.child("name")))
    exactly = get_object(request, "exactly", path, errors)
    first_available = get_array(request, "firstAvailable", path, errors)
    if exactly is not None and first_available:
        errors.append(invalid(path, None, _EXACTLY_OR_FIRST_AVAILABLE + ", but multiple fields are set"))
    elif first_available:
        errors.extend(
            validate_set(
                first_available,
                limits.REQUEST_MAX_SUBREQUESTS,
                _validate_subrequest,
                field_key("name"),
                path.child("firstAvailable"),
            )
        )
    elif exactly is not None:
        errors.extend(_validate_device_request_body(exactly, path.child("exactly")))
    else:
        errors.append(required(path, _EXACTLY_OR_FIRST_AVAILABLE))
    return errors


def _validate_subrequest(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    subrequest = as_object(value, path, errors) or {}
    errors.extend(validate_dns_label(get_string(subrequest, "name", path, errors) or "", path.child("name")))
    return errors + _validate_device_request_body(subrequest, path)


def _validate_device_request_body(request: JSON, path: FieldPath) -> list[FieldError]:
    """What ``exactly`` and a subrequest share: class, selectors, allocation mode and count, tolerations."""
    errors: list[FieldError] = []
    class_name = get_string(request, "deviceClassName", path, errors) or ""
    errors.extend(validate_dns_subdomain(class_name, path.child("deviceClassName")))
    selectors = get_array(request, "selectors", path, errors)
    errors.extend(validate_selectors(selectors, limits.REQUEST_MAX_SELECTORS, path.child("selectors")))
    errors.extend(_validate_allocation_mode(request, path))
    get_boolean(request, "adminAccess", path, errors)
    tolerations = get_array(request, "tolerations", path, errors)
    errors.extend(
        validate_list(tolerations, limits.REQUEST_MAX_TOLERATIONS, validate_toleration, path.child("tolerations"))
    )
    return errors


def _validate_allocation_mode(request: JSON, path: FieldPath) -> list[FieldError]:
    """``allocationMode`` (default ``ExactCount``) and ``count``; a count of 0 means unset, as in Go."""
    errors: list[FieldError] = []
    mode = get_string(request, "allocationMode", path, errors) or _DEFAULT_ALLOCATION_MODE
    count = get_integer(request, "count", path, errors) or 0
    if mode == "All":
        if count != 0:
            errors.append(invalid(path.child("count"), count, "must not be specified when allocationMode is 'All'"))
    elif mode == "ExactCount":
        if count < 0:  # 0 is unset and defaults to 1
            errors.append(invalid(path.child("count"), count, "must be greater than zero"))
    else:
        errors.append(not_supported(path.child("allocationMode"), mode, ALLOCATION_MODES))
    return errors


def _validate_constraint(value: object, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    errors: list[FieldError] = []
    constraint = as_object(value, path, errors) or {}
    requests = get_array(constraint, "requests", path, errors)
    errors.extend(validate_request_references(requests, path.child("requests"), request_names))
    match_attribute = get_string(constraint, "matchAttribute", path, errors)
    distinct_attribute = get_string(constraint, "distinctAttribute", path, errors)
    if match_attribute is not None:
        errors.extend(validate_fully_qualified_name(match_attribute, path.child("matchAttribute")))
    if distinct_attribute is not None:
        errors.extend(validate_fully_qualified_name(distinct_attribute, path.child("distinctAttribute")))
    if match_attribute is None and distinct_attribute is None:
        errors.append(required(path, _MATCH_OR_DISTINCT))
    elif match_attribute is not None and distinct_attribute is not None:
        errors.append(invalid(path, None, _MATCH_OR_DISTINCT + ", but multiple fields are set"))
    return errors


def _validate_claim_config(value: object, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    errors: list[FieldError] = []
    config = as_object(value, path, errors) or {}
    requests = get_array(config, "requests", path, errors)
    errors.extend(validate_request_references(requests, path.child("requests"), request_names))
    return errors + validate_device_configuration(config, path)
