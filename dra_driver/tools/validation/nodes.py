"""Node names and core ``NodeSelector``s, as ResourceSlices use them to say where devices are reachable.

Mirrors ``ValidateNodeName`` and ``ValidateNodeSelector`` of kube's core validation: at least one term;
``matchExpressions`` with the label operators (values are label values); ``matchFields`` only on
``metadata.name`` with ``In``/``NotIn`` and exactly one node name.
"""

from __future__ import annotations

from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation.errors import FieldError, forbidden, invalid, required
from dra_driver.tools.validation.fields import as_object, as_string, get_array, get_string
from dra_driver.tools.validation.lists import validate_list
from dra_driver.tools.validation.names import (
    is_dns1123_subdomain,
    validate_label_name,
    validate_label_value,
)
from dra_driver.tools.validation.paths import FieldPath

_NODE_FIELD_SELECTOR_KEYS: Final = frozenset({"metadata.name"})


def validate_node_name(name: str, path: FieldPath) -> list[FieldError]:
    """A node name is a DNS subdomain."""
    return [invalid(path, name, message) for message in is_dns1123_subdomain(name)]


def validate_node_selector(selector: JSON, path: FieldPath) -> list[FieldError]:
    """A core ``NodeSelector``: one or more valid terms."""
    errors: list[FieldError] = []
    terms = get_array(selector, "nodeSelectorTerms", path, errors)
    terms_path = path.child("nodeSelectorTerms")
    if not terms:
        return [*errors, required(terms_path, "must have at least one node selector term")]
    return errors + validate_list(terms, None, _validate_term, terms_path)


def _validate_term(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    term = as_object(value, path, errors) or {}
    expressions = get_array(term, "matchExpressions", path, errors)
    errors.extend(validate_list(expressions, None, _validate_label_requirement, path.child("matchExpressions")))
    field_requirements = get_array(term, "matchFields", path, errors)
    errors.extend(validate_list(field_requirements, None, _validate_field_requirement, path.child("matchFields")))
    return errors


def _strings(requirement: JSON, path: FieldPath, errors: list[FieldError]) -> list[str]:
    values = get_array(requirement, "values", path, errors) or []
    strings = []
    for position, value in enumerate(values):
        text = as_string(value, path.child("values").index(position), errors)
        if text is not None:
            strings.append(text)
    return strings


def _validate_label_requirement(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    requirement = as_object(value, path, errors) or {}
    operator = get_string(requirement, "operator", path, errors) or ""
    values = _strings(requirement, path, errors)
    values_path = path.child("values")
    if operator in ("In", "NotIn"):
        if not values:
            errors.append(required(values_path, "must be specified when `operator` is 'In' or 'NotIn'"))
        for position, label_value in enumerate(values):
            errors.extend(validate_label_value(label_value, values_path.index(position)))
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            errors.append(forbidden(values_path, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            errors.append(required(values_path, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    else:
        errors.append(invalid(path.child("operator"), operator, "not a valid selector operator"))
    errors.extend(validate_label_name(get_string(requirement, "key", path, errors) or "", path.child("key")))
    return errors


def _validate_field_requirement(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    requirement = as_object(value, path, errors) or {}
    operator = get_string(requirement, "operator", path, errors) or ""
    values = _strings(requirement, path, errors)
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            errors.append(
                required(
                    path.child("values"),
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        errors.append(invalid(path.child("operator"), operator, "not a valid selector operator"))
    key = get_string(requirement, "key", path, errors) or ""
    if key not in _NODE_FIELD_SELECTOR_KEYS:
        errors.append(invalid(path.child("key"), key, "not a valid field selector key"))
    else:
        for position, node_name in enumerate(values):
            errors.extend(validate_node_name(node_name, path.child("values").index(position)))
    return errors
