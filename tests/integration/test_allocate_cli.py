"""``migdra allocate`` as an admin runs it: the console script in a subprocess, on files and on a cluster.

The allocation it prints must be exactly what :func:`dra_driver.tools.allocation.allocate` returns, and when
nothing fits the explanation must name the check that excluded the devices (taken by which claim,
which counter ran out, which selector), since that is what the command is for.
"""

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
from dra_driver.tools.allocation import DEFAULT_FEATURES, allocate
from tests.kube_apiserver import KubeApiServer
from tests.sim_objects import claim_view

MIGDRA = str(Path(sys.executable).with_name("migdra"))
REPO = Path(__file__).resolve().parents[2]
PROFILE = "device.attributes['gpu.migdra.io'].profile"
NODE = "node-a"


def migdra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MIGDRA, "allocate", *args], capture_output=True, text=True, check=False, timeout=120)


def node_slices() -> list[dict[str, Any]]:
    """Two H100s with MIG on, published as node-a's pool."""
    return example_slices(["H100-SXM5-80GB", "H100-SXM5-80GB"], mig_enabled=True, node_name=NODE)


def classes() -> list[dict[str, Any]]:
    found = []
    for path in sorted((REPO / "deviceclasses").glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "DeviceClass"]
    return found


def claim(name: str, profile: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "mig.migdra.io",
                            "count": count,
                            "selectors": [{"cel": {"expression": f"{PROFILE} == '{profile}'"}}],
                        },
                    }
                ]
            }
        },
    }
    body.update(extra)
    return body


def allocated(name: str, devices: list[str]) -> dict[str, Any]:
    body = claim(name, "7g.80gb", count=len(devices))
    results = [{"request": "gpu", "driver": "gpu.migdra.io", "pool": NODE, "device": d} for d in devices]
    body["status"] = {"allocation": {"devices": {"results": results}}}
    return body


def write(path: Path, objects: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    return {
        "slices": write(tmp_path / "slices.yaml", node_slices()),
        "classes": str(REPO / "deviceclasses"),
    }


def run_files(files: dict[str, str], claims_path: str, *more: str) -> subprocess.CompletedProcess[str]:
    return migdra(
        "--slices", files["slices"], "--classes", files["classes"], "--claims", claims_path, "--node", NODE, *more
    )


def test_prints_exactly_what_the_allocator_returns(files: dict[str, str], tmp_path: Path) -> None:
    pending = claim("train", "3g.40gb", count=2)
    claims_path = write(tmp_path / "claims.yaml", [pending])
    result = run_files(files, claims_path, "-o", "json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    expected = allocate(
        [claim_view(pending)], {"metadata": {"name": NODE}}, node_slices(), classes(), [], DEFAULT_FEATURES
    )
    assert expected is not None
    assert printed == {
        "allocated": True,
        "node": NODE,
        "claims": [{"claim": "default/train", "allocation": expected[0]}],
    }
    text = run_files(files, claims_path)
    assert text.returncode == 0, text.stderr
    devices = [r["device"] for r in expected[0]["devices"]["results"]]
    assert text.stdout.splitlines()[0] == f"allocated on node {NODE}:"
    assert all(f"gpu: gpu.migdra.io/{NODE}/{device}" in text.stdout for device in devices)


def test_claims_with_an_allocation_hold_their_devices(files: dict[str, str], tmp_path: Path) -> None:
    other = allocated("other", ["gpu-0-mig-7g80gb-0-0"])
    pending = claim("train", "7g.80gb")
    result = run_files(files, write(tmp_path / "claims.yaml", [other, pending]), "-o", "json")
    assert result.returncode == 0, result.stderr
    (entry,) = json.loads(result.stdout)["claims"]
    assert entry["claim"] == "default/train"
    assert [r["device"] for r in entry["allocation"]["devices"]["results"]] == ["gpu-1-mig-7g80gb-0-0"]


def test_explains_devices_taken_by_other_claims(files: dict[str, str], tmp_path: Path) -> None:
    other = allocated("other", ["gpu-0-mig-7g80gb-0-0", "gpu-1-mig-7g80gb-0-0"])
    result = run_files(files, write(tmp_path / "claims.yaml", [other, claim("train", "7g.80gb")]))
    assert result.returncode == 3, result.stderr
    out = result.stdout
    assert f"cannot allocate on node {NODE}:" in out
    assert "claim default/train, request gpu (class mig.migdra.io, 1 device(s)): 0 eligible, NOT satisfiable" in out
    assert "2 excluded: in use" in out
    assert f"gpu.migdra.io/{NODE}/gpu-0-mig-7g80gb-0-0: in use: allocated to claim default/other" in out


def test_explains_which_counter_ran_out(files: dict[str, str], tmp_path: Path) -> None:
    other = allocated("other", ["gpu-0-mig-7g80gb-0-0", "gpu-1-mig-7g80gb-0-0"])
    result = run_files(files, write(tmp_path / "claims.yaml", [other, claim("small", "1g.10gb")]), "-o", "yaml")
    assert result.returncode == 3, result.stderr
    document = yaml.safe_load(result.stdout)
    assert document["allocated"] is False
    (report,) = document["explanation"]["requests"]
    assert report["eligible"] == []
    assert report["satisfiableAlone"] is False
    assert report["excluded"]["counters"] == 14  # seven 1g.10gb placements on each of the two full GPUs
    reason = report["closest"][0]["reason"]
    assert reason.startswith("counters: gpu-0-counter-set/memory-slice-")
    assert "needs 1, 0 left" in reason


def test_explains_a_counter_set_that_allocated_claims_over_consume(files: dict[str, str], tmp_path: Path) -> None:
    """Overlapping claims allocated by hand leave GPU 0's counters over-consumed: nothing that consumes
    the pool's counters fits, so a one-request claim is NOT satisfiable alone (never "fit alone, not
    together"), and the pool's line names the counter set, its slice, the counters and the claims."""
    held = [allocated("whole", ["gpu-0-mig-7g80gb-0-0"]), allocated("small", ["gpu-0-mig-1g10gb-19-0"])]
    claims_path = write(tmp_path / "claims.yaml", [*held, claim("one", "1g.10gb")])
    result = run_files(files, claims_path)
    assert result.returncode == 3, result.stderr
    out = result.stdout
    assert (
        f"  pool gpu.migdra.io/{NODE}: counter set gpu-0-counter-set (ResourceSlice {NODE}-gpu.migdra.io-counters-0)"
        " is over-consumed by allocated claims default/small, default/whole: memory-slice-0 2 consumed, 1 available;"
    ) in out, out
    assert "claim default/one, request gpu (class mig.migdra.io, 1 device(s)): 0 eligible, NOT satisfiable" in out
    assert "together:" not in out
    assert f"gpu.migdra.io/{NODE}/gpu-0-mig-1g10gb-19-6: counters: pool gpu.migdra.io/{NODE} is over-consumed" in out
    document = yaml.safe_load(run_files(files, claims_path, "-o", "yaml").stdout)
    assert document["explanation"]["together"] is None
    (problem,) = document["explanation"]["pools"]
    assert "counter set gpu-0-counter-set" in problem


def test_explains_requests_that_fit_alone_but_not_together(files: dict[str, str], tmp_path: Path) -> None:
    pending = claim("pair", "7g.80gb")
    pending["spec"]["devices"]["requests"].append({**pending["spec"]["devices"]["requests"][0], "name": "second"})
    pending["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.migdra.io/parentUUID"}]
    result = run_files(files, write(tmp_path / "claims.yaml", [pending]))
    assert result.returncode == 3, result.stderr
    assert "request gpu (class mig.migdra.io, 1 device(s)): 2 eligible, enough devices on their own" in result.stdout
    assert "together: each request has enough devices on its own" in result.stdout
    assert "matchAttribute gpu.migdra.io/parentUUID" in result.stdout


def test_an_aborted_attempt_is_one_error_line(files: dict[str, str], tmp_path: Path) -> None:
    broken = claim("broken", "1g.10gb")
    broken["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.migdra.io'].noSuchAttribute == 1"}}
    ]
    result = run_files(files, write(tmp_path / "claims.yaml", [broken]))
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "migdra: error: allocation attempt aborted (as kube-scheduler would abort it): claim default/broken"
    )
    assert "CEL runtime error" in line


def test_feature_gates_change_the_answer(files: dict[str, str], tmp_path: Path) -> None:
    """Without DRAPartitionableDevices the counter slices are dropped and MIG devices cannot be allocated."""
    claims_path = write(tmp_path / "claims.yaml", [claim("small", "1g.10gb")])
    assert run_files(files, claims_path).returncode == 0
    off = run_files(files, claims_path, "--feature-gates", "DRAPartitionableDevices=false")
    assert off.returncode == 3, off.stderr
    assert "consumes counters but DRAPartitionableDevices is off" in off.stdout


@pytest.fixture
def cluster(api_server: KubeApiServer, tmp_path: Path) -> Path:
    """A local API server with node-a, its slices, the DeviceClasses, an allocated claim and a pending pod."""
    kubeconfig = tmp_path / "kubeconfig"
    api_server.write_kubeconfig(kubeconfig)
    with api_server.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        resource = client.ResourceV1Api(api_client)
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        for body in node_slices():
            resource.create_resource_slice(body)
        for body in classes():
            resource.create_device_class(body)
        taken = allocated("other", ["gpu-0-mig-7g80gb-0-0"])
        status = taken.pop("status")
        resource.create_namespaced_resource_claim("default", taken)
        resource.patch_namespaced_resource_claim_status("other", "default", {"status": status})
        resource.create_namespaced_resource_claim("default", claim("train", "7g.80gb"))
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer"},
                "spec": {
                    "containers": [{"name": "main", "image": "busybox"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "train"}],
                },
            },
        )
    return kubeconfig


def test_from_cluster_allocates_a_pods_claims_around_allocated_ones(cluster: Path) -> None:
    args = ["--from-cluster", "--kubeconfig", str(cluster), "--node", NODE]
    result = migdra(*args, "--pod", "default/trainer", "-o", "json")
    assert result.returncode == 0, result.stderr
    (entry,) = json.loads(result.stdout)["claims"]
    assert entry["claim"] == "default/train"
    assert [r["device"] for r in entry["allocation"]["devices"]["results"]] == ["gpu-1-mig-7g80gb-0-0"]
    missing = migdra(*args, "--claim", "default/nope")
    assert missing.returncode == 2
    assert "ResourceClaim default/nope not found in the cluster" in missing.stderr
    no_node = migdra("--from-cluster", "--kubeconfig", str(cluster), "--node", "node-z", "--claim", "default/train")
    assert no_node.returncode == 1
    assert "node node-z (--node)" in no_node.stderr


def test_from_cluster_without_a_node_answers_for_every_node(cluster: Path) -> None:
    """The reason per node that a FailedScheduling of the real kube-scheduler does not give."""
    args = ["--from-cluster", "--kubeconfig", str(cluster), "--pod", "default/trainer"]
    fits = migdra(*args, "-o", "json")
    assert fits.returncode == 0, fits.stderr
    (answer,) = json.loads(fits.stdout)["nodes"]  # the cluster has one node
    assert (answer["node"], answer["allocated"]) == (NODE, True)
    text = migdra(*args)
    assert text.stdout.startswith(f"allocated on node {NODE}:")
    files_without_node = migdra("--slices", str(cluster), "--classes", str(cluster), "--claims", str(cluster))
    assert files_without_node.returncode == 2
    assert "give --node" in files_without_node.stderr
