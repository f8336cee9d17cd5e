"""ResourceClaim ``status`` rules, applied on updates through the ``status`` subresource.

Owns, as kube's ``validateResourceClaimStatusUpdate``: ``reservedFor`` (at most 256 consumers, each with
``resource``, ``name`` and ``uid``, unique by uid), ``devices`` (driver-written device status, unique by
driver/pool/device/shareID, each naming a device of ``allocation``: conditions, data, network data),
``allocation`` (results and config, validated when first set; afterwards it may only be cleared, never
changed) and the invariants between them: ``reservedFor`` needs an ``allocation`` (so the allocation
cannot be cleared while the claim is reserved), and a claim being deleted takes no new consumers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import (
    FieldError,
    RawValue,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from dra_driver.tools.validation.fields import (
    as_object,
    as_string,
    byte_length,
    get_array,
    get_integer,
    get_object,
    get_string,
)
from dra_driver.tools.validation.immutability import validate_immutable
from dra_driver.tools.validation.lists import field_key, string_key, validate_list, validate_set
from dra_driver.tools.validation.names import (
    regex_error,
    validate_dns_label,
    validate_driver_name,
    validate_label_name,
    validate_pool_name,
)
from dra_driver.tools.validation.network import validate_interface_address
from dra_driver.tools.validation.opaque import validate_device_configuration, validate_raw_object
from dra_driver.tools.validation.paths import ROOT, FieldPath
from dra_driver.tools.validation.resourceclaim import (
    RequestNames,
    validate_request_reference,
    validate_request_references,
)

CONFIG_SOURCES: Final = ("FromClaim", "FromClass")
CONDITION_STATUSES: Final = ("False", "True", "Unknown")
_CONDITION_REASON_FMT: Final = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_CONDITION_REASON: Final = re.compile(_CONDITION_REASON_FMT)
_CONDITION_REASON_MSG: Final = (
    "a condition reason must start with alphabetic character, optionally followed by a string of "
    "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"
)
_NOT_ALLOCATED: Final = "must be an allocated device in the claim"
_RESERVED_WITHOUT_ALLOCATION: Final = "may not be specified when `allocated` is not set"
_RESERVED_WHILE_DELETED: Final = (
    "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"
)
_CONSUMER_FIELDS: Final = ("resource", "name", "uid")


def validate_resource_claim_status(obj: JSON, old: JSON | None) -> list[FieldError]:
    """``status`` of a ResourceClaim written through ``/status``; ``old`` is the stored claim."""
    errors: list[FieldError] = []
    path = ROOT.child("status")
    status = get_object(obj, "status", ROOT, errors) or {}
    old_status = as_object((old or {}).get("status"), ROOT, []) or {}
    spec = as_object(obj.get("spec"), ROOT, [])
    request_names = RequestNames.of_claim_spec(spec)

    reserved_for = get_array(status, "reservedFor", path, errors)
    errors.extend(
        validate_set(
            reserved_for, limits.CLAIM_MAX_RESERVED_FOR, _validate_consumer, field_key("uid"), path.child("reservedFor")
        )
    )
    allocation = get_object(status, "allocation", path, errors)
    allocated = _allocated_devices(allocation)

    def device_status_rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return _validate_device_status(value, item_path, allocated)

    devices = get_array(status, "devices", path, errors)
    errors.extend(validate_set(devices, None, device_status_rule, _device_id, path.child("devices")))

    if reserved_for:
        if allocation is None:
            errors.append(forbidden(path.child("reservedFor"), _RESERVED_WITHOUT_ALLOCATION))
        elif _is_deleted(obj) and _new_consumers(reserved_for, old_status.get("reservedFor")):
            errors.append(forbidden(path.child("reservedFor"), _RESERVED_WHILE_DELETED))

    old_allocation = old_status.get("allocation")
    if allocation is not None and old_allocation is not None:
        errors.extend(validate_immutable(allocation, old_allocation, path.child("allocation")))
    elif allocation is not None:
        errors.extend(_validate_allocation(allocation, path.child("allocation"), request_names))
    return errors


def _validate_consumer(value: object, path: FieldPath) -> list[FieldError]:
    """One ``reservedFor`` entry: ``resource``, ``name`` and ``uid`` required; ``apiGroup`` optional."""
    errors: list[FieldError] = []
    consumer = as_object(value, path, errors) or {}
    get_string(consumer, "apiGroup", path, errors)
    for name in _CONSUMER_FIELDS:
        if not get_string(consumer, name, path, errors):
            errors.append(required(path.child(name)))
    return errors


def _is_deleted(obj: JSON) -> bool:
    metadata = obj.get("metadata")
    return isinstance(metadata, Mapping) and bool(metadata.get("deletionTimestamp"))


def _consumer_key(value: object) -> tuple[object, ...]:
    """A consumer reference compared as a whole, as Go compares the struct."""
    consumer = value if isinstance(value, Mapping) else {}
    return tuple(consumer.get(name) or "" for name in ("apiGroup", *_CONSUMER_FIELDS))


def _new_consumers(reserved_for: list[object], old_reserved_for: object) -> bool:
    """Whether ``reserved_for`` has an entry that the stored ``reservedFor`` lacks."""
    old_keys = {_consumer_key(item) for item in old_reserved_for} if isinstance(old_reserved_for, list) else set()
    return any(_consumer_key(item) not in old_keys for item in reserved_for)


def _allocated_devices(allocation: JSON | None) -> frozenset[str]:
    """The device IDs (:func:`_device_id`) of the allocation's results; none without an allocation."""
    devices = (allocation or {}).get("devices")
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        return frozenset()
    return frozenset(device_id for device_id in map(_device_id, results) if device_id is not None)


def _device_id(item: object) -> str | None:
    """kube's shared device ID, ``driver/pool/device[/shareID]``, shown unquoted as kube's ``String()`` does."""
    device = as_object(item, ROOT, [])
    if device is None:
        return None
    parts = [device.get("driver", ""), device.get("pool", ""), device.get("device", "")]
    share_id = device.get("shareID")
    if share_id is not None:
        parts.append(share_id)
    if not all(isinstance(part, str) for part in parts):
        return None
    return RawValue("/".join(str(part) for part in parts))


def _validate_allocation(allocation: JSON, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    errors: list[FieldError] = []
    devices = get_object(allocation, "devices", path, errors) or {}
    devices_path = path.child("devices")

    def result_rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return _validate_result(value, item_path, request_names)

    def config_rule(value: object, item_path: FieldPath) -> list[FieldError]:
        return _validate_allocation_config(value, item_path, request_names)

    results = get_array(devices, "results", devices_path, errors)
    errors.extend(validate_list(results, limits.ALLOCATION_MAX_RESULTS, result_rule, devices_path.child("results")))
    config = get_array(devices, "config", devices_path, errors)
    errors.extend(validate_list(config, limits.ALLOCATION_MAX_CONFIG, config_rule, devices_path.child("config")))
    return errors


def _validate_result(value: object, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    errors: list[FieldError] = []
    result = as_object(value, path, errors) or {}
    errors.extend(
        validate_request_reference(
            get_string(result, "request", path, errors) or "", path.child("request"), request_names
        )
    )
    return errors + _validate_device_id_fields(result, path)


def _validate_device_id_fields(entry: JSON, path: FieldPath) -> list[FieldError]:
    """``driver``, ``pool`` and ``device`` of an allocation result or a device status."""
    errors: list[FieldError] = []
    errors.extend(validate_driver_name(get_string(entry, "driver", path, errors) or "", path.child("driver")))
    errors.extend(validate_pool_name(get_string(entry, "pool", path, errors) or "", path.child("pool")))
    errors.extend(validate_dns_label(get_string(entry, "device", path, errors) or "", path.child("device")))
    return errors


def _validate_allocation_config(value: object, path: FieldPath, request_names: RequestNames) -> list[FieldError]:
    errors: list[FieldError] = []
    config = as_object(value, path, errors) or {}
    source = get_string(config, "source", path, errors) or ""
    if not source:
        errors.append(required(path.child("source")))
    elif source not in CONFIG_SOURCES:
        errors.append(not_supported(path.child("source"), source, CONFIG_SOURCES))
    requests = get_array(config, "requests", path, errors)
    errors.extend(validate_request_references(requests, path.child("requests"), request_names))
    return errors + validate_device_configuration(config, path)


def _validate_device_status(value: object, path: FieldPath, allocated: frozenset[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    device = as_object(value, path, errors) or {}
    errors.extend(_validate_device_id_fields(device, path))
    device_id = _device_id(device)
    if device_id is not None and device_id not in allocated:
        errors.append(invalid(path, device_id, _NOT_ALLOCATED))
    conditions = get_array(device, "conditions", path, errors)
    conditions_path = path.child("conditions")
    if conditions is not None and len(conditions) > limits.DEVICE_STATUS_MAX_CONDITIONS:
        errors.append(too_many(conditions_path, len(conditions), limits.DEVICE_STATUS_MAX_CONDITIONS))
    errors.extend(validate_conditions(conditions, conditions_path))
    data = device.get("data")
    if data is not None:
        errors.extend(validate_raw_object(data, path.child("data"), limits.DEVICE_STATUS_DATA_MAX_BYTES))
    network_data = get_object(device, "networkData", path, errors)
    if network_data is not None:
        errors.extend(_validate_network_data(network_data, path.child("networkData")))
    return errors


def validate_conditions(conditions: list[object] | None, path: FieldPath) -> list[FieldError]:
    """``metav1.Condition`` entries (``ValidateConditions``): each valid, types unique."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for position, condition in enumerate(conditions or []):
        condition_type = condition.get("type") if isinstance(condition, Mapping) else None
        if isinstance(condition_type, str):
            if condition_type in seen:
                errors.append(duplicate(path.index(position).child("type"), condition_type))
            seen.add(condition_type)
        errors.extend(_validate_condition(condition, path.index(position)))
    return errors


def _validate_condition(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    condition = as_object(value, path, errors) or {}
    errors.extend(validate_label_name(get_string(condition, "type", path, errors) or "", path.child("type")))
    status = get_string(condition, "status", path, errors) or ""
    if status not in CONDITION_STATUSES:
        errors.append(not_supported(path.child("status"), status, CONDITION_STATUSES))
    observed_generation = get_integer(condition, "observedGeneration", path, errors) or 0
    if observed_generation < 0:
        errors.append(
            invalid(path.child("observedGeneration"), observed_generation, "must be greater than or equal to zero")
        )
    if not get_string(condition, "lastTransitionTime", path, errors):
        errors.append(required(path.child("lastTransitionTime"), "must be set"))
    reason = get_string(condition, "reason", path, errors) or ""
    if not reason:
        errors.append(required(path.child("reason"), "must be set"))
    else:
        if not _CONDITION_REASON.fullmatch(reason):
            message = regex_error(
                _CONDITION_REASON_MSG,
                _CONDITION_REASON_FMT,
                "my_name",
                "MY_NAME",
                "MyName",
                "ReasonA,ReasonB",
                "ReasonA:ReasonB",
            )
            errors.append(invalid(path.child("reason"), reason, message))
        if byte_length(reason) > limits.CONDITION_REASON_MAX_BYTES:
            errors.append(too_long(path.child("reason"), limits.CONDITION_REASON_MAX_BYTES))
    message_text = get_string(condition, "message", path, errors) or ""
    if byte_length(message_text) > limits.CONDITION_MESSAGE_MAX_BYTES:
        errors.append(too_long(path.child("message"), limits.CONDITION_MESSAGE_MAX_BYTES))
    return errors


def _validate_network_data(network_data: JSON, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    interface_name = get_string(network_data, "interfaceName", path, errors) or ""
    if byte_length(interface_name) > limits.NETWORK_INTERFACE_NAME_MAX_BYTES:
        errors.append(too_long(path.child("interfaceName"), limits.NETWORK_INTERFACE_NAME_MAX_BYTES))
    hardware_address = get_string(network_data, "hardwareAddress", path, errors) or ""
    if byte_length(hardware_address) > limits.NETWORK_HARDWARE_ADDRESS_MAX_BYTES:
        errors.append(too_long(path.child("hardwareAddress"), limits.NETWORK_HARDWARE_ADDRESS_MAX_BYTES))
    ips = get_array(network_data, "ips", path, errors)
    errors.extend(validate_set(ips, limits.NETWORK_MAX_IPS, _validate_ip, string_key, path.child("ips")))
    return errors


def _validate_ip(value: object, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    address = as_string(value, path, errors)
    if address is not None:
        errors.extend(validate_interface_address(address, path))
    return errors
