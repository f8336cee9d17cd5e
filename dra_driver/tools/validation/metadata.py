"""Generic ``metadata`` rules every kind shares (apimachinery's ``ValidateObjectMeta`` on create).

Owns: ``name`` (required, by the kind's name rule), ``generateName`` (the same rule with a trailing
``-`` allowed), ``namespace`` (required DNS label for namespaced kinds, forbidden otherwise), label keys
and values, annotation keys and the 256 KiB total size of annotations.  Like kube, it expects a
generated name to be filled in already.  Immutability of metadata on update is the server's business.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Literal

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, forbidden, invalid, required, too_long
from dra_driver.tools.validation.fields import (
    byte_length,
    get_object,
    get_string,
    get_string_map,
)
from dra_driver.tools.validation.names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_value,
    is_qualified_name,
    validate_label_name,
)
from dra_driver.tools.validation.paths import ROOT, FieldPath

NameRule = Literal["dns-subdomain", "dns-label", "path-segment"]


def is_path_segment_name(name: str) -> list[str]:
    """kube's ``path.IsValidPathSegmentName`` (RBAC objects: ``system:controller:...`` is a valid name)."""
    if name in {".", ".."}:
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


_NAME_RULES: Final[Mapping[str, Callable[[str], list[str]]]] = {
    "dns-subdomain": is_dns1123_subdomain,
    "dns-label": is_dns1123_label,
    "path-segment": is_path_segment_name,
}


def validate_object_meta(obj: JSON, namespaced: bool, name_rule: NameRule) -> list[FieldError]:
    """``metadata`` of ``obj`` on create; ``name_rule`` is the kind's rule for names (most kinds: DNS subdomain)."""
    errors: list[FieldError] = []
    path = ROOT.child("metadata")
    metadata = get_object(obj, "metadata", ROOT, errors) or {}
    is_valid_name = _NAME_RULES[name_rule]

    generate_name = get_string(metadata, "generateName", path, errors)
    if generate_name:
        for message in is_valid_name(_mask_trailing_dash(generate_name)):
            errors.append(invalid(path.child("generateName"), generate_name, message))
    name = get_string(metadata, "name", path, errors)
    if not name:
        errors.append(required(path.child("name"), "name or generateName is required"))
    else:
        errors.extend(invalid(path.child("name"), name, message) for message in is_valid_name(name))

    namespace = get_string(metadata, "namespace", path, errors)
    if namespaced:
        if not namespace:
            errors.append(required(path.child("namespace")))
        else:
            errors.extend(
                invalid(path.child("namespace"), namespace, message) for message in is_dns1123_label(namespace)
            )
    elif namespace:
        errors.append(forbidden(path.child("namespace"), "not allowed on this type"))

    errors.extend(validate_labels(get_string_map(metadata, "labels", path, errors), path.child("labels")))
    errors.extend(
        validate_annotations(get_string_map(metadata, "annotations", path, errors), path.child("annotations"))
    )
    return errors


def validate_labels(labels: Mapping[str, str], path: FieldPath) -> list[FieldError]:
    """Label keys and values; kube reports both at the map's path with the offending key or value."""
    errors: list[FieldError] = []
    for key in sorted(labels):
        errors.extend(validate_label_name(key, path))
        errors.extend(invalid(path, labels[key], message) for message in is_label_value(labels[key]))
    return errors


def validate_annotations(annotations: Mapping[str, str], path: FieldPath) -> list[FieldError]:
    """Annotation keys (label-key rules, any case) and their total size, keys plus values."""
    errors: list[FieldError] = []
    for key in sorted(annotations):
        errors.extend(invalid(path, key, message) for message in is_qualified_name(key.lower()))
    total = sum(byte_length(key) + byte_length(value) for key, value in annotations.items())
    if total > limits.TOTAL_ANNOTATIONS_MAX_BYTES:
        errors.append(too_long(path, limits.TOTAL_ANNOTATIONS_MAX_BYTES))
    return errors


def _mask_trailing_dash(name: str) -> str:
    """kube's ``maskTrailingDash`` for ``generateName`` prefixes (it also drops the character before the dash)."""
    return name[:-2] + "a" if name.endswith("-") else name
