"""kube-scheduler's node filters (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity): which
nodes a pod may use, and the FailedScheduling wording when it may not."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.scheduler.nodefit import (
    REASON_NODE_AFFINITY,
    REASON_NODE_NAME,
    REASON_UNSCHEDULABLE,
    node_fit_problem,
)

LABELS = {"zone": "a", "tier": "gpu", "gpus": "8", "big": "9223372036854775807", "word": "eight", "empty": ""}


def make_node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {"metadata": {"name": name, "labels": dict(LABELS if labels is None else labels)}, "spec": spec}


def make_pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": [{"name": "c"}], **spec}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


def field(operator: str, *values: str, key: str = "metadata.name") -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_plain_pod_fits_plain_node() -> None:
    assert node_fit_problem(make_pod(), make_node()) is None


def test_empty_objects_fit() -> None:
    assert node_fit_problem({}, {}) is None


# -- NodeUnschedulable ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param(None, REASON_UNSCHEDULABLE, id="no-tolerations"),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
            None,
            id="exists-noschedule",
        ),
        pytest.param([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], None, id="any-effect"),
        pytest.param([{"key": "node.kubernetes.io/unschedulable"}], None, id="equal-empty-value-default-operator"),
        pytest.param([{"operator": "Exists"}], None, id="tolerate-everything"),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Equal", "value": "true"}],
            REASON_UNSCHEDULABLE,
            id="equal-wrong-value",
        ),
        pytest.param(
            [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}],
            REASON_UNSCHEDULABLE,
            id="wrong-effect",
        ),
        pytest.param([{"key": "other", "operator": "Exists"}], REASON_UNSCHEDULABLE, id="wrong-key"),
    ],
)
def test_unschedulable_node(tolerations: list[dict[str, Any]] | None, expected: str | None) -> None:
    pod = make_pod() if tolerations is None else make_pod(tolerations=tolerations)
    assert node_fit_problem(pod, make_node(unschedulable=True)) == expected


def test_schedulable_false_is_fine() -> None:
    assert node_fit_problem(make_pod(), make_node(unschedulable=False)) is None


def test_unschedulable_comes_before_every_other_reason() -> None:
    pod = make_pod(nodeName="other", nodeSelector={"zone": "b"})
    node = make_node(unschedulable=True, taints=[{"key": "k", "effect": "NoSchedule"}])
    assert node_fit_problem(pod, node) == REASON_UNSCHEDULABLE


# -- NodeName ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_name", "expected"),
    [
        pytest.param("n1", None, id="same-node"),
        pytest.param("n2", REASON_NODE_NAME, id="other-node"),
        pytest.param("", None, id="empty-means-any"),
    ],
)
def test_node_name(node_name: str, expected: str | None) -> None:
    assert node_fit_problem(make_pod(nodeName=node_name), make_node("n1")) == expected


def test_node_name_comes_before_taints_and_affinity() -> None:
    pod = make_pod(nodeName="n2", nodeSelector={"zone": "b"})
    assert node_fit_problem(pod, make_node(taints=[{"key": "k", "effect": "NoSchedule"}])) == REASON_NODE_NAME


# -- TaintToleration --------------------------------------------------------------------------------

TAINT = {"key": "gpu", "value": "busy", "effect": "NoSchedule"}
UNTOLERATED = "node(s) had untolerated taint {gpu: busy}"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param({"key": "gpu", "operator": "Equal", "value": "busy", "effect": "NoSchedule"}, True, id="exact"),
        pytest.param({"key": "gpu", "value": "busy", "effect": "NoSchedule"}, True, id="operator-defaults-to-equal"),
        pytest.param({"key": "gpu", "value": "busy"}, True, id="empty-effect-matches-all"),
        pytest.param({"key": "gpu", "value": "idle"}, False, id="default-operator-compares-values"),
        pytest.param({"key": "gpu", "operator": "Equal", "value": "idle"}, False, id="equal-other-value"),
        pytest.param({"key": "gpu", "operator": "Equal"}, False, id="equal-missing-value"),
        pytest.param({"key": "gpu", "operator": "Exists"}, True, id="exists-any-value"),
        pytest.param({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, True, id="exists-same-effect"),
        pytest.param({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False, id="exists-other-effect"),
        pytest.param({"key": "gpu", "operator": "Exists", "effect": "PreferNoSchedule"}, False, id="prefer-effect"),
        pytest.param({"key": "cpu", "operator": "Exists"}, False, id="other-key"),
        pytest.param({"key": "GPU", "operator": "Exists"}, False, id="key-is-case-sensitive"),
        pytest.param({"operator": "Exists"}, True, id="empty-key-exists-tolerates-all"),
        pytest.param({"operator": "Exists", "effect": "NoSchedule"}, True, id="empty-key-exists-same-effect"),
        pytest.param({"operator": "Exists", "effect": "NoExecute"}, False, id="empty-key-exists-other-effect"),
        pytest.param({"operator": "Equal", "value": "busy"}, True, id="empty-key-equal-compares-value"),
        pytest.param({"operator": "Equal", "value": "idle"}, False, id="empty-key-equal-other-value"),
        pytest.param({"key": "gpu", "operator": "Gt", "value": "1"}, False, id="gt-operator-gate-off"),
        pytest.param({"key": "gpu", "operator": "exists"}, False, id="unknown-operator"),
        pytest.param(
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 0},
            True,
            id="toleration-seconds-ignored",
        ),
    ],
)
def test_toleration_semantics(toleration: dict[str, Any], tolerated: bool) -> None:
    result = node_fit_problem(make_pod(tolerations=[toleration]), make_node(taints=[TAINT]))
    assert result == (None if tolerated else UNTOLERATED)


def test_noexecute_taint_filters_and_toleration_seconds_do_not_matter() -> None:
    taint = {"key": "gpu", "value": "busy", "effect": "NoExecute"}
    assert node_fit_problem(make_pod(), make_node(taints=[taint])) == UNTOLERATED
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    assert node_fit_problem(make_pod(tolerations=[toleration]), make_node(taints=[taint])) is None


@pytest.mark.parametrize("effect", ["PreferNoSchedule", "None", "", "SomethingNew"])
def test_only_noschedule_and_noexecute_filter(effect: str) -> None:
    assert node_fit_problem(make_pod(), make_node(taints=[{"key": "gpu", "value": "busy", "effect": effect}])) is None


def test_first_untolerated_taint_is_named() -> None:
    taints = [
        {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
        {"key": "ok", "value": "1", "effect": "NoSchedule"},
        {"key": "first", "value": "v1", "effect": "NoExecute"},
        {"key": "second", "value": "v2", "effect": "NoSchedule"},
    ]
    pod = make_pod(tolerations=[{"key": "ok", "operator": "Exists"}])
    assert node_fit_problem(pod, make_node(taints=taints)) == "node(s) had untolerated taint {first: v1}"


def test_taint_without_value_is_named_with_empty_value() -> None:
    node = make_node(taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    assert node_fit_problem(make_pod(), node) == "node(s) had untolerated taint {dedicated: }"


def test_any_of_several_tolerations_suffices() -> None:
    tolerations = [{"key": "cpu", "operator": "Exists"}, {"key": "gpu", "value": "busy"}]
    assert node_fit_problem(make_pod(tolerations=tolerations), make_node(taints=[TAINT])) is None


def test_taint_comes_before_affinity() -> None:
    pod = make_pod(nodeSelector={"zone": "b"})
    assert node_fit_problem(pod, make_node(taints=[TAINT])) == UNTOLERATED


# -- NodeAffinity: nodeSelector ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_selector", "expected"),
    [
        pytest.param({"zone": "a"}, None, id="one-label"),
        pytest.param({"zone": "a", "tier": "gpu"}, None, id="all-labels"),
        pytest.param({"zone": "a", "tier": "cpu"}, REASON_NODE_AFFINITY, id="one-label-differs"),
        pytest.param({"missing": ""}, REASON_NODE_AFFINITY, id="empty-value-needs-the-label"),
        pytest.param({"empty": ""}, None, id="empty-value-matches-empty-label"),
        pytest.param({"zone": "A"}, REASON_NODE_AFFINITY, id="values-are-case-sensitive"),
        pytest.param({}, None, id="empty-selector"),
    ],
)
def test_node_selector(node_selector: dict[str, str], expected: str | None) -> None:
    assert node_fit_problem(make_pod(nodeSelector=node_selector), make_node()) == expected


def test_node_selector_and_affinity_must_both_match() -> None:
    affinity = required({"matchExpressions": [expr("zone", "In", "a")]})
    assert node_fit_problem(make_pod(nodeSelector={"tier": "cpu"}, affinity=affinity), make_node()) == (
        REASON_NODE_AFFINITY
    )
    assert node_fit_problem(make_pod(nodeSelector={"tier": "gpu"}, affinity=affinity), make_node()) is None


# -- NodeAffinity: required terms -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        pytest.param(expr("zone", "In", "a"), True, id="in"),
        pytest.param(expr("zone", "In", "b", "a"), True, id="in-second-value"),
        pytest.param(expr("zone", "In", "b"), False, id="in-miss"),
        pytest.param(expr("missing", "In", "a"), False, id="in-missing-label"),
        pytest.param(expr("empty", "In", ""), True, id="in-empty-value"),
        pytest.param(expr("zone", "NotIn", "b"), True, id="notin"),
        pytest.param(expr("zone", "NotIn", "a"), False, id="notin-miss"),
        pytest.param(expr("missing", "NotIn", "a"), True, id="notin-missing-label"),
        pytest.param(expr("zone", "Exists"), True, id="exists"),
        pytest.param(expr("empty", "Exists"), True, id="exists-empty-label"),
        pytest.param(expr("missing", "Exists"), False, id="exists-miss"),
        pytest.param(expr("missing", "DoesNotExist"), True, id="doesnotexist"),
        pytest.param(expr("zone", "DoesNotExist"), False, id="doesnotexist-miss"),
        pytest.param(expr("gpus", "Gt", "7"), True, id="gt"),
        pytest.param(expr("gpus", "Gt", "8"), False, id="gt-equal"),
        pytest.param(expr("gpus", "Gt", "10"), False, id="gt-numeric-not-lexical"),
        pytest.param(expr("gpus", "Lt", "9"), True, id="lt"),
        pytest.param(expr("gpus", "Lt", "8"), False, id="lt-equal"),
        pytest.param(expr("gpus", "Lt", "10"), True, id="lt-numeric-not-lexical"),
        pytest.param(expr("gpus", "Gt", "007"), True, id="gt-leading-zeros"),
        pytest.param(expr("gpus", "Lt", "+9"), False, id="gt-plus-sign-is-not-a-label-value"),
        pytest.param(expr("big", "Gt", "9223372036854775806"), True, id="gt-int64-max"),
        pytest.param(expr("missing", "Gt", "0"), False, id="gt-missing-label"),
        pytest.param(expr("word", "Gt", "0"), False, id="gt-label-not-integer"),
        pytest.param(expr("empty", "Lt", "1"), False, id="lt-empty-label"),
    ],
)
def test_match_expression(requirement: dict[str, Any], matches: bool) -> None:
    pod = make_pod(affinity=required({"matchExpressions": [requirement]}))
    assert node_fit_problem(pod, make_node()) == (None if matches else REASON_NODE_AFFINITY)


@pytest.mark.parametrize(
    ("label", "requirement", "matches"),
    [
        pytest.param("-5", expr("n", "Gt", "0"), False, id="negative-label-is-less"),
        pytest.param("+5", expr("n", "Gt", "4"), True, id="plus-signed-label-parses"),
        pytest.param("9223372036854775808", expr("n", "Gt", "0"), False, id="label-beyond-int64"),
        pytest.param("1_000", expr("n", "Gt", "0"), False, id="underscore-label"),
        pytest.param(" 5", expr("n", "Gt", "0"), False, id="space-label"),
        pytest.param("\u0665", expr("n", "Gt", "0"), False, id="non-ascii-digit-label"),
        pytest.param("5.0", expr("n", "Gt", "0"), False, id="decimal-label"),
    ],
)
def test_gt_lt_parse_node_labels_as_go_int64(label: str, requirement: dict[str, Any], matches: bool) -> None:
    pod = make_pod(affinity=required({"matchExpressions": [requirement]}))
    assert node_fit_problem(pod, make_node(labels={"n": label})) == (None if matches else REASON_NODE_AFFINITY)


@pytest.mark.parametrize(
    "requirement",
    [
        pytest.param(expr("zone", "In"), id="in-without-values"),
        pytest.param(expr("missing", "NotIn"), id="notin-without-values"),
        pytest.param(expr("zone", "Exists", "a"), id="exists-with-values"),
        pytest.param(expr("missing", "DoesNotExist", "x"), id="doesnotexist-with-values"),
        pytest.param(expr("gpus", "Gt"), id="gt-without-value"),
        pytest.param(expr("gpus", "Gt", "1", "2"), id="gt-two-values"),
        pytest.param(expr("gpus", "Gt", "one"), id="gt-not-integer"),
        pytest.param(expr("gpus", "Lt", "1.5"), id="lt-decimal"),
        pytest.param(expr("gpus", "Gt", "-1"), id="gt-negative-is-not-a-label-value"),
        pytest.param(expr("gpus", "Gt", "9223372036854775808"), id="gt-beyond-int64"),
        pytest.param(expr("zone", "in", "a"), id="operator-is-case-sensitive"),
        pytest.param(expr("zone", "Equals", "a"), id="unknown-operator"),
        pytest.param(expr("bad key", "Exists"), id="invalid-key"),
        pytest.param(expr("", "DoesNotExist"), id="empty-key"),
        pytest.param(expr("zone", "In", "a", "not a value!"), id="invalid-value"),
        pytest.param(expr("zone", "NotIn", "x" * 64), id="value-too-long"),
    ],
)
def test_malformed_requirement_voids_its_term_only(requirement: dict[str, Any]) -> None:
    broken = {"matchExpressions": [requirement]}
    assert node_fit_problem(make_pod(affinity=required(broken)), make_node()) == REASON_NODE_AFFINITY
    good = {"matchExpressions": [expr("zone", "In", "a")]}
    assert node_fit_problem(make_pod(affinity=required(broken, good)), make_node()) is None
    assert node_fit_problem(make_pod(affinity=required(good, broken)), make_node()) is None


def test_malformed_requirement_voids_term_even_after_a_failing_one() -> None:
    term = {"matchExpressions": [expr("zone", "In", "b"), expr("zone", "In")]}
    assert node_fit_problem(make_pod(affinity=required(term)), make_node()) == REASON_NODE_AFFINITY


def test_prefixed_label_keys_work() -> None:
    node = make_node(labels={"nvidia.com/gpu.product": "H200"})
    pod = make_pod(affinity=required({"matchExpressions": [expr("nvidia.com/gpu.product", "In", "H200")]}))
    assert node_fit_problem(pod, node) is None


def test_expressions_in_a_term_are_anded() -> None:
    both = {"matchExpressions": [expr("zone", "In", "a"), expr("tier", "In", "gpu")]}
    one_fails = {"matchExpressions": [expr("zone", "In", "a"), expr("tier", "In", "cpu")]}
    assert node_fit_problem(make_pod(affinity=required(both)), make_node()) is None
    assert node_fit_problem(make_pod(affinity=required(one_fails)), make_node()) == REASON_NODE_AFFINITY


def test_terms_are_ored() -> None:
    miss = {"matchExpressions": [expr("zone", "In", "b")]}
    hit = {"matchExpressions": [expr("zone", "In", "a")]}
    assert node_fit_problem(make_pod(affinity=required(miss, hit)), make_node()) is None
    assert node_fit_problem(make_pod(affinity=required(miss, miss)), make_node()) == REASON_NODE_AFFINITY


@pytest.mark.parametrize(
    "affinity",
    [
        pytest.param(required(), id="no-terms"),
        pytest.param(required({}), id="one-empty-term"),
        pytest.param(required({"matchExpressions": [], "matchFields": []}), id="term-with-empty-lists"),
        pytest.param({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}, id="selector-no-key"),
    ],
)
def test_empty_required_selector_matches_nothing(affinity: dict[str, Any]) -> None:
    assert node_fit_problem(make_pod(affinity=affinity), make_node()) == REASON_NODE_AFFINITY


def test_empty_term_beside_matching_term_is_harmless() -> None:
    affinity = required({}, {"matchExpressions": [expr("zone", "Exists")]})
    assert node_fit_problem(make_pod(affinity=affinity), make_node()) is None


@pytest.mark.parametrize(
    "affinity",
    [
        pytest.param({}, id="no-node-affinity"),
        pytest.param({"nodeAffinity": {}}, id="no-required"),
        pytest.param({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}, id="required-null"),
        pytest.param(
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "b")]}}
                    ]
                }
            },
            id="preferred-only-is-not-a-filter",
        ),
        pytest.param(
            {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}, id="other-affinity-kinds"
        ),
    ],
)
def test_absent_required_affinity_matches_every_node(affinity: dict[str, Any]) -> None:
    assert node_fit_problem(make_pod(affinity=affinity), make_node()) is None


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        pytest.param(field("In", "n1"), True, id="in"),
        pytest.param(field("In", "n2"), False, id="in-other"),
        pytest.param(field("NotIn", "n2"), True, id="notin"),
        pytest.param(field("NotIn", "n1"), False, id="notin-self"),
        pytest.param(field("In", "n1", "n2"), False, id="in-two-values-is-malformed"),
        pytest.param(field("In"), False, id="in-no-values-is-malformed"),
        pytest.param(field("Exists"), False, id="exists-is-malformed"),
        pytest.param(field("NotIn", "n2", key="metadata.uid"), True, id="other-key-reads-empty"),
        pytest.param(field("In", "n1", key="metadata.uid"), False, id="other-key-in"),
    ],
)
def test_match_fields(requirement: dict[str, Any], matches: bool) -> None:
    pod = make_pod(affinity=required({"matchFields": [requirement]}))
    assert node_fit_problem(pod, make_node("n1")) == (None if matches else REASON_NODE_AFFINITY)


def test_match_fields_and_expressions_in_one_term_are_anded() -> None:
    term = {"matchExpressions": [expr("zone", "In", "a")], "matchFields": [field("In", "n1")]}
    assert node_fit_problem(make_pod(affinity=required(term)), make_node("n1")) is None
    assert node_fit_problem(make_pod(affinity=required(term)), make_node("n2")) == REASON_NODE_AFFINITY
    assert node_fit_problem(make_pod(affinity=required(term)), make_node("n1", labels={})) == REASON_NODE_AFFINITY
