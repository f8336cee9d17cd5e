"""The chart under test, rendered by the real helm binary (``make tools`` installs it).

The tests never re-implement helm: every object they look at is what ``helm template`` printed for a
values file, parsed as YAML documents.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "migdra"
HELM = REPO / ".tools" / "helm" / "helm"
VALUES_FILES = sorted((CHART / "ci").glob("*.yaml"))
RELEASE, NAMESPACE = "migdra", "gpu-system"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real helm; its version is pinned by hack/install-helm.sh."""
    assert HELM.exists(), f"{HELM} is missing: `make tools` installs the real helm binary (hack/install-helm.sh)"
    result = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return result


def values_args(values_file: Path | None = None, sets: Iterable[str] = ()) -> list[str]:
    args = ["-f", str(values_file)] if values_file else []
    for item in sets:
        args += ["--set", item]
    return args


@dataclass
class Rendered:
    """The objects of one ``helm template``, by kind and name."""

    objects: list[dict[str, Any]]
    text: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [obj for obj in self.of_kind(kind) if obj["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"expected one {kind} *{name_suffix}, found {[o['metadata']['name'] for o in found]}"
        return found[0]


def render(values_file: Path | None = None, sets: Iterable[str] = (), namespace: str = NAMESPACE) -> Rendered:
    result = helm("template", RELEASE, str(CHART), "--namespace", namespace, *values_args(values_file, sets))
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return Rendered(objects, result.stdout)


def container_env(workload: dict[str, Any], container: str) -> dict[str, Any]:
    """``name -> value`` (or ``valueFrom``) of one container of a DaemonSet or Deployment."""
    (found,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in found.get("env", [])}


Rule = tuple[str, str, str, str]  # (apiGroup, resource, verb, resourceName or "")


def rules_of(role: dict[str, Any]) -> set[Rule]:
    expanded: set[Rule] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        expanded.add((group, resource, verb, name))
    return expanded


def bound_rules(rendered: Rendered, service_account: str, namespace: str = NAMESPACE) -> set[Rule]:
    """Every rule granted to ``service_account`` (of the release ``namespace``) through the rendered bindings."""
    roles = {(obj["kind"], obj["metadata"]["name"]): obj for obj in rendered.of_kind("ClusterRole")}
    roles |= {(obj["kind"], obj["metadata"]["name"]): obj for obj in rendered.of_kind("Role")}
    granted: set[Rule] = set()
    for binding in rendered.of_kind("ClusterRoleBinding") + rendered.of_kind("RoleBinding"):
        subjects = binding["subjects"]
        if any(s["kind"] == "ServiceAccount" and s["name"] == service_account for s in subjects):
            assert all(s["namespace"] == namespace for s in subjects)
            granted |= rules_of(roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])])
    return granted
