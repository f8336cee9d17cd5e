"""Device taints (on ResourceSlice devices) and the tolerations of device requests.

A taint needs a label-name key, a label value (if any) and an effect of ``NoSchedule``, ``NoExecute``
or ``None``.  A toleration's operator is ``Equal`` (the default) or ``Exists``, its value must be empty
with ``Exists``, its effect (if any) is a taint effect, and ``tolerationSeconds`` only goes with
``NoExecute``.
"""

from __future__ import annotations

from typing import Final

from dra_driver.tools.validation.errors import FieldError, invalid, not_supported, required
from dra_driver.tools.validation.fields import as_object, get_integer, get_string
from dra_driver.tools.validation.names import validate_label_name, validate_label_value
from dra_driver.tools.validation.paths import FieldPath

# Sorted, as kube lists a set's members in its "supported values".
TAINT_EFFECTS: Final = ("NoExecute", "NoSchedule", "None")
TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_DEFAULT_OPERATOR: Final = "Equal"


def validate_taint(value: object, path: FieldPath) -> list[FieldError]:
    """One ``devices[].taints[]`` entry."""
    errors: list[FieldError] = []
    taint = as_object(value, path, errors) or {}
    errors.extend(validate_label_name(get_string(taint, "key", path, errors) or "", path.child("key")))
    taint_value = get_string(taint, "value", path, errors)
    if taint_value:
        errors.extend(validate_label_value(taint_value, path.child("value")))
    effect = get_string(taint, "effect", path, errors)
    if not effect:
        errors.append(required(path.child("effect")))
    elif effect not in TAINT_EFFECTS:
        errors.append(not_supported(path.child("effect"), effect, TAINT_EFFECTS))
    return errors


def validate_toleration(value: object, path: FieldPath) -> list[FieldError]:
    """One ``tolerations[]`` entry of a request or subrequest."""
    errors: list[FieldError] = []
    toleration = as_object(value, path, errors) or {}
    key = get_string(toleration, "key", path, errors)
    if key:
        errors.extend(validate_label_name(key, path.child("key")))
    operator = get_string(toleration, "operator", path, errors) or _DEFAULT_OPERATOR
    toleration_value = get_string(toleration, "value", path, errors) or ""
    if operator == "Exists":
        if toleration_value:
            errors.append(invalid(path.child("value"), toleration_value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        errors.extend(validate_label_value(toleration_value, path.child("value")))
    else:
        errors.append(not_supported(path.child("operator"), operator, TOLERATION_OPERATORS))
    effect = get_string(toleration, "effect", path, errors) or ""
    if effect and effect not in TAINT_EFFECTS:
        errors.append(not_supported(path.child("effect"), effect, TAINT_EFFECTS))
    seconds = get_integer(toleration, "tolerationSeconds", path, errors)
    if seconds is not None and effect != "NoExecute":
        errors.append(
            invalid(path.child("effect"), effect, "effect must be 'NoExecute' when `tolerationSeconds` is set")
        )
    return errors
