"""Does a node selector, ``nodeName`` or ``allNodes`` match this node?  (``nodeaffinity`` semantics.)

Terms are ORed; inside a term every ``matchExpressions`` requirement (on labels) and every
``matchFields`` requirement (only ``metadata.name``) must hold; a term with no requirements matches
nothing.  A malformed selector raises :class:`AllocationError`, since kube-scheduler fails the attempt
when it cannot parse one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.jsontypes import JSON
from dra_driver.tools.allocation.errors import AllocationError


def node_name(node: JSON) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def node_matches(node: JSON, name_to_match: str, all_nodes: bool, selector: JSON | None) -> bool:
    """``NodeMatches``: a name wins over ``allNodes``, which wins over a selector; none of them: no."""
    if name_to_match:
        return node_name(node) == name_to_match
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(node, selector)
    return False


def selector_matches(node: JSON, selector: JSON) -> bool:
    terms = selector.get("nodeSelectorTerms") or []
    labels: Mapping[str, Any] = (node.get("metadata") or {}).get("labels") or {}
    name = node_name(node)
    matched = False
    for index, term in enumerate(terms):
        # Every term is parsed, as NewNodeSelector does, so a malformed later term is an error too.
        if _term_matches(term or {}, labels, name, index) and not matched:
            matched = True
    return matched


def _term_matches(term: JSON, labels: Mapping[str, Any], name: str, index: int) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    result = True
    for requirement in expressions:
        if not _label_requirement(requirement, labels, index):
            result = False
    for requirement in fields:
        if not _field_requirement(requirement, name, index):
            result = False
    return result


def _values(requirement: JSON) -> list[str]:
    return [str(value) for value in requirement.get("values") or []]


def _label_requirement(requirement: JSON, labels: Mapping[str, Any], index: int) -> bool:
    key = str(requirement.get("key") or "")
    operator = requirement.get("operator")
    values = _values(requirement)
    where = f"nodeSelectorTerms[{index}].matchExpressions key {key!r}"
    if not key:
        raise AllocationError(f"{where}: key must not be empty")
    present = key in labels
    value = str(labels.get(key, ""))
    if operator in ("In", "NotIn"):
        if not values:
            raise AllocationError(f"{where}: for 'in', 'notin' operators, values set can't be empty")
        return (present and value in values) if operator == "In" else not (present and value in values)
    if operator in ("Exists", "DoesNotExist"):
        if values:
            raise AllocationError(f"{where}: values set must be empty for exists and does not exist")
        return present if operator == "Exists" else not present
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise AllocationError(f"{where}: for 'Gt', 'Lt' operators, exactly one value is required")
        try:
            bound = int(values[0])
        except ValueError:
            raise AllocationError(f"{where}: for 'Gt', 'Lt' operators, the value must be an integer") from None
        if not present:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    raise AllocationError(f"{where}: {operator!r} is not a valid label selector operator")


def _field_requirement(requirement: JSON, name: str, index: int) -> bool:
    key = requirement.get("key")
    operator = requirement.get("operator")
    values = _values(requirement)
    where = f"nodeSelectorTerms[{index}].matchFields key {key!r}"
    if key != "metadata.name":
        raise AllocationError(f"{where}: not a valid field selector key, only metadata.name is supported")
    if operator not in ("In", "NotIn"):
        raise AllocationError(f"{where}: {operator!r} is not a valid field selector operator")
    if len(values) != 1:
        raise AllocationError(f"{where}: must have exactly one value")
    return (name == values[0]) if operator == "In" else (name != values[0])
