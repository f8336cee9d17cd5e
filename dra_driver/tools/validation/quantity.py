"""Validation of Kubernetes ``resource.Quantity`` fields (``80Gi``, ``100m``, ``1.5``, ``2e3``).

The grammar and its error texts live in one place, :mod:`dra_driver.quantity` (a port of
apimachinery's ``ParseQuantity``); this module only turns its verdict into field errors.  A JSON
number is a quantity too (Go's ``Quantity.UnmarshalJSON`` accepts it unquoted).
"""

from __future__ import annotations

from dra_driver.quantity import Quantity, QuantityError
from dra_driver.tools.validation.errors import FieldError, invalid, required
from dra_driver.tools.validation.paths import FieldPath


def quantity_problem(value: object) -> str | None:
    """Why ``value`` (a JSON string or number) is not a Quantity, in kube's words; None if it is one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return "quantities must be strings or numbers"
    try:
        Quantity.parse(value if isinstance(value, str) else repr(value))
    except QuantityError as exc:
        return str(exc)
    return None


def is_quantity(value: object) -> bool:
    """Whether ``value`` (a JSON string or number) parses as a Quantity."""
    return quantity_problem(value) is None


def validate_quantity(value: object, path: FieldPath) -> list[FieldError]:
    """A required Quantity at ``path``."""
    if value is None or value == "":
        return [required(path)]
    problem = quantity_problem(value)
    return [invalid(path, value, problem)] if problem else []
