"""Immutable fields (apimachinery's ``ValidateImmutableField``): ``Invalid value: <new>: field is immutable``.

kube compares decoded Go structs with ``Semantic.DeepEqual``, for which an absent field, ``null`` and an
empty list or map are the same thing.  :func:`semantically_equal` compares JSON the same way, so a
client that echoes back ``"tolerations": []`` for an omitted list is not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from dra_driver.tools.validation.errors import FieldError, invalid
from dra_driver.tools.validation.paths import FieldPath

FIELD_IMMUTABLE: Final = "field is immutable"


def validate_immutable(new: object, old: object, path: FieldPath) -> list[FieldError]:
    """One error when ``new`` differs from ``old``; the new value is what kube shows."""
    if semantically_equal(new, old):
        return []
    return [invalid(path, new, FIELD_IMMUTABLE)]


def semantically_equal(left: object, right: object) -> bool:
    """JSON equality where absent, ``null``, ``[]`` and ``{}`` are all "unset"."""
    return _normalise(left) == _normalise(right)


def _normalise(value: object) -> object:
    if isinstance(value, Mapping):
        normalised = {key: _normalise(item) for key, item in value.items()}
        return {key: item for key, item in normalised.items() if item is not None} or None
    if isinstance(value, list):
        return [_normalise(item) for item in value] or None
    return value
