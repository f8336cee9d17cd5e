"""Label and field selectors: parsing the query-string syntax and matching objects.

Label selectors support every operator kube-apiserver does (``=``, ``==``, ``!=``, ``in``, ``notin``,
exists, ``!key``, ``gt``/``lt``); field selectors support ``=``, ``==`` and ``!=`` over the field labels
a resource declares in the registry.  Parse errors raise :class:`BadRequest` so the client gets a 400,
never an empty list that looks like "nothing matched".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.validation.names import is_label_value, is_qualified_name
from migdra_devcluster.apiserver.errors import BadRequest
from migdra_devcluster.apiserver.registry import ResourceType, field_value

_REQUIREMENT = re.compile(
    r"^\s*(?P<not>!)?\s*(?P<key>[^\s!=<>(),]+)\s*"
    r"(?:(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s,()]*)"
    r"|\s(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?\s*$"
)


def _valid_key(key: str) -> bool:
    return not is_qualified_name(key)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


@dataclass(frozen=True)
class LabelRequirement:
    """One clause of a label selector."""

    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: ``!=`` and ``notin`` also match objects without the key."""
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return present and (number > bound if self.operator == "gt" else number < bound)


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector``; every requirement must hold."""

    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj``'s ``metadata.labels`` satisfy every requirement."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the ``labelSelector`` query parameter; an empty one matches everything."""
    if not text or not text.strip():
        return LabelSelector()
    requirements = []
    for clause in _split_top_level(text):
        match = _REQUIREMENT.match(clause)
        if not match or not _valid_key(match["key"]):
            raise BadRequest(f"unable to parse requirement: invalid label selector clause {clause.strip()!r}")
        key = match["key"]
        if match["not"]:
            if match["op"] or match["setop"]:
                raise BadRequest(f"unable to parse requirement: {clause.strip()!r}: '!' takes a bare key")
            requirements.append(LabelRequirement(key, "!", ()))
        elif match["setop"]:
            values = tuple(v.strip() for v in match["values"].split(",") if v.strip())
            _check_values(values, clause)
            requirements.append(LabelRequirement(key, match["setop"], values))
        elif match["op"]:
            value = match["value"]
            _check_values((value,), clause)
            op = {"==": "=", "=": "=", "!=": "!=", ">": "gt", "<": "lt"}[match["op"]]
            if op in ("gt", "lt") and not re.fullmatch(r"-?\d+", value):
                raise BadRequest(f"unable to parse requirement: {clause.strip()!r}: {match['op']} needs an integer")
            requirements.append(LabelRequirement(key, op, (value,)))
        else:
            requirements.append(LabelRequirement(key, "exists", ()))
    return LabelSelector(tuple(requirements))


def _check_values(values: tuple[str, ...], clause: str) -> None:
    for value in values:
        if is_label_value(value):
            raise BadRequest(f"unable to parse requirement: invalid label value {value!r} in {clause.strip()!r}")


@dataclass(frozen=True)
class FieldRequirement:
    """One clause of a field selector, with the getter of the value it compares."""

    label: str
    equal: bool
    value: str
    path: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """``=``/``==`` compares equal, ``!=`` unequal; a missing field reads as ``""``."""
        return (field_value(obj, self.path) == self.value) is self.equal


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``; every requirement must hold."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether every clause holds for ``obj``."""
        return all(r.matches(obj) for r in self.requirements)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str | None, resource: ResourceType) -> FieldSelector:
    """Parse ``fieldSelector`` against the labels ``resource`` supports; others are a 400."""
    if not text or not text.strip():
        return FieldSelector()
    supported = resource.selectable_fields()
    requirements = []
    for clause in _split_unescaped(text, ","):
        if not clause.strip():
            continue
        match = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)(.*)$", clause)
        if not match:
            raise BadRequest(f"invalid selector: '{text}'; can't understand '{clause}'")
        label, op, value = match.group(1), match.group(2), match.group(3).strip()
        path = supported.get(label)
        if path is None:
            raise BadRequest(_unsupported_field_label(resource, label))
        requirements.append(FieldRequirement(label, op != "!=", value, path))
    return FieldSelector(tuple(requirements))


def _unsupported_field_label(resource: ResourceType, label: str) -> str:
    """kube's words for a field label the kind does not serve, which depend on how the kind registered its
    field labels: core kinds through their own conversion functions, other kinds with extra labels
    through one that names the group-version-kind, and kinds without any through the default one."""
    if not resource.field_selectors:
        return f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
    if not resource.group:
        return f"field label not supported: {label}"
    return f"field label not supported for {resource.group_version}, Kind={resource.kind}: {label}"
