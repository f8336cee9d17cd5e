"""May this pod go to this node?  kube-scheduler's NodeUnschedulable, NodeName, TaintToleration and
NodeAffinity filter plugins, as one pure function of the two JSON objects.

The plugins run in kube-scheduler's default filter order (NodeUnschedulable, NodeName,
TaintToleration, NodeAffinity) and the first one that rejects the node gives the reason, worded
exactly as kube-scheduler puts it into a FailedScheduling event, so the local control plane's events
read like a real cluster's.

Parsing follows kube-scheduler, not API validation: a malformed ``nodeSelectorTerms`` entry (an
unknown operator, ``In`` without values, a ``Gt`` bound that is not an integer, an invalid label key or
value) makes that one term match nothing while the other terms still count, because the scheduler
builds the pod's affinity with ``nodeaffinity.NewLazyErrorNodeSelector`` and ignores its parse errors.
Nothing here raises on a bad pod or node; it never reads or writes the API server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.validation.names import is_label_value, is_qualified_name

JSON = Mapping[str, Any]

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"

# What NodeUnschedulable checks the pod's tolerations against when spec.unschedulable is set.
_UNSCHEDULABLE_TAINT: JSON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
# TaintToleration filters on these effects only; PreferNoSchedule is for scoring.
_FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def node_fit_problem(pod: JSON, node: JSON) -> str | None:
    """None when ``pod`` may run on ``node``, else kube-scheduler's reason for filtering the node out.

    Only these four plugins are asked; resources, ports, volumes and DRA claims are the caller's.
    """
    pod_spec: JSON = pod.get("spec") or {}
    node_spec: JSON = node.get("spec") or {}
    tolerations: Sequence[JSON] = pod_spec.get("tolerations") or []
    if node_spec.get("unschedulable") and not _tolerated(_UNSCHEDULABLE_TAINT, tolerations):
        return REASON_UNSCHEDULABLE
    wanted_node = str(pod_spec.get("nodeName") or "")
    if wanted_node and wanted_node != _node_name(node):
        return REASON_NODE_NAME
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in _FILTERED_EFFECTS and not _tolerated(taint, tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key') or ''}: {taint.get('value') or ''}}}"
    if not _required_affinity_matches(pod_spec, node):
        return REASON_NODE_AFFINITY
    return None


def _node_name(node: JSON) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


# -- TaintToleration and NodeUnschedulable ---------------------------------------------------------


def _tolerated(taint: JSON, tolerations: Sequence[JSON]) -> bool:
    return any(_tolerates(toleration, taint) for toleration in tolerations)


def _tolerates(toleration: JSON, taint: JSON) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``: an empty effect or key is a wildcard for that field.

    An empty key with ``Equal`` still compares values (API validation forbids it; the scheduler does
    not).  ``Gt``/``Lt`` (the alpha TaintTolerationComparisonOperators gate, off by default) and any
    other operator tolerate nothing, as with the gate off.  ``tolerationSeconds`` only delays eviction.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


# -- NodeAffinity ----------------------------------------------------------------------------------


def _required_affinity_matches(pod_spec: JSON, node: JSON) -> bool:
    """``nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)``: nodeSelector AND required affinity."""
    labels: Mapping[str, Any] = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key not in labels or str(labels[key]) != str(value):
            return False
    node_affinity: JSON = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    # A present selector with no terms (or only empty ones) matches no node at all.
    return any(_term_matches(term or {}, labels, _node_name(node)) for term in required.get("nodeSelectorTerms") or [])


def _term_matches(term: JSON, labels: Mapping[str, Any], name: str) -> bool:
    expressions: Sequence[JSON] = term.get("matchExpressions") or []
    fields: Sequence[JSON] = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    # Parse the whole term before matching: one malformed requirement voids the term even when an
    # earlier requirement already failed, as in the scheduler.
    if not all(_label_requirement_valid(r) for r in expressions) or not all(
        _field_requirement_valid(r) for r in fields
    ):
        return False
    if not all(_label_requirement_matches(r, labels) for r in expressions):
        return False
    # The scheduler skips field requirements for a node without a name (its field set is empty).
    return not name or all(_field_requirement_matches(r, name) for r in fields)


def _values(requirement: JSON) -> list[str]:
    return [str(value) for value in requirement.get("values") or []]


def _label_requirement_valid(requirement: JSON) -> bool:
    """``labels.NewRequirement`` would accept it: a qualified key, values as the operator wants, each a
    valid label value (so ``Gt: ["-1"]`` is void: ``-1`` is a fine integer but not a label value)."""
    operator = requirement.get("operator")
    values = _values(requirement)
    # The validation helpers return kube's messages: an empty list means valid.
    if is_qualified_name(str(requirement.get("key") or "")):
        return False
    if operator in ("In", "NotIn"):
        shape_ok = bool(values)
    elif operator in ("Exists", "DoesNotExist"):
        shape_ok = not values
    elif operator in ("Gt", "Lt"):
        shape_ok = len(values) == 1 and _parse_int64(values[0]) is not None
    else:
        return False
    return shape_ok and not any(is_label_value(value) for value in values)


def _label_requirement_matches(requirement: JSON, labels: Mapping[str, Any]) -> bool:
    key = str(requirement.get("key") or "")
    operator = requirement.get("operator")
    values = _values(requirement)
    present = key in labels
    value = str(labels[key]) if present else ""
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    # Gt / Lt: a missing label or one that is not an integer fails the requirement.
    number = _parse_int64(value) if present else None
    bound = _parse_int64(values[0])
    if number is None or bound is None:
        return False
    return number > bound if operator == "Gt" else number < bound


def _field_requirement_valid(requirement: JSON) -> bool:
    return requirement.get("operator") in ("In", "NotIn") and len(_values(requirement)) == 1


def _field_requirement_matches(requirement: JSON, name: str) -> bool:
    # A node's only selectable field is metadata.name; any other key reads as the empty string
    # (API validation rejects other keys, the scheduler just compares).
    actual = name if requirement.get("key") == "metadata.name" else ""
    equal = actual == _values(requirement)[0]
    return equal if requirement.get("operator") == "In" else not equal


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: ASCII digits with an optional sign, in int64 range."""
    if _DECIMAL.fullmatch(text) is None:
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None
