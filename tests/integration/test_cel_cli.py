"""``migdra cel eval`` and ``migdra cel lint`` as an admin runs them: the console script, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver.devicemodel import example_slices
from tests.kube_apiserver import KubeApiServer

MIGDRA = str(Path(sys.executable).with_name("migdra"))
REPO = Path(__file__).resolve().parents[2]
D = "device.attributes['gpu.migdra.io']"
MIG_CLASS = f"device.driver == 'gpu.migdra.io' && {D}.type == 'mig' && !('shared' in {D})"  # as mig.migdra.io


def migdra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MIGDRA, "cel", *args], capture_output=True, text=True, check=False, timeout=60)


def foreign_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
        },
    }


@pytest.fixture
def slices_file(tmp_path: Path) -> Path:
    """One H100 with MIG on, one A100 with MIG off (as the device model publishes them), one NVIDIA GPU."""
    slices = example_slices(["H100-SXM5-80GB"], mig_enabled=True)
    whole = example_slices(["A100-SXM4-40GB"], mig_enabled=False)
    for index, body in enumerate(whole):
        body["metadata"]["name"] = f"whole-gpu-{index}"
        body["spec"]["pool"]["name"] = "node-b"
    path = tmp_path / "slices.yaml"
    path.write_text(yaml.safe_dump_all([*slices, *whole, foreign_slice()]))
    return path


def device_lines(stdout: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"MATCH": [], "NO MATCH": [], "ERROR": []}
    for line in stdout.splitlines():
        for label in ("NO MATCH", "MATCH", "ERROR"):
            if line.startswith(label):
                found[label].append(line)
                break
    return found


def test_eval_lists_matches_non_matches_and_why(slices_file: Path) -> None:
    result = migdra("eval", f"{MIG_CLASS} && {D}.profile == '3g.40gb'", "--slices", str(slices_file))
    assert result.returncode == 0, result.stderr
    lines = device_lines(result.stdout)
    assert len(lines["MATCH"]) == 2  # two 3g.40gb placements on an H100
    assert all("gpu-0-mig-3g40gb" in line for line in lines["MATCH"])
    assert lines["ERROR"] == []
    whole_gpu = next(line for line in lines["NO MATCH"] if "node-b" in line)
    assert f"clause 2 of 4 is false: {D}.type == 'mig'" in whole_gpu
    nvidia = next(line for line in lines["NO MATCH"] if "gpu.nvidia.com" in line)
    assert "clause 1 of 4 is false: device.driver == 'gpu.migdra.io'" in nvidia
    # the H100's 25 MIG devices (no shared ones by default), the whole A100 and NVIDIA's GPU
    assert result.stdout.splitlines()[-1] == "27 devices: 2 match, 25 do not match, 0 errors"


def test_eval_names_a_bare_literal_clause(slices_file: Path) -> None:
    result = migdra("eval", "device.driver == 'gpu.migdra.io' && false", "--slices", str(slices_file))
    assert result.returncode == 0, result.stderr
    ours = [line for line in device_lines(result.stdout)["NO MATCH"] if "gpu.nvidia.com" not in line]
    assert ours
    assert all(line.endswith("clause 2 of 2 is false: false") for line in ours)


def test_eval_reports_runtime_errors_but_exits_zero(slices_file: Path) -> None:
    result = migdra("eval", f"{D}.profile == '1g.10gb'", "--slices", str(slices_file))
    assert result.returncode == 0
    lines = device_lines(result.stdout)
    assert len(lines["ERROR"]) == 2  # the whole A100 and NVIDIA's GPU have no profile
    assert all(f"no such key: profile from {D}.profile" in line for line in lines["ERROR"])
    assert "aborts the pod's whole scheduling attempt" in result.stderr


def test_eval_compile_error_is_one_usage_error_line_with_the_position(slices_file: Path) -> None:
    result = migdra("eval", f"{D}.profile ==", "--slices", str(slices_file))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "migdra: error: EXPRESSION does not compile: ERROR: <input>:1:44: Syntax error: mismatched input '<EOF>'"
    ]
    assert result.stdout == ""
    non_bool = migdra("eval", f"{D}.placementStart + 1", "--slices", str(slices_file))
    assert non_bool.returncode == 2
    assert "must evaluate to bool or the unknown type, not int" in non_bool.stderr


def test_eval_json_and_driver_filter(slices_file: Path) -> None:
    result = migdra("eval", MIG_CLASS, "--slices", str(slices_file), "--driver", "gpu.nvidia.com", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["device"], r["driver"], r["outcome"]) for r in rows] == [("gpu-0", "gpu.nvidia.com", "no match")]
    assert rows[0]["clauses"][0] == {
        "clause": 1,
        "text": "device.driver == 'gpu.migdra.io'",
        "outcome": "no match",
        "error": None,
    }


def test_eval_needs_exactly_one_source(slices_file: Path) -> None:
    assert migdra("eval", MIG_CLASS).returncode == 2
    assert migdra("eval", MIG_CLASS, "--slices", str(slices_file), "--from-cluster").returncode == 2


def selectors(*expressions: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}} for expression in expressions]


def test_lint_reports_paths_and_suggestions_and_exits_one(tmp_path: Path) -> None:
    numa = "device.attributes['resource.kubernetes.io'].numaNode == 0"
    requests = [
        {"name": "a", "exactly": {"deviceClassName": "mig.migdra.io"}},
        {
            "name": "b",
            "exactly": {"deviceClassName": "mig.migdra.io", "selectors": selectors(f"{D}.profle == '1g.10gb'", numa)},
        },
    ]
    manifest = tmp_path / "manifests.yaml"
    manifest.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": "mig.example"},
                    "spec": {"selectors": selectors(f"{D}.type == 'mig'")},
                },
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "numa"},
                    "spec": {"spec": {"devices": {"requests": requests}}},
                },
            ]
        )
    )
    result = migdra("lint", str(manifest), "--classes", str(REPO / "deviceclasses"))
    assert result.returncode == 1
    out = result.stdout
    assert f"{manifest}: DeviceClass/mig.example: spec.selectors[0].cel.expression: error:" in out
    assert f"suggested: device.driver == 'gpu.migdra.io' && {D}.type == 'mig'" in out
    path = "spec.spec.devices.requests[1].exactly.selectors"
    assert f"ResourceClaimTemplate/numa: {path}[0].cel.expression: error:" in out
    assert "did you mean 'profile'" in out
    assert f"ResourceClaimTemplate/numa: {path}[1].cel.expression: error:" in out
    assert "'numaNode' in device.attributes['resource.kubernetes.io'] &&" in out
    assert out.splitlines()[-1] == "3 selectors in 2 objects: 3 errors, 0 warnings"


def test_lint_of_the_shipped_device_classes_is_clean() -> None:
    files = sorted(str(p) for p in (REPO / "deviceclasses").rglob("*.yaml"))
    result = migdra("lint", *files)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].endswith(": 0 errors, 0 warnings")


@pytest.fixture
def cluster(api_server: KubeApiServer, tmp_path: Path) -> Path:
    """A local API server holding the H100 slices and NVIDIA's slice; yields its kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    api_server.write_kubeconfig(kubeconfig)
    with api_server.api_client() as api_client:
        resource = client.ResourceV1Api(api_client)
        for body in [*example_slices(["H100-SXM5-80GB"], mig_enabled=True), foreign_slice()]:
            resource.create_resource_slice(body)
    return kubeconfig


def test_eval_from_cluster(cluster: Path) -> None:
    result = migdra("eval", f"{MIG_CLASS} && {D}.profile == '7g.80gb'", "--from-cluster", "--kubeconfig", str(cluster))
    assert result.returncode == 0, result.stderr
    lines = device_lines(result.stdout)
    assert len(lines["MATCH"]) == 1
    assert "gpu-0-mig-7g80gb" in lines["MATCH"][0]
    # the H100's 25 MIG devices (no shared ones by default) and NVIDIA's GPU
    assert result.stdout.splitlines()[-1] == "26 devices: 1 match, 25 do not match, 0 errors"
    only_nvidia = migdra(
        "eval", MIG_CLASS, "--from-cluster", "--kubeconfig", str(cluster), "--driver", "gpu.nvidia.com"
    )
    assert only_nvidia.stdout.splitlines()[-1] == "1 devices: 0 match, 1 do not match, 0 errors"
