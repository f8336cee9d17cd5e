"""Consumable capacity (DRAConsumableCapacity): how much of a shareable device a request consumes.

A device with ``allowMultipleAllocations`` may serve many requests while the capacity they consume,
plus what allocated claims already consume, stays within each published capacity.  A request names
amounts in ``capacity.requests``; the device's ``requestPolicy`` rounds them up (``validRange``:
``min`` then multiples of ``step``; ``validValues``: the next listed value) and supplies a ``default``
for capacities the request does not name; without a default an unnamed capacity is consumed whole.
A request naming a capacity the device does not have does not fit that device.

Names: a bare name belongs to the device's driver domain, and a driver-qualified entry wins over a
bare one for the same identifier.  Results report ``consumedCapacity`` under the name the device
published.  Kubernetes 1.36 skips a device whose capacity cannot be evaluated; so does this port.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.allocation.devices import Candidate, device_fields
from dra_driver.tools.allocation.state import ConsumedCapacity, qualified


class CapacityProblem(ValueError):
    """The request or the device's capacity cannot be evaluated: the device is skipped."""


def _quantity(value: Any) -> Quantity:
    try:
        return Quantity.parse(str(value))
    except QuantityError as exc:
        raise CapacityProblem(str(exc)) from None


class DeviceCapacity:
    """A device's published capacity, parsed once: qualified name -> (published name, total, policy)."""

    __slots__ = ("alone", "entries", "problem")

    def __init__(self, candidate: Candidate) -> None:
        driver = candidate.id[0]
        published: Mapping[str, JSON] = device_fields(candidate.device).get("capacity") or {}
        self.entries: dict[str, tuple[str, Quantity, JSON | None]] = {}
        self.problem = False
        self.alone: bool | None = None  # the verdict for a request naming no capacity, on an unused device
        prefix = driver + "/"
        ordered = [n for n in published if n.startswith(prefix)] + [n for n in published if not n.startswith(prefix)]
        for name in ordered:
            key = qualified(name, driver)
            if key in self.entries:
                continue  # the driver-qualified spelling wins over the bare one
            entry = published[name] or {}
            try:
                total = _quantity(entry.get("value"))
            except CapacityProblem:
                self.problem = True
                continue
            self.entries[key] = (name, total, entry.get("requestPolicy"))


def device_capacity(candidate: Candidate) -> DeviceCapacity:
    parsed = candidate.facts.capacity
    if parsed is None:
        parsed = candidate.facts.capacity = DeviceCapacity(candidate)
    assert isinstance(parsed, DeviceCapacity)
    return parsed


def resolve_requests(requests: JSON | None, candidate: Candidate) -> dict[str, Quantity] | None:
    """The request's amounts by qualified capacity name, or None when the device lacks one of them."""
    if not requests:
        return {}
    driver = candidate.id[0]
    published: Mapping[str, JSON] = device_fields(candidate.device).get("capacity") or {}
    resolved: dict[str, Quantity] = {}
    for name, value in requests.items():
        if name in published:
            key = qualified(name, driver)
        elif "/" in name:
            domain, _, ident = name.partition("/")
            if domain != driver or ident not in published:
                return None
            key = name
        elif f"{driver}/{name}" in published:
            key = f"{driver}/{name}"
        else:
            return None
        if key in resolved:
            raise CapacityProblem(f"capacity {key!r} requested twice")
        resolved[key] = _quantity(value)
    return resolved


def _policy_quantity(policy: JSON, name: str) -> Quantity | None:
    value = policy.get(name)
    return None if value is None else _quantity(value)


def consumed_amount(requested: Quantity | None, total: Quantity, policy: JSON | None) -> Quantity:
    """``calculateConsumedQuantity``: the request rounded by the policy, or the default, or all."""
    if requested is None:
        default = _policy_quantity(policy, "default") if policy else None
        return default if default is not None else total
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        return _round_up_range(requested, valid_range)
    valid_values = policy.get("validValues")
    if valid_values is not None:
        for value in valid_values:
            candidate = _quantity(value)
            if requested.compare(candidate) <= 0:
                return candidate
        return requested
    return requested


def _round_up_range(requested: Quantity, valid_range: JSON) -> Quantity:
    minimum = _quantity(valid_range["min"])
    if requested.compare(minimum) < 0:
        return minimum
    step_value = valid_range.get("step")
    if step_value is None:
        return requested
    step = _quantity(step_value)
    if step.value <= 0:
        raise CapacityProblem("validRange.step must be positive")
    steps = math.ceil((requested.value - minimum.value) / step.value)
    value = minimum.value + step.value * steps
    return Quantity(value, step.format)


def violates_policy(amount: Quantity, policy: JSON | None) -> bool:
    if not policy:
        return False
    default = _policy_quantity(policy, "default")
    if default is not None and amount == default:
        return False
    valid_range = policy.get("validRange")
    if valid_range is not None:
        maximum = _policy_quantity(valid_range, "max")
        if maximum is not None and amount.compare(maximum) > 0:
            return True
        step_value = valid_range.get("step")
        if step_value is not None:
            step = _quantity(step_value)
            minimum = _policy_quantity(valid_range, "min")
            base = minimum.value if minimum is not None else 0
            if step.value == 0 or (amount.value - base) % step.value != 0:
                return True
        return False
    valid_values = policy.get("validValues")
    if valid_values:
        return not any(amount == _quantity(value) for value in valid_values)
    return False


def fits(
    candidate: Candidate, requests: JSON | None, allocated: ConsumedCapacity | None, allocating: ConsumedCapacity | None
) -> bool:
    """``CmpRequestOverCapacity``: the request names only capacities the device has, respects every
    request policy, and with what is allocated and being allocated stays within every capacity."""
    parsed = device_capacity(candidate)
    if parsed.problem:
        return False
    if not requests and not allocated and not allocating:
        if parsed.alone is None:  # depends on the device alone: decide once
            parsed.alone = _fits(parsed, {}, None, None)
        return parsed.alone
    try:
        resolved = resolve_requests(requests, candidate)
    except CapacityProblem:
        return False
    if resolved is None:
        return False
    return _fits(parsed, resolved, allocated, allocating)


def _fits(
    parsed: DeviceCapacity,
    resolved: Mapping[str, Quantity],
    allocated: ConsumedCapacity | None,
    allocating: ConsumedCapacity | None,
) -> bool:
    try:
        for name, (_, total, policy) in parsed.entries.items():
            amount = consumed_amount(resolved.get(name), total, policy)
            if amount.sign() < 0 or violates_policy(amount, policy):
                return False
            used = amount.value
            if allocated and name in allocated:
                used += allocated[name].value
            if allocating and name in allocating:
                used += allocating[name].value
            if used > total.value:
                return False
    except CapacityProblem:
        return False
    return True


def consumption(candidate: Candidate, requests: JSON | None) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    """What allocating the device for the request consumes: (by qualified name, by published name)."""
    resolved = resolve_requests(requests, candidate) or {}
    by_qualified: dict[str, Quantity] = {}
    by_published: dict[str, Quantity] = {}
    for name, (published_name, total, policy) in device_capacity(candidate).entries.items():
        amount = consumed_amount(resolved.get(name), total, policy)
        by_qualified[name] = amount
        by_published[published_name] = amount
    return by_qualified, by_published
