"""A capacity's ``requestPolicy`` (DRAConsumableCapacity) in a ResourceSlice device, as kube-apiserver checks it.

Owns the rules of kube's ``validateRequestPolicy`` (kubernetes/kubernetes pkg/apis/resource/validation):
exactly one of ``validValues`` and ``validRange``; ``default`` required with either; ``validValues``
ascending, at most 10, unique by integer value, none above the capacity's value, the default among them;
``validRange`` with ``min`` (at most the capacity), ``default`` inside ``[min, max]``, ``max`` not below
``min`` nor above the capacity, ``step`` not taking ``min`` past the capacity and ``default`` / ``max``
whole steps from ``min``.  Field paths, values and messages are kube's, so ``migdra allocate`` answers as
the real one does.  Whether a policy is allowed at all (only with ``allowMultipleAllocations: true``) is
the device's rule (:mod:`dra_driver.tools.validation.resourceslice`).

Values are shown as kube's ``Quantity.String()`` shows them: the canonical spelling.
"""

from __future__ import annotations

import math
from typing import Final

from dra_driver.jsontypes import JSON
from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, duplicate, forbidden, invalid, required, too_many
from dra_driver.tools.validation.fields import as_object, get_array, get_object
from dra_driver.tools.validation.paths import FieldPath
from dra_driver.tools.validation.quantity import validate_quantity

_BOTH: Final = 'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time'


def validate_request_policy(capacity: Quantity, value: object, path: FieldPath) -> list[FieldError]:
    """``requestPolicy`` at ``path`` of a capacity whose ``value`` is ``capacity``."""
    errors: list[FieldError] = []
    policy = as_object(value, path, errors) or {}
    valid_values = get_array(policy, "validValues", path, errors)
    valid_range = get_object(policy, "validRange", path, errors)
    default = _optional_quantity(policy.get("default"), path.child("default"), errors)
    if errors:
        return errors
    if valid_values and valid_range is not None:
        return [forbidden(path, _BOTH)]
    if valid_values:
        if policy.get("default") is None:
            return [required(path.child("default"), "required when validValues is defined")]
        if default is not None:
            errors.extend(_validate_valid_values(default, capacity, valid_values, path.child("validValues")))
    elif valid_range is not None:
        if policy.get("default") is None:
            return [required(path.child("default"), "required when validRange is defined")]
        if default is not None:
            errors.extend(_validate_range(default, capacity, valid_range, path.child("validRange")))
    return errors


def _optional_quantity(value: object, path: FieldPath, errors: list[FieldError]) -> Quantity | None:
    """The quantity at ``path``, None when absent or not a quantity (then an error says why)."""
    if value is None:
        return None
    problems = validate_quantity(value, path)
    if problems:
        errors.extend(problems)
        return None
    try:
        return Quantity.parse(value if isinstance(value, str) else repr(value))
    except QuantityError:  # pragma: no cover - validate_quantity accepted it
        return None


def _shown(quantity: Quantity) -> str:
    return quantity.canonical()


def _integer_value(quantity: Quantity) -> int:
    """kube's ``Quantity.Value()``: the value as an integer, rounded up."""
    return math.ceil(quantity.value)


def _validate_valid_values(
    default: Quantity, capacity: Quantity, items: list[object], path: FieldPath
) -> list[FieldError]:
    errors: list[FieldError] = []
    values: list[Quantity | None] = [_optional_quantity(item, path.index(i), errors) for i, item in enumerate(items)]
    for index in range(len(values) - 1):
        current, following = values[index], values[index + 1]
        if current is not None and following is not None and current.compare(following) > 0:
            errors.append(invalid(path.index(index + 1), _shown(following), "values must be sorted in ascending order"))
    if len(values) > limits.CAPACITY_REQUEST_POLICY_MAX_VALID_VALUES:
        # kube stops looking at the entries, so the default is not found among them either.
        errors.append(too_many(path, len(values), limits.CAPACITY_REQUEST_POLICY_MAX_VALID_VALUES))
        errors.append(invalid(path, _shown(default), "default value is not valid according to the requestPolicy"))
        return errors
    found_default = False
    for index, option in enumerate(values):
        if option is None:
            continue
        if option.compare(capacity) > 0:
            message = f"option is larger than capacity value: {_shown(capacity)}"
            errors.append(invalid(path.index(index), _shown(option), message))
        if option.compare(default) == 0:
            found_default = True
    seen: set[int] = set()
    for index, option in enumerate(values):
        if option is None:
            continue
        key = _integer_value(option)
        if key in seen:
            errors.append(duplicate(path.index(index), str(key)))
        seen.add(key)
    if not found_default:
        errors.append(invalid(path, _shown(default), "default value is not valid according to the requestPolicy"))
    return errors


def _validate_range(default: Quantity, capacity: Quantity, value_range: JSON, path: FieldPath) -> list[FieldError]:
    errors: list[FieldError] = []
    if value_range.get("min") is None:
        return [required(path.child("min"), "required when validRange is defined")]
    minimum = _optional_quantity(value_range.get("min"), path.child("min"), errors)
    maximum = _optional_quantity(value_range.get("max"), path.child("max"), errors)
    step = _optional_quantity(value_range.get("step"), path.child("step"), errors)
    if minimum is None or errors:
        return errors
    if minimum.compare(capacity) > 0:
        errors.append(
            invalid(path.child("min"), _shown(minimum), f"min is larger than capacity value: {_shown(capacity)}")
        )
    if default.compare(minimum) < 0:
        errors.append(invalid(path.child("min"), _shown(default), f"default is less than min: {_shown(minimum)}"))
    if maximum is not None:
        if minimum.compare(maximum) > 0:
            errors.append(invalid(path.child("max"), _shown(minimum), f"min is larger than max: {_shown(maximum)}"))
        if maximum.compare(capacity) > 0:
            errors.append(
                invalid(path.child("max"), _shown(maximum), f"max is larger than capacity value: {_shown(capacity)}")
            )
        if default.compare(maximum) > 0:
            errors.append(invalid(path.child("max"), _shown(default), f"default is more than max: {_shown(maximum)}"))
    if step is not None:
        one_step = minimum.add(step)
        if one_step.compare(capacity) > 0:
            message = f"one step {_shown(one_step)} is larger than capacity value: {_shown(capacity)}"
            errors.append(invalid(path.child("step"), _shown(step), message))
        errors.extend(_validate_step(default, minimum, step, path.child("step")))
        if maximum is not None:
            errors.extend(_validate_step(maximum, minimum, step, path.child("step")))
    return errors


def _validate_step(value: Quantity, minimum: Quantity, step: Quantity, path: FieldPath) -> list[FieldError]:
    """``value`` must be whole steps above ``minimum`` (compared as kube does: integer values, rounded up).

    A step of integer value 0 divides by zero in kube-apiserver (the request fails with an internal
    error); here it is refused as never a whole number of steps."""
    step_value = _integer_value(step)
    distance = _integer_value(value) - _integer_value(minimum)
    if step_value == 0 or distance % step_value != 0:
        message = f"value is not a multiple of a given step ({_shown(step)}) from ({_shown(minimum)})"
        return [invalid(path, _shown(value), message)]
    return []
