"""An unchanged rescan is cheap: one LIST, no write, no slices rendered, and NVML asked only for what can
change (MIG mode, GPU instances) -- never again for the GPUs' identities or their profile tables.

Counted, never timed: the API requests through the client's transport, the NVML calls through
``Nvml(observe_call=...)``, the renders through the publisher's ``render_slices``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel.layout import render_slices
from dra_driver.kube.client import Client
from dra_driver.mig import load_catalog
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from kubeletplugin.publisher import InventoryReader, PublishLoop, PublishResult, SlicePublisher
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings
from tests.kube_apiserver import KubeApiServer
from tests.slice_watch import slice_watch

NODE = "node-i"
DRIVER = "gpu.migdra.io"
# What a GPU's identity and its profile tables cost to read: none of it may be asked again while
# nothing changes (the profile tables are Nvml's own per-MIG-mode cache; the identities the reader's).
STABLE_READS = (
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
)


class Requests:
    """Every request the publisher's API client sends, as (method, path without the query)."""

    def __init__(self, api_client: client.ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[str, str]] = []
        original = api_client.call_api

        def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            self.sent.append((method, url.split("?", 1)[0].removeprefix(str(api_client.configuration.host))))
            return original(method, url, *args, **kwargs)

        monkeypatch.setattr(api_client, "call_api", counting)


@pytest.fixture
def api(api_server: KubeApiServer) -> KubeApiServer:
    with api_server.api_client() as c:
        client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
    return api_server


@pytest.fixture
def nvml_calls() -> list[str]:
    return []


@pytest.fixture
def nvml(tmp_path: Path, nvml_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Nvml]:
    monkeypatch.delenv("MIGDRA_SIM_FAULTS", raising=False)
    settings = build_nvml_settings(
        nvml="simulated", sim_state=tmp_path / "nvml.json", sim_gpus="H100-SXM5-80GB:8", sim_mig_enabled=True
    )
    with open_nvml(settings, observe_call=lambda name, seconds, result: nvml_calls.append(name)) as session:
        yield session


def _loop(api: KubeApiServer, api_client: client.ApiClient, nvml: Nvml) -> PublishLoop:
    """The plugin's own publish round (publish-only: no prepare service), run with ``publish_now``."""
    publishing = Publishing(PluginSettings(node_name=NODE), CollectorRegistry(), threading.Event())
    reader = InventoryReader()
    return PublishLoop(
        SlicePublisher(Client(api_client=api_client), NODE, DRIVER),
        lambda: publishing.compute_pool(nvml, None, reader),
        interval=60,
    )


def test_an_unchanged_rescan_lists_once_writes_nothing_renders_nothing_and_rereads_only_what_can_change(
    api: KubeApiServer, nvml: Nvml, nvml_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    renders = Counter[str]()

    def counting_render(*args: Any, **kwargs: Any) -> Any:
        renders["render"] += 1
        return render_slices(*args, **kwargs)

    monkeypatch.setattr("kubeletplugin.publisher.render_slices", counting_render)
    with api.api_client() as api_client:
        loop = _loop(api, api_client, nvml)
        first = loop.publish_now()
        assert (first.created, first.generation) == (5, 1)  # 8 H100s: counters + 4 device slices of 50 devices

        requests = Requests(api_client, monkeypatch)
        nvml_calls.clear()
        renders.clear()
        with slice_watch(api) as slices:
            slices.recording = True
            for _ in range(3):
                assert loop.publish_now() == PublishResult(generation=1)
            slices.barrier()

    assert requests.sent == [("GET", "/apis/resource.k8s.io/v1/resourceslices")] * 3
    assert slices.writes == []  # as kube-apiserver saw it
    assert renders == Counter()  # the pool and every slice's resourceVersion were what it last wrote
    assert set(nvml_calls).isdisjoint(STABLE_READS), Counter(nvml_calls)
    assert Counter(nvml_calls)["nvmlDeviceGetMigMode"] > 0  # the mode is asked for each time: it can change


def test_a_rescan_sees_a_new_gpu_instance_and_a_mig_mode_change(api: KubeApiServer, nvml: Nvml) -> None:
    with api.api_client() as api_client:
        loop = _loop(api, api_client, nvml)
        loop.publish_now()
        three_g = load_catalog().model("H100").profile_by_name("3g.40gb")
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = 0, 4
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            pynvml.nvmlDeviceGetHandleByIndex(0), three_g.profile_id, pynvml.byref(placement)
        )
        assert loop.publish_now().generation == 2  # a foreign instance: its overlapping placements withheld
        gpu_7 = nvml.list_gpus()[7]
        nvml.set_mig_mode(gpu_7.uuid, enabled=False)
        result = loop.publish_now()
        names = {
            device["name"]
            for item in client.ResourceV1Api(api_client).list_resource_slice().items
            for device in api_client.sanitize_for_serialization(item)["spec"].get("devices", [])
        }
    assert result.generation == 3
    assert f"gpu-{gpu_7.minor_number}" in names
    assert not any(name.startswith(f"gpu-{gpu_7.minor_number}-mig-") for name in names)
    assert "gpu-0-mig-3g40gb-9-0" not in names


def test_the_reader_reads_what_a_full_read_reads(nvml: Nvml) -> None:
    reader = InventoryReader()
    assert reader.read(nvml) == read_inventory(nvml)
    nvml.set_mig_mode(nvml.list_gpus()[3].uuid, enabled=False)
    assert reader.read(nvml) == read_inventory(nvml)  # the second read keeps the listing, re-asks the mode


def test_a_mig_mode_change_makes_the_reader_list_the_gpus_again(nvml: Nvml, nvml_calls: list[str]) -> None:
    """Changing the mode may reset or re-bind a GPU and change its minor number (docs/nvml-mig.md, "MIG
    mode, resets and privileges")."""
    reader = InventoryReader()
    reader.read(nvml)
    nvml_calls.clear()
    reader.read(nvml)
    assert set(nvml_calls).isdisjoint(STABLE_READS), Counter(nvml_calls)  # unchanged: not listed again
    nvml.set_mig_mode(nvml.list_gpus()[5].uuid, enabled=False)
    nvml_calls.clear()
    inventory = reader.read(nvml)
    assert Counter(nvml_calls)["nvmlDeviceGetPciInfo"] == 8, Counter(nvml_calls)  # every GPU listed again
    assert inventory == read_inventory(nvml)
