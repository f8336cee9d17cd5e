"""CEL device selectors (``selectors[].cel.expression``) of requests, subrequests and DeviceClasses.

As kube's ``validateCELSelector``: an expression is required and at most 10 KiB (bytes; a longer one is
not compiled), then it is compiled in the DRA CEL environment (:mod:`dra_driver.tools.cel`), which must
succeed with a ``bool`` (or dyn) result.  A failure is ``Invalid`` with kube's detail: ``compilation
failed: `` and cel-go's issue text, or ``must evaluate to bool or the unknown type, not <type>``.

A selector that compiles is then costed with the static estimator of :mod:`dra_driver.tools.cel.cost` (cel-go's
model with the map and string sizes Kubernetes declares); above 1,000,000 it is ``Invalid`` with kube's
"too complex, exceeds cost limit".

``dra_driver.tools.cel`` loads celpy on first use, so importing this module stays cheap; compiled programs
are cached by expression text in the CEL package's shared cache.
"""

from __future__ import annotations

from typing import Final

from dra_driver.tools import cel
from dra_driver.tools.cel import syntax
from dra_driver.tools.cel.cost import estimate_cost
from dra_driver.tools.cel.errors import CELCompileError
from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, invalid, required, too_long
from dra_driver.tools.validation.fields import as_object, byte_length, get_object, get_string
from dra_driver.tools.validation.lists import validate_list
from dra_driver.tools.validation.paths import FieldPath

# kube reports a result type other than bool without the "compilation failed" prefix.
_RESULT_TYPE_MESSAGE: Final = "must evaluate to "
_COMPILATION_FAILED: Final = "compilation failed: "
_TOO_COMPLEX: Final = "too complex, exceeds cost limit"


def validate_selectors(selectors: list[object] | None, max_items: int, path: FieldPath) -> list[FieldError]:
    """A ``selectors`` list of at most ``max_items`` CEL selectors."""
    return validate_list(selectors, max_items, validate_selector, path)


def validate_selector(value: object, path: FieldPath) -> list[FieldError]:
    """One selector: a ``cel`` whose expression is at most 10 KiB and compiles to a bool (an empty or
    missing one does not: kube reports it as the parser's syntax error, not as a required value)."""
    errors: list[FieldError] = []
    selector = as_object(value, path, errors) or {}
    cel_selector = get_object(selector, "cel", path, errors)
    if cel_selector is None:
        return [*errors, required(path.child("cel"))]
    cel_path = path.child("cel")
    expression = get_string(cel_selector, "expression", cel_path, errors)
    expression_path = cel_path.child("expression")
    if expression is None:
        if not errors:  # kube decodes a missing expression as "" and compiles that: a syntax error
            errors.extend(validate_expression("", expression_path))
    elif byte_length(expression) > limits.CEL_EXPRESSION_MAX_BYTES:
        errors.append(too_long(expression_path, limits.CEL_EXPRESSION_MAX_BYTES))
    else:
        errors.extend(validate_expression(expression, expression_path))
    return errors


def validate_expression(expression: str, path: FieldPath) -> list[FieldError]:
    """Compile ``expression`` as a device selector; one ``Invalid`` error, in kube's words, if it fails."""
    try:
        cel.compile_selector(expression)
    except CELCompileError as exc:
        if exc.message.startswith(_RESULT_TYPE_MESSAGE):
            return [invalid(path, expression, exc.message)]
        return [invalid(path, expression, _COMPILATION_FAILED + exc.details())]
    if estimate_cost(syntax.parse(expression)).too_complex:
        return [invalid(path, expression, _TOO_COMPLEX)]
    return []
