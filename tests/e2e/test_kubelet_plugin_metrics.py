"""The plugin's observability, from one real plugin process: its ``/metrics`` endpoint scraped and parsed,
its gRPC liveness check asked, its JSON log read.

Prepares and unprepares through a kubelet peer on the real sockets (one claim fails: its placement is
taken), then reads the exposition with prometheus_client's own parser: claims by operation and result,
their latency, NVML call latency by function, checkpoint writes, the claim status queue, the
registration, publish rounds, and ``migdra_mig_instance_info`` -- while the claim is prepared it names
exactly the instance the simulated hardware holds and the claim's status reports; after unprepare it is
gone.  With ``MIGDRA_LOG_FORMAT=json`` every line the process writes is a JSON object, and the lines
about a claim carry its UID.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dra_driver.kubelet.calls import ClaimRef
from dra_driver.nvml import sim
from migdra_devcluster.ports import free_port
from tests.e2e.test_kubelet_plugin_process import PluginProcess, _stop
from tests.plugin_command import NODE
from tests.prepare_harness import create_claim, read_claim_json, result
from tests.waiting import wait_for


def _scrape(port: int) -> dict[str, list[Sample]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def _health(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return int(response.status)


def _ready_entry(api_client: client.ApiClient, claim: ClaimRef, timeout: float = 30) -> dict[str, Any]:
    """The claim's status.devices[0] once the plugin's (asynchronous) status write says Ready."""

    def ready() -> dict[str, Any] | None:
        entries = (read_claim_json(api_client, claim).get("status") or {}).get("devices") or []
        if entries and any(c["type"] == "Ready" and c["status"] == "True" for c in entries[0].get("conditions", [])):
            return dict(entries[0])
        return None

    return wait_for(f"a Ready status for {claim.name}", ready, timeout=timeout)


def _assert_instance_info(
    families: dict[str, list[Sample]], plugin: PluginProcess, claim: ClaimRef, entry: Any
) -> None:
    """The one info series names the instance the simulated hardware holds and the claim's status reports."""
    (gpu,) = (g for g in sim.snapshot(plugin.state).gpus if g.gpu_instances)
    (gi,) = gpu.gpu_instances
    (ci,) = gi.compute_instances
    (info,) = families["migdra_mig_instance_info"]
    assert info.value == 1
    assert info.labels == {
        "node": NODE,
        "gpu_uuid": gpu.uuid,
        "mig_uuid": ci.uuid,
        "profile": "3g.40gb",
        "gpu_instance_id": str(gi.gpu_instance_id),
        "compute_instance_id": str(ci.compute_instance_id),
        "placement_start": str(gi.placement.start),
        "placement_size": str(gi.placement.size),
        "namespace": claim.namespace,
        "claim": claim.name,
        "claim_uid": claim.uid,
        "share_id": "",  # an exclusive device: a GI of one claim
        "compute_slices": "",
    }
    data = entry["data"]
    assert (data["migUUID"], data["gpuUUID"]) == (ci.uuid, gpu.uuid)
    assert (data["gpuInstanceID"], data["computeInstanceID"]) == (gi.gpu_instance_id, ci.compute_instance_id)
    assert data["placement"] == {"start": gi.placement.start, "size": gi.placement.size} == {"start": 0, "size": 4}


def test_metrics_liveness_and_json_logs_of_a_real_run(plugin: PluginProcess) -> None:
    port, health_port = free_port(), free_port()
    process = plugin.start(
        env={"MIGDRA_LOG_FORMAT": "json"},
        args=("--metrics-address", f"127.0.0.1:{port}", "--healthcheck-address", f"127.0.0.1:{health_port}"),
        verbose=True,  # the prepare lines are INFO
    )
    with plugin.api.api_client() as api_client:
        first = create_claim(api_client, "first", [result("gpu-0-mig-3g40gb-9-0")])
        overlapping = create_claim(api_client, "overlapping", [result("gpu-0-mig-4g40gb-5-0")])
        with plugin.kubelet() as kubelet:
            assert _health(health_port) == health_pb2.HealthCheckResponse.SERVING
            assert kubelet.prepare([first])[first.uid].error == ""
            _assert_instance_info(_scrape(port), plugin, first, _ready_entry(api_client, first))
            assert "occupied" in kubelet.prepare([overlapping])[overlapping.uid].error
            assert kubelet.unprepare([first])[first.uid].error == ""

    families = _scrape(port)
    assert families.get("migdra_mig_instance_info", []) == []  # unprepared: no series left behind
    assert _value(families["migdra_kubelet_registered"], "migdra_kubelet_registered") == 1
    assert _value(families["migdra_publish_rounds"], "migdra_publish_rounds_total", result="success") >= 1
    claims = families["migdra_claims"]
    assert _value(claims, "migdra_claims_total", operation="prepare", result="success") == 1
    assert _value(claims, "migdra_claims_total", operation="prepare", result="error") == 1
    assert _value(claims, "migdra_claims_total", operation="unprepare", result="success") == 1
    durations = families["migdra_claim_duration_seconds"]
    assert _value(durations, "migdra_claim_duration_seconds_count", operation="prepare", result="success") == 1
    assert _value(durations, "migdra_claim_duration_seconds_sum", operation="prepare", result="success") > 0

    nvml = families["migdra_nvml_call_duration_seconds"]
    create = "nvmlDeviceCreateGpuInstanceWithPlacement"
    assert _value(nvml, "migdra_nvml_call_duration_seconds_count", function=create, result="success") == 1
    destroyed = _value(nvml, "migdra_nvml_call_duration_seconds_count", function="nvmlGpuInstanceDestroy")
    assert destroyed == 1

    writes = families["migdra_checkpoint_write_duration_seconds"]
    # begin, the GI request, the GI ID, completion; then release: releasing, the GI alone, dropped
    assert _value(writes, "migdra_checkpoint_write_duration_seconds_count") >= 4
    assert "migdra_claim_status_backlog" in families
    assert "migdra_claim_status_failures" in families
    output = _stop(process)
    assert "Traceback" not in output
    lines = [json.loads(line) for line in output.splitlines()]  # every line is one JSON object
    assert all(line["node"] == NODE for line in lines if line["logger"] != "migdra")
    prepared = [line for line in lines if line["message"].startswith("prepared claim")]
    assert prepared
    assert all(line["claim_uid"] == first.uid for line in prepared), prepared
    (created,) = [line for line in lines if line["message"].startswith("created GI")]
    assert (created["claim_uid"], created["claim"]) == (first.uid, f"{first.namespace}/{first.name}")
    assert created["gpu_uuid"].startswith("GPU-")
    refused = [line for line in lines if line["message"].startswith("prepare failed")]
    assert refused
    assert all(line["claim_uid"] == overlapping.uid for line in refused), refused
    assert any(line["message"].startswith("migdra kubelet-plugin: serving node") for line in lines)
    assert not any("claim_uid" in line for line in lines if line["message"].startswith("publishing ResourceSlices"))
