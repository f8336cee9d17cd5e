"""CEL device selectors (``selectors[].cel.expression``) of requests, subrequests and DeviceClasses.

Only presence and length are checked here (at most 10 KiB); compiling the expression and estimating its
cost belong to the CEL environment, not to this package.
"""

from __future__ import annotations

from dra_driver.controlplane.apiserver.validation import limits
from dra_driver.controlplane.apiserver.validation.errors import FieldError, required, too_long
from dra_driver.controlplane.apiserver.validation.fields import as_object, byte_length, get_object, get_string
from dra_driver.controlplane.apiserver.validation.lists import validate_list
from dra_driver.controlplane.apiserver.validation.paths import FieldPath


def validate_selectors(selectors: list[object] | None, max_items: int, path: FieldPath) -> list[FieldError]:
    """A ``selectors`` list of at most ``max_items`` CEL selectors."""
    return validate_list(selectors, max_items, validate_selector, path)


def validate_selector(value: object, path: FieldPath) -> list[FieldError]:
    """One selector: a ``cel`` with a non-empty expression of at most 10 KiB."""
    errors: list[FieldError] = []
    selector = as_object(value, path, errors) or {}
    cel = get_object(selector, "cel", path, errors)
    if cel is None:
        return [*errors, required(path.child("cel"))]
    cel_path = path.child("cel")
    expression = get_string(cel, "expression", cel_path, errors)
    if not expression:
        errors.append(required(cel_path.child("expression")))
    elif byte_length(expression) > limits.CEL_EXPRESSION_MAX_BYTES:
        errors.append(too_long(cel_path.child("expression"), limits.CEL_EXPRESSION_MAX_BYTES))
    return errors
