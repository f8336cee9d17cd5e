"""The plugin's prepare metrics, scraped from its real ``/metrics`` endpoint during a real run and parsed.

Prepares and unprepares through a kubelet peer on the real sockets (one claim fails: its placement is
taken), then reads the exposition with prometheus_client's own parser: claims by operation and result,
their latency, NVML call latency by function, checkpoint writes, and the claim status queue.
"""

from __future__ import annotations

import socket
import urllib.request
from contextlib import closing

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.e2e.test_kubelet_plugin_process import PluginProcess, _stop
from tests.prepare_harness import create_claim, result

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> dict[str, list[Sample]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def test_prepare_metrics_are_served_and_parse(plugin: PluginProcess) -> None:
    port = _free_port()
    process = plugin.start(args=("--metrics-address", f"127.0.0.1:{port}"))
    with client.ApiClient(client.Configuration(host=plugin.api.url)) as api_client:
        first = create_claim(api_client, "first", [result("gpu-0-mig-3g40gb-9-0")])
        overlapping = create_claim(api_client, "overlapping", [result("gpu-0-mig-4g40gb-5-0")])
        with plugin.kubelet() as kubelet:
            assert kubelet.prepare([first])[first.uid].error == ""
            assert "occupied" in kubelet.prepare([overlapping])[overlapping.uid].error
            assert kubelet.unprepare([first])[first.uid].error == ""

    families = _scrape(port)
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
    assert "Traceback" not in _stop(process)
