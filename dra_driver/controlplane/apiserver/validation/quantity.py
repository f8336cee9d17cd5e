"""The syntax of a Kubernetes ``resource.Quantity`` (``80Gi``, ``100m``, ``1.5``, ``2e3``): syntax only.

The grammar is apimachinery's (``api/resource/quantity.go``)::

    <quantity>  ::= <sign>? <number> <suffix>
    <number>    ::= <digits> | <digits>.<digits>? | .<digits>
    <suffix>    ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E | (e|E) <sign>? <digits>

A JSON number is a quantity too (Go's ``Quantity.UnmarshalJSON`` accepts it unquoted).  This module never
computes a quantity's value.
"""

from __future__ import annotations

import re
from typing import Final

from dra_driver.controlplane.apiserver.validation.errors import FieldError, invalid, required
from dra_driver.controlplane.apiserver.validation.paths import FieldPath

_QUANTITY: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")

# What kube-apiserver's decoder answers for a malformed quantity (resource.ErrFormatWrong).
QUANTITY_FORMAT_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def is_quantity(value: object) -> bool:
    """Whether ``value`` (a JSON string or number) parses as a Quantity."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        value = repr(value)
    return isinstance(value, str) and _QUANTITY.fullmatch(value) is not None


def validate_quantity(value: object, path: FieldPath) -> list[FieldError]:
    """A required Quantity at ``path``."""
    if value is None or value == "":
        return [required(path)]
    if not is_quantity(value):
        return [invalid(path, value, QUANTITY_FORMAT_MESSAGE)]
    return []
