"""ResourceSlice ``spec`` rules (resource.k8s.io/v1), on create and on update.

Owns: driver and pool, exactly one node-selection field, devices (names unique in the slice, attributes,
capacity -- a ``requestPolicy`` only on a device with ``allowMultipleAllocations``, its rules in
:mod:`dra_driver.tools.validation.request_policy` --, counter consumption, taints, per-device node selection,
binding conditions), shared counter sets, the size limits of each, and the immutability of ``driver``,
``pool.name`` and ``nodeName``.  The order of the checks follows kube's ``validateResourceSliceSpec`` so
errors come in the same order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.quantity import Quantity
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, forbidden, invalid, required, too_long
from dra_driver.tools.validation.fields import (
    as_object,
    as_string,
    byte_length,
    get_array,
    get_boolean,
    get_integer,
    get_object,
    get_string,
)
from dra_driver.tools.validation.immutability import validate_immutable
from dra_driver.tools.validation.lists import (
    field_key,
    validate_list,
    validate_map,
    validate_set,
)
from dra_driver.tools.validation.names import (
    validate_dns_label,
    validate_driver_name,
    validate_label_name,
    validate_pool_name,
    validate_qualified_name,
)
from dra_driver.tools.validation.nodes import validate_node_name, validate_node_selector
from dra_driver.tools.validation.paths import ROOT, FieldPath
from dra_driver.tools.validation.quantity import validate_quantity
from dra_driver.tools.validation.request_policy import validate_request_policy
from dra_driver.tools.validation.taints import validate_taint

_SEMVER_NUMBER: Final = "(0|[1-9][0-9]*)"
_SEMVER_PRERELEASE: Final = "(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER_BUILD: Final = "[0-9a-zA-Z-]+"
_SEMVER: Final = re.compile(
    rf"{_SEMVER_NUMBER}\.{_SEMVER_NUMBER}\.{_SEMVER_NUMBER}"
    rf"(-{_SEMVER_PRERELEASE}(\.{_SEMVER_PRERELEASE})*)?"
    rf"(\+{_SEMVER_BUILD}(\.{_SEMVER_BUILD})*)?"
)

# Longest map key shown whole in a path (kube truncates longer ones in the middle).
_QUALIFIED_NAME_SHOWN: Final = limits.QUALIFIED_NAME_MAX_DOMAIN_BYTES + 1 + limits.QUALIFIED_NAME_MAX_ID_BYTES
_COUNTER_NAME_SHOWN: Final = limits.DNS1123_LABEL_MAX_BYTES

_NODE_SELECTION_ONE_OF: Final = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
_DEVICE_NODE_SELECTION_ONE_OF: Final = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required "
    "when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"
)
_DEVICE_NODE_SELECTION_FORBIDDEN: Final = (
    "`nodeName`, `nodeSelector` and `allNodes` can only be set "
    "if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"
)
_LIST_ATTRIBUTE_TYPES: Final = ("bools", "ints", "strings", "versions")


def validate_resource_slice(obj: JSON, old: JSON | None) -> list[FieldError]:
    """A ResourceSlice on create (``old`` is None) or update of the main resource."""
    errors: list[FieldError] = []
    spec = get_object(obj, "spec", ROOT, errors) or {}
    old_spec = None if old is None else _lenient_object(old.get("spec"))
    return errors + validate_resource_slice_spec(spec, old_spec, ROOT.child("spec"))


def validate_resource_slice_spec(spec: JSON, old_spec: JSON | None, path: FieldPath) -> list[FieldError]:
    """``spec`` of a ResourceSlice; ``old_spec`` (on update) is the stored spec."""
    errors: list[FieldError] = []
    driver = get_string(spec, "driver", path, errors) or ""
    errors.extend(validate_driver_name(driver, path.child("driver")))
    pool = get_object(spec, "pool", path, errors) or {}
    errors.extend(_validate_pool(pool, path.child("pool")))
    if old_spec is not None:
        old_pool = _lenient_object(old_spec.get("pool")) or {}
        # pool.name and driver are plain strings in Go (absent == ""); nodeName is a pointer (absent != "").
        pool_name, old_pool_name = pool.get("name") or "", old_pool.get("name") or ""
        errors.extend(validate_immutable(pool_name, old_pool_name, path.child("pool", "name")))
        errors.extend(validate_immutable(spec.get("driver") or "", old_spec.get("driver") or "", path.child("driver")))
        errors.extend(validate_immutable(spec.get("nodeName"), old_spec.get("nodeName"), path.child("nodeName")))

    errors.extend(_validate_node_selection(spec, path))

    devices = get_array(spec, "devices", path, errors)
    shared_counters = get_array(spec, "sharedCounters", path, errors)
    if devices is not None and shared_counters is not None:
        errors.append(invalid(path, "", "only one of `sharedCounters` or `devices` is allowed"))

    per_device_node_selection = spec.get("perDeviceNodeSelection") is True  # type checked with the node selection
    max_devices = limits.SLICE_MAX_DEVICES
    if devices is not None and any(_has_taints_or_counters(device) for device in devices):
        max_devices = limits.SLICE_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS

    def validate_device(device: object, device_path: FieldPath) -> list[FieldError]:
        return _validate_device(device, device_path, per_device_node_selection)

    errors.extend(validate_set(devices, max_devices, validate_device, field_key("name"), path.child("devices")))
    errors.extend(
        validate_set(
            shared_counters,
            limits.SLICE_MAX_COUNTER_SETS,
            _validate_counter_set,
            field_key("name"),
            path.child("sharedCounters"),
        )
    )
    return errors


def _lenient_object(value: object) -> JSON | None:
    """A stored object's part, read without reporting: the stored object was validated when it was written."""
    return as_object(value, ROOT, [])


def _validate_pool(pool: JSON, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    errors.extend(validate_pool_name(get_string(pool, "name", path, errors) or "", path.child("name")))
    slice_count = get_integer(pool, "resourceSliceCount", path, errors) or 0
    if slice_count <= 0:
        errors.append(invalid(path.child("resourceSliceCount"), slice_count, "must be greater than zero"))
    generation = get_integer(pool, "generation", path, errors) or 0
    if generation < 0:
        errors.append(invalid(path.child("generation"), generation, "must be greater than or equal to zero"))
    return errors


def _validate_node_selection(spec: JSON, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    set_fields: list[str] = []
    node_name = get_string(spec, "nodeName", path, errors)
    if node_name is not None:
        if node_name:
            set_fields.append("`nodeName`")
            errors.extend(validate_node_name(node_name, path.child("nodeName")))
        else:
            errors.append(
                invalid(path.child("nodeName"), node_name, "must be either unset or set to a non-empty string")
            )
    node_selector = get_object(spec, "nodeSelector", path, errors)
    if node_selector is not None:
        set_fields.append("`nodeSelector`")
        selector_path = path.child("nodeSelector")
        errors.extend(validate_node_selector(node_selector, selector_path))
        # One term only, so that selectors of devices from different slices can be merged.
        terms = node_selector.get("nodeSelectorTerms")
        if not isinstance(terms, list) or len(terms) != 1:
            errors.append(
                invalid(selector_path.child("nodeSelectorTerms"), terms, "must have exactly one node selector term")
            )
    for flag in ("allNodes", "perDeviceNodeSelection"):
        value = get_boolean(spec, flag, path, errors)
        if value is True:
            set_fields.append(f"`{flag}`")
        elif value is False:
            errors.append(invalid(path.child(flag), False, "must be either unset or set to true"))
    if not set_fields:
        errors.append(required(path, _NODE_SELECTION_ONE_OF))
    elif len(set_fields) > 1:
        errors.append(
            invalid(path, "{" + ", ".join(set_fields) + "}", _NODE_SELECTION_ONE_OF + ", but multiple fields are set")
        )
    return errors


def _has_taints_or_counters(device: object) -> bool:
    if not isinstance(device, Mapping):
        return False
    return bool(device.get("taints")) or bool(device.get("consumesCounters"))


def _validate_device(value: object, path: FieldPath, per_device_node_selection: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    device = as_object(value, path, errors) or {}
    errors.extend(validate_dns_label(get_string(device, "name", path, errors) or "", path.child("name")))

    allow_multiple = get_boolean(device, "allowMultipleAllocations", path, errors) is True
    attributes = get_object(device, "attributes", path, errors)
    capacity = get_object(device, "capacity", path, errors)
    total = len(attributes or {}) + len(capacity or {})
    max_entries = limits.DEVICE_MAX_ATTRIBUTES_AND_CAPACITIES
    if total > max_entries:
        errors.append(
            invalid(
                path,
                total,
                f"the total number of attributes and capacities must not exceed {max_entries}",
            )
        )
    errors.extend(
        validate_map(
            attributes,
            None,
            validate_qualified_name,
            _validate_attribute,
            path.child("attributes"),
            _QUALIFIED_NAME_SHOWN,
        )
    )
    capacity_rule = _validate_shareable_capacity if allow_multiple else _validate_capacity
    errors.extend(
        validate_map(
            capacity, None, validate_qualified_name, capacity_rule, path.child("capacity"), _QUALIFIED_NAME_SHOWN
        )
    )
    taints = get_array(device, "taints", path, errors)
    errors.extend(validate_list(taints, limits.DEVICE_MAX_TAINTS, validate_taint, path.child("taints")))
    consumption = get_array(device, "consumesCounters", path, errors)
    errors.extend(
        validate_set(
            consumption,
            limits.DEVICE_MAX_COUNTER_CONSUMPTIONS,
            _validate_counter_consumption,
            field_key("counterSet"),
            path.child("consumesCounters"),
        )
    )
    errors.extend(_validate_device_node_selection(device, path, per_device_node_selection))
    for conditions_field in ("bindingConditions", "bindingFailureConditions"):
        conditions = get_array(device, conditions_field, path, errors)
        errors.extend(
            validate_list(
                conditions, limits.DEVICE_MAX_BINDING_CONDITIONS, _validate_condition_type, path.child(conditions_field)
            )
        )
    return errors


def _validate_device_node_selection(device: JSON, path: FieldPath, per_device_node_selection: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    node_name = get_string(device, "nodeName", path, errors)
    node_selector = get_object(device, "nodeSelector", path, errors)
    all_nodes = get_boolean(device, "allNodes", path, errors)
    if not per_device_node_selection:
        if node_name is not None or node_selector is not None or all_nodes is not None:
            errors.append(invalid(path, None, _DEVICE_NODE_SELECTION_FORBIDDEN))
        return errors
    set_fields: list[str] = []
    if node_name is not None:
        if node_name:
            set_fields.append("`nodeName`")
            errors.extend(validate_node_name(node_name, path.child("nodeName")))
        else:
            errors.append(invalid(path.child("nodeName"), node_name, "must not be empty"))
    if node_selector is not None:
        set_fields.append("`nodeSelector`")
        errors.extend(validate_node_selector(node_selector, path.child("nodeSelector")))
    if all_nodes is True:
        set_fields.append("`allNodes`")
    elif all_nodes is False:
        errors.append(invalid(path.child("allNodes"), False, "must be either unset or set to true"))
    if not set_fields:
        errors.append(required(path, _DEVICE_NODE_SELECTION_ONE_OF))
    elif len(set_fields) > 1:
        errors.append(invalid(path, "{" + ", ".join(set_fields) + "}", _DEVICE_NODE_SELECTION_ONE_OF))
    return errors


def _validate_condition_type(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    condition_type = as_string(value, path, errors)
    if condition_type is not None:
        errors.extend(validate_label_name(condition_type, path))
    return errors


def _validate_attribute(value: object, path: FieldPath) -> list[FieldError]:
    """One attribute value: exactly one of the typed fields (the 1.37 list forms count as one each)."""
    errors: list[FieldError] = []
    attribute = as_object(value, path, errors) or {}
    present = 0
    if get_boolean(attribute, "bool", path, errors) is not None:
        present += 1
    if get_integer(attribute, "int", path, errors) is not None:
        present += 1
    string_value = get_string(attribute, "string", path, errors)
    if string_value is not None:
        present += 1
        errors.extend(_validate_string_value(string_value, path.child("string")))
    version_value = get_string(attribute, "version", path, errors)
    if version_value is not None:
        present += 1
        errors.extend(_validate_version_value(version_value, path.child("version")))
    for list_field in _LIST_ATTRIBUTE_TYPES:
        items = get_array(attribute, list_field, path, errors)
        if items is None:
            continue
        present += 1
        errors.extend(_validate_attribute_list(list_field, items, path.child(list_field)))
    if present == 0:
        errors.append(invalid(path, "", "exactly one value must be specified"))
    elif present > 1:
        errors.append(invalid(path, attribute, "exactly one value must be specified"))
    return errors


def _validate_attribute_list(list_field: str, items: list[object], path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    if not items:
        errors.append(invalid(path, items, "must not be empty if specified"))
    for position, item in enumerate(items):
        item_path = path.index(position)
        if list_field == "bools":
            if not isinstance(item, bool):
                errors.append(invalid(item_path, item, "must be of type boolean"))
        elif list_field == "ints":
            if not isinstance(item, int) or isinstance(item, bool):
                errors.append(invalid(item_path, item, "must be of type integer"))
        elif (text := as_string(item, item_path, errors)) is not None:
            if list_field == "strings":
                errors.extend(_validate_string_value(text, item_path))
            else:
                errors.extend(_validate_version_value(text, item_path))
    return errors


def _validate_string_value(value: str, path: FieldPath) -> list[FieldError]:
    if byte_length(value) > limits.ATTRIBUTE_MAX_VALUE_BYTES:
        return [too_long(path, limits.ATTRIBUTE_MAX_VALUE_BYTES)]
    return []


def _validate_version_value(value: str, path: FieldPath) -> list[FieldError]:
    errors = []
    if not _SEMVER.fullmatch(value):
        errors.append(invalid(path, value, "must be a string compatible with semver.org spec 2.0.0"))
    if byte_length(value) > limits.ATTRIBUTE_MAX_VALUE_BYTES:
        errors.append(too_long(path, limits.ATTRIBUTE_MAX_VALUE_BYTES))
    return errors


def _validate_capacity(value: object, path: FieldPath) -> list[FieldError]:
    """A capacity of a device allocated once: a ``requestPolicy`` (how shares consume it) is forbidden."""
    errors: list[FieldError] = []
    capacity = as_object(value, path, errors) or {}
    errors.extend(validate_quantity(capacity.get("value"), path.child("value")))
    if capacity.get("requestPolicy") is not None:
        errors.append(forbidden(path.child("requestPolicy"), "allowMultipleAllocations must be true"))
    return errors


def _validate_shareable_capacity(value: object, path: FieldPath) -> list[FieldError]:
    """A capacity of a device with ``allowMultipleAllocations``: its ``requestPolicy`` checked against its value."""
    errors: list[FieldError] = []
    capacity = as_object(value, path, errors) or {}
    amount = capacity.get("value")
    problems = validate_quantity(amount, path.child("value"))
    errors.extend(problems)
    policy = capacity.get("requestPolicy")
    if policy is not None and not problems and isinstance(amount, str | int | float):
        limit = Quantity.parse(amount if isinstance(amount, str) else repr(amount))
        errors.extend(validate_request_policy(limit, policy, path.child("requestPolicy")))
    return errors


def _validate_counters(counters: JSON | None, max_counters: int, path: FieldPath) -> list[FieldError]:
    if not counters:
        return [required(path)]
    return validate_map(counters, max_counters, validate_dns_label, _validate_counter, path, _COUNTER_NAME_SHOWN)


def _validate_counter(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    counter = as_object(value, path, errors) or {}
    errors.extend(validate_quantity(counter.get("value"), path.child("value")))
    return errors


def _validate_counter_set(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    counter_set = as_object(value, path, errors) or {}
    errors.extend(validate_dns_label(get_string(counter_set, "name", path, errors) or "", path.child("name")))
    counters = get_object(counter_set, "counters", path, errors)
    errors.extend(_validate_counters(counters, limits.COUNTER_SET_MAX_COUNTERS, path.child("counters")))
    return errors


def _validate_counter_consumption(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    consumption = as_object(value, path, errors) or {}
    errors.extend(
        validate_dns_label(get_string(consumption, "counterSet", path, errors) or "", path.child("counterSet"))
    )
    counters = get_object(consumption, "counters", path, errors)
    errors.extend(_validate_counters(counters, limits.COUNTER_CONSUMPTION_MAX_COUNTERS, path.child("counters")))
    return errors
