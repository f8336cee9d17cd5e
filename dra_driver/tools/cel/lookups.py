"""Recognising ``device.attributes[domain][id]`` and ``device.capacity[domain][id]`` in a syntax tree.

Owns: the one definition of what counts as a device lookup (``.name`` and ``['name']`` forms, at the
domain and at the id level, and through a ``cel.bind`` variable that holds a domain map), shared by
the checker (vocabulary-typed checking), lint (unknown names, unguarded lookups) and explain.

Must never: evaluate, or decide whether a lookup is safe (that is lint's job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver.tools.cel.syntax import Ident, Index, Literal, Node, Select

DEVICE = "device"
MAP_FIELDS = ("attributes", "capacity")


@dataclass(frozen=True, slots=True)
class DeviceLookup:
    """``device.<kind>[domain]`` (``name`` is None) or ``device.<kind>[domain][name]``."""

    kind: str  # "attributes" or "capacity"
    domain: str
    name: str | None
    node: Node

    def describe(self) -> str:
        """The lookup in canonical bracket form, for messages."""
        text = f"device.{self.kind}[{self.domain!r}]"
        return text if self.name is None else f"{text}.{self.name}"


def _key(node: Node) -> tuple[Node, str] | None:
    """(operand, key) of ``x.key`` or ``x['key']``."""
    if isinstance(node, Select):
        return node.operand, node.field
    if isinstance(node, Index) and isinstance(node.index, Literal) and node.index.kind == "string":
        return node.operand, str(node.index.value)
    return None


def device_map(node: Node, shadowed: frozenset[str] = frozenset()) -> str | None:
    """``"attributes"``/``"capacity"`` when ``node`` is ``device.attributes``/``device.capacity``."""
    if (
        isinstance(node, Select)
        and node.field in MAP_FIELDS
        and isinstance(node.operand, Ident)
        and node.operand.name == DEVICE
        and DEVICE not in shadowed
    ):
        return node.field
    return None


def device_lookup(
    node: Node, aliases: Mapping[str, DeviceLookup] | None = None, shadowed: frozenset[str] = frozenset()
) -> DeviceLookup | None:
    """The lookup ``node`` performs, or None.  ``aliases`` maps bind variables to domain lookups."""
    parts = _key(node)
    if parts is None:
        return None
    operand, key = parts
    kind = device_map(operand, shadowed)
    if kind is not None:
        return DeviceLookup(kind, key, None, node)
    if isinstance(operand, Ident) and aliases and operand.name in aliases:
        domain = aliases[operand.name]
        return DeviceLookup(domain.kind, domain.domain, key, node)
    inner = device_lookup(operand, aliases, shadowed)
    if inner is not None and inner.name is None:
        return DeviceLookup(inner.kind, inner.domain, key, node)
    return None
