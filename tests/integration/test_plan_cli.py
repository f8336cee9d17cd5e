"""``migdra plan`` and ``migdra bench placement`` as a user runs them: the console script in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MIGDRA = str(Path(sys.executable).with_name("migdra"))

WORKLOAD = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-g, namespace: default}
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig.migdra.io
        selectors:
        - cel: {expression: "device.attributes['gpu.migdra.io'].profile == '1g.10gb'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-g, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.migdra.io
          selectors:
          - cel: {expression: "device.attributes['gpu.migdra.io'].profile == '4g.40gb'"}
"""


def migdra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MIGDRA, *args], capture_output=True, text=True, check=False, timeout=300)


def test_plan_three_1g_then_a_4g_on_one_h100(tmp_path: Path) -> None:
    """Known answer: three 1g.10gb and a 4g.40gb fit one H100 only if the 1g stay off slices 0-3."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(WORKLOAD)
    common = ["plan", "--nodes", "H100-SXM5-80GB=1", "--workload", str(workload), "--count", "one-g=3", "-o", "json"]

    fits = migdra(*common, "--policy", "dynamic")
    assert fits.returncode == 0, fits.stderr
    answer = json.loads(fits.stdout)
    assert answer["fits"] is True
    assert answer["firstFailure"] is None
    assert answer["claims"] == {
        "one-g": {"requested": 3, "placed": 3, "oraclePlaced": 3},
        "four-g": {"requested": 1, "placed": 1, "oraclePlaced": 1},
    }
    (gpu,) = answer["occupancy"][0]["gpus"]
    assert gpu["freeMemorySlices"] == 1
    assert [s["state"] for s in gpu["slices"]].count("claim") == 7

    scattered = migdra(*common, "--policy", "name-order")
    assert scattered.returncode == 3, scattered.stderr
    answer = json.loads(scattered.stdout)
    assert answer["fits"] is False
    assert answer["claims"]["four-g"] == {"requested": 1, "placed": 0, "oraclePlaced": 1}
    failure = answer["firstFailure"]
    assert (failure["claim"], failure["copy"], failure["verdict"]) == ("four-g", 1, "fragmentation")
    assert "counters" in failure["explanation"]["requests"][0]["excluded"]

    (gpu,) = answer["occupancy"][0]["gpus"]
    assert [s["state"] for s in gpu["slices"]] == ["claim"] * 3 + ["free"] * 5  # the scatter over the 4g range

    capacity = migdra(*common[:-2], "--count", "four-g=2")  # the table, with the default policy (dynamic)
    assert capacity.returncode == 3
    assert "first that does not fit: four-g #2 (capacity: no packing of these instances fits it)" in capacity.stdout
    assert "node-1     gpu-0    [A A A A B C D .]  1/8 free" in capacity.stdout


def test_bench_placement_smoke_run_reports_every_run() -> None:
    """A short run of the whole benchmark through the console script, so the harness cannot rot."""
    done = migdra(
        "bench", "placement", "--seeds", "2", "--arrivals", "30", "--workload", "uniform@1x8-H100",
        "--workload", "fill-uniform@1x8-H100", "--policy", "dynamic", "--policy", "static", "--jobs", "1",
        "-o", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["params"]["seeds"] == 2
    for workload in ("uniform@1x8-H100", "fill-uniform@1x8-H100"):
        runs = report["workloads"][workload]
        assert set(runs) == {"oracle", "dynamic", "static", "dynamic@1.35", "static@1.35"}
        for label, run in runs.items():
            assert run["seeds"] == 2
            low, high = run["ci95"]
            assert 0.0 <= low <= run["acceptance"] <= high <= 1.0
            if label != "oracle":
                assert run["of_oracle"] > 0
    fill = report["workloads"]["fill-uniform@1x8-H100"]
    assert all(fill[label]["utilisation"] <= fill["oracle"]["utilisation"] for label in fill)
    poisson = report["workloads"]["uniform@1x8-H100"]
    assert poisson["static"]["writes_per_allocation"] == 0  # blind to occupancy: never re-publishes
    assert poisson["dynamic"]["writes_per_allocation"] > 0


def test_plan_with_arrival_rates(tmp_path: Path) -> None:
    """A trickle always fits (known answer: every arrival placed); a flood of 4g on one H100 cannot
    (one 4g.40gb per GPU), with or without repacking."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(WORKLOAD)
    common = ["plan", "--nodes", "H100-SXM5-80GB=1", "--workload", str(workload), "--seeds", "2", "--arrivals", "60"]
    trickle = migdra(*common, "--rate", "one-g=0.05")
    assert trickle.returncode == 0, trickle.stderr
    assert "one-g  rate 0.05: 100.0 % (100.0-100.0)   with repacking: 100.0 % (100.0-100.0)" in trickle.stdout
    assert "four-g" not in trickle.stdout

    flood = migdra(*common, "--rate", "four-g=20", "--rate", "one-g=1", "-o", "json")
    assert flood.returncode == 0, flood.stderr
    answer = json.loads(flood.stdout)
    four = answer["claims"]["four-g"]
    assert four["acceptance"]["mean"] < 0.5
    assert four["oracleAcceptance"]["mean"] < 0.5
    assert 0.0 <= answer["acceptance"]["mean"] <= 1.0


SHARES = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: slice, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: share
        exactly:
          deviceClassName: mig-shared.migdra.io
          selectors:
          - cel: {expression: "device.attributes['gpu.migdra.io'].computeSlices == 7"}
          capacity:
            requests: {computeSlices: "1"}
"""


def test_plan_seven_one_slice_shares_of_an_h100(tmp_path: Path) -> None:
    """Known answer: a 7g.80gb holds seven one-slice compute instances; the 8th share has no compute
    slice left (capacity), and the answer lists the shares of the one shared device."""
    workload = tmp_path / "shares.yaml"
    workload.write_text(SHARES)
    done = migdra(
        "plan",
        "--nodes",
        "H100-SXM5-80GB=1",
        "--shared-devices",
        "--workload",
        str(workload),
        "--count",
        "slice=8",
        "-o",
        "json",
    )
    assert done.returncode == 3, done.stderr
    answer = json.loads(done.stdout)
    assert answer["claims"] == {"slice": {"requested": 8, "placed": 7, "oraclePlaced": None}}
    failure = answer["firstFailure"]
    assert (failure["claim"], failure["copy"], failure["verdict"]) == ("slice", 8, "unknown")
    assert "capacity" in failure["explanation"]["requests"][0]["excluded"]
    (device,) = answer["sharedDevices"]
    assert (device["device"], device["computeSlices"], device["usedComputeSlices"]) == ("gpu-0-shared-7g80gb-0-0", 7, 7)
    assert [share["computeSlices"] for share in device["shares"]] == [1] * 7


def test_plan_refuses_shares_on_nodes_without_shared_devices_in_one_line(tmp_path: Path) -> None:
    """Shared devices are published only with sharedDevices: true: planning shares without saying so
    names the claim and the flag, instead of answering that nothing fits."""
    workload = tmp_path / "shares.yaml"
    workload.write_text(SHARES)
    done = migdra("plan", "--nodes", "H100-SXM5-80GB=1", "--workload", str(workload), "--count", "slice=8")
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "claim slice" in lines[0]
    assert "mig-shared.migdra.io" in lines[0]
    assert "--shared-devices" in lines[0]


def test_the_demo_files_with_their_pods_are_a_workload() -> None:
    """demo/ keeps each template beside the Pod that uses it: plan reads the Pods' claims instead of
    refusing the file."""
    demo = Path(__file__).resolve().parents[2] / "demo"
    result = migdra(
        "plan",
        "--nodes",
        "H100-SXM5-80GB=1",
        "--workload",
        str(demo / "01-mig-1g.yaml"),
        "--workload",
        str(demo / "02-mig-3g.yaml"),
    )
    assert result.returncode == 0, result.stderr
    assert "mig-1g       1 of 1      placed" in result.stdout
    assert "mig-3g       1 of 1      placed" in result.stdout
