"""Bounded lists, sets and maps with kube's conventions (``validateSlice``, ``validateSet``, ``validateMap``).

- Too many entries is one ``Too many`` error at the list, and its entries are then not looked at
  (kube's guard against huge objects).
- A duplicate is reported at the index of the second occurrence, with the duplicated key as the value.
- Map keys are validated against the map's own path; each value at ``path[key]``, with very long keys
  shortened in the middle.  Keys are visited in sorted order so that the error order is stable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from dra_driver.tools.validation.errors import FieldError, duplicate, too_many
from dra_driver.tools.validation.paths import FieldPath

ItemRule = Callable[[object, FieldPath], list[FieldError]]
KeyRule = Callable[[str, FieldPath], list[FieldError]]
ItemKey = Callable[[object], str | None]

# A key shown in a path is cut to this many characters at least (kube's truncateIfTooLong).
_MIN_TRUNCATED_KEY: Final = 16
_ELLIPSIS: Final = "..."


def validate_list(
    items: Sequence[object] | None, max_items: int | None, rule: ItemRule, path: FieldPath
) -> list[FieldError]:
    """Each entry by ``rule`` at ``path[i]``; at most ``max_items`` entries (``None``: unbounded)."""
    if items is None:
        return []
    if max_items is not None and len(items) > max_items:
        return [too_many(path, len(items), max_items)]
    errors: list[FieldError] = []
    for position, item in enumerate(items):
        errors.extend(rule(item, path.index(position)))
    return errors


def validate_set(
    items: Sequence[object] | None, max_items: int | None, rule: ItemRule, key: ItemKey, path: FieldPath
) -> list[FieldError]:
    """Like :func:`validate_list`, then each ``key(entry)`` unique (entries whose key is ``None`` are skipped)."""
    if items is None:
        return []
    errors = validate_list(items, max_items, rule, path)
    if max_items is not None and len(items) > max_items:
        return errors
    seen: set[str] = set()
    for position, item in enumerate(items):
        item_key = key(item)
        if item_key is None:
            continue
        if item_key in seen:
            errors.append(duplicate(path.index(position), item_key))
        else:
            seen.add(item_key)
    return errors


def validate_map(
    mapping: Mapping[str, object] | None,
    max_items: int | None,
    key_rule: KeyRule,
    rule: ItemRule,
    path: FieldPath,
    shown_key_length: int,
) -> list[FieldError]:
    """Each key by ``key_rule`` (at ``path``) and each value by ``rule`` (at ``path[key]``)."""
    if mapping is None:
        return []
    if max_items is not None and len(mapping) > max_items:
        return [too_many(path, len(mapping), max_items)]
    errors: list[FieldError] = []
    for map_key in sorted(mapping):
        errors.extend(key_rule(map_key, path))
        errors.extend(rule(mapping[map_key], path.key(truncate_key(map_key, shown_key_length))))
    return errors


def truncate_key(key: str, max_length: int) -> str:
    """A map key shortened in the middle (``abc...xyz``) so that a path stays readable."""
    max_length = max(max_length, _MIN_TRUNCATED_KEY)
    if len(key) <= max_length:
        return key
    remaining = max_length - len(_ELLIPSIS)
    return key[: (remaining + 1) // 2] + _ELLIPSIS + key[len(key) - remaining // 2 :]


def string_key(item: object) -> str | None:
    """The key of a list of strings: the string itself."""
    return item if isinstance(item, str) else None


def field_key(name: str) -> ItemKey:
    """The key of a list of objects: the string field ``name`` of each object."""

    def key(item: object) -> str | None:
        if isinstance(item, Mapping):
            value = item.get(name, "")
            return value if isinstance(value, str) else None
        return None

    return key
