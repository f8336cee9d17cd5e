"""Least privilege, as rendered: no wildcards, exactly the rules each component's work needs, and the
ValidatingAdmissionPolicy's CEL evaluated on the requests a plugin could send (its own node's slices
pass; another node's, a slice moved between nodes, or a token without a node are refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest

from tests.integration.helm.chart import CHART, NAMESPACE, VALUES_FILES, Rendered, bound_rules, render, rules_of

ALL_VALUES = [None, *VALUES_FILES]
VALUES_IDS = ["default", *(path.stem for path in VALUES_FILES)]
PLUGIN_USER = f"system:serviceaccount:{NAMESPACE}:migdra-kubelet-plugin"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@pytest.mark.parametrize("values_file", ALL_VALUES, ids=VALUES_IDS)
def test_no_role_uses_wildcards_or_escalating_verbs(values_file: Path | None) -> None:
    rendered = render(values_file)
    roles = rendered.of_kind("ClusterRole") + rendered.of_kind("Role")
    assert roles
    for role in roles:
        for group, resource, verb, _ in rules_of(role):
            assert "*" not in (group, resource, verb), (role["metadata"]["name"], group, resource, verb)
            assert verb not in {"escalate", "bind", "impersonate", "deletecollection"}
            assert resource not in {"secrets", "pods/exec", "serviceaccounts/token", "nodes/proxy"}


def test_the_plugin_gets_exactly_what_it_uses() -> None:
    driver = "gpu.migdra.io"
    assert bound_rules(render(), "migdra-kubelet-plugin") == {
        *(("resource.k8s.io", "resourceslices", verb, "") for verb in ("list", "create", "update", "delete")),
        *(("resource.k8s.io", "resourceclaims", verb, "") for verb in ("get", "list", "watch")),
        ("resource.k8s.io", "resourceclaims/status", "patch", ""),
        # 1.36's granular status authorization: this driver's entries, on claims of its own node only
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch", driver),
        ("", "nodes", "get", ""),
        ("", "events", "create", ""),
        ("", "events", "patch", ""),  # a repeated Event: kubelet retrying a prepare that fails alike
    }


def test_the_controller_gets_exactly_what_it_uses() -> None:
    driver = "gpu.migdra.io"
    granted = bound_rules(render(), "migdra-controller")
    assert granted == {
        *(("resource.k8s.io", "resourceclaims", verb, "") for verb in ("get", "list", "watch")),
        ("resource.k8s.io", "resourceclaims/status", "patch", ""),
        ("resource.k8s.io", "resourceclaims/driver", "arbitrary-node:patch", driver),
        ("resource.k8s.io", "resourceslices", "list", ""),
        ("resource.k8s.io", "resourceslices", "watch", ""),
        ("", "events", "create", ""),
        ("", "events", "patch", ""),
        ("coordination.k8s.io", "leases", "create", ""),
        ("coordination.k8s.io", "leases", "get", f"{driver}-controller"),
        ("coordination.k8s.io", "leases", "update", f"{driver}-controller"),
    }
    # the Lease permissions live in the release namespace only
    (role,) = render().of_kind("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    # it never allocates: no resourceclaims/binding, no slice writes
    assert not {rule for rule in granted if rule[1] == "resourceclaims/binding"}
    assert not {rule for rule in granted if rule[1] == "resourceslices" and rule[2] not in {"list", "watch"}}


def test_the_status_rules_follow_the_driver_name() -> None:
    rendered = render(CHART / "ci" / "restricted-values.yaml")
    granted = bound_rules(rendered, "migdra-kubelet-plugin")
    assert ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch", "mig.example.com") in granted


# -- the ValidatingAdmissionPolicy, evaluated ----------------------------------------------------------

_CEL = celpy.Environment()


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    program = _CEL.program(_CEL.compile(expression))
    return program.evaluate(activation)


class Policy:
    """The rendered policy as kube-apiserver applies it: match conditions, then the variables in order
    (each sees the ones before), then every validation; the first false validation denies."""

    def __init__(self, rendered: Rendered) -> None:
        policy = rendered.one("ValidatingAdmissionPolicy", "-node-slices")
        self.spec = policy["spec"]
        (binding,) = [
            b
            for b in rendered.of_kind("ValidatingAdmissionPolicyBinding")
            if b["spec"]["policyName"] == policy["metadata"]["name"]
        ]
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert self.spec["failurePolicy"] == "Fail"

    def admit(
        self,
        operation: str,
        user: str,
        node: str | None,
        new_node: str | None = None,
        old_node: str | None = None,
    ) -> tuple[bool, str]:
        """(allowed, message) for a ResourceSlice ``operation`` by ``user`` whose token names ``node``."""
        extra = {NODE_NAME_EXTRA: [node]} if node is not None else {}
        request = {"operation": operation, "userInfo": {"username": user, "extra": extra}}

        def slice_of(node_name: str | None) -> dict[str, Any]:
            spec: dict[str, Any] = {"driver": "gpu.migdra.io", "pool": {"name": "p"}}
            if node_name is not None:
                spec["nodeName"] = node_name
            return {"metadata": {"name": "s"}, "spec": spec}

        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(None if operation == "DELETE" else slice_of(new_node)),
            "oldObject": celpy.json_to_cel(None if operation == "CREATE" else slice_of(old_node)),
        }
        rules = self.spec["matchConstraints"]["resourceRules"]
        assert any("resourceslices" in r["resources"] and operation in r["operations"] for r in rules)
        if not all(_evaluate(c["expression"], activation) for c in self.spec["matchConditions"]):
            return True, "not matched"
        variables: dict[str, Any] = {}
        for variable in self.spec["variables"]:
            activation["variables"] = celpy.json_to_cel(variables)
            variables[variable["name"]] = str(_evaluate(variable["expression"], activation))
        activation["variables"] = celpy.json_to_cel(variables)
        for validation in self.spec["validations"]:
            if not bool(_evaluate(validation["expression"], activation)):
                return False, str(_evaluate(validation["messageExpression"], activation))
        return True, "allowed"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(render())


@pytest.mark.parametrize(
    ("operation", "new_node", "old_node"),
    [("CREATE", "node-a", None), ("UPDATE", "node-a", "node-a"), ("DELETE", None, "node-a")],
)
def test_the_plugin_may_write_its_own_nodes_slices(
    policy: Policy, operation: str, new_node: str | None, old_node: str | None
) -> None:
    assert policy.admit(operation, PLUGIN_USER, "node-a", new_node, old_node) == (True, "allowed")


@pytest.mark.parametrize(
    ("operation", "new_node", "old_node", "message"),
    [
        ("CREATE", "node-b", None, "may only write ResourceSlices of that node, not of node node-b"),
        ("CREATE", None, None, "not a slice without spec.nodeName"),
        ("UPDATE", "node-b", "node-b", "not of node node-b"),
        ("UPDATE", "node-a", "node-b", "may only change ResourceSlices of that node, not of node node-b"),
        ("UPDATE", "node-b", "node-a", "may only write ResourceSlices of that node, not of node node-b"),
        ("DELETE", None, "node-b", "may only change ResourceSlices of that node, not of node node-b"),
    ],
)
def test_the_plugin_may_not_touch_another_nodes_slices(
    policy: Policy, operation: str, new_node: str | None, old_node: str | None, message: str
) -> None:
    allowed, said = policy.admit(operation, PLUGIN_USER, "node-a", new_node, old_node)
    assert not allowed
    assert said.startswith("the plugin on node node-a ")
    assert message in said


def test_a_token_without_a_node_is_refused(policy: Policy) -> None:
    allowed, said = policy.admit("CREATE", PLUGIN_USER, None, "node-a")
    assert not allowed
    assert "no node association found for user " + PLUGIN_USER in said


@pytest.mark.parametrize(
    "user",
    [
        "system:serviceaccount:other:migdra-kubelet-plugin",  # the same name in another namespace
        f"system:serviceaccount:{NAMESPACE}:migdra-controller",
        "system:node:node-b",  # kubelet's own writes are NodeRestriction's business
        "admin",
    ],
)
def test_other_users_are_not_governed_by_the_policy(policy: Policy, user: str) -> None:
    assert policy.admit("CREATE", user, "node-a", "node-b") == (True, "not matched")


def test_the_policy_names_the_release_namespaces_service_account() -> None:
    policy = Policy(render(namespace="elsewhere"))
    user = "system:serviceaccount:elsewhere:migdra-kubelet-plugin"
    assert policy.admit("CREATE", user, "node-a", "node-b")[0] is False
    assert policy.admit("CREATE", PLUGIN_USER, "node-a", "node-b") == (True, "not matched")


def test_no_policy_when_disabled() -> None:
    rendered = render(sets=["admissionPolicy.enabled=false"])
    assert not rendered.of_kind("ValidatingAdmissionPolicy")
    assert not rendered.of_kind("ValidatingAdmissionPolicyBinding")
