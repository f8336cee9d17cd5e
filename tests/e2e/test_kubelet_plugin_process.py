"""The whole node plugin as a process: `migdra kubelet-plugin` against kube-apiserver and the
simulated NVML, driven by a test kubelet over the real unix sockets; then `kill -9` at every crash
point of a prepare, a restart, and prepare + unprepare again with nothing leaked or duplicated."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from dra_driver.mig import load_catalog
from dra_driver.nvml import sim
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import KubeletClient
from tests.plugin_command import DRIVER, NODE, kubelet_plugin_argv, kubelet_plugin_env
from tests.prepare_harness import create_claim, read_claim_json, result
from tests.waiting import wait_for

H100 = load_catalog().model("H100-SXM5-80GB")


@dataclass
class PluginProcess:
    api: KubeApiServer
    root: Path
    kubeconfig: Path
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "nvml.json"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / f"{DRIVER}-reg.sock"

    def start(
        self, env: dict[str, str] | None = None, args: tuple[str, ...] = (), *, verbose: bool = False
    ) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            kubelet_plugin_argv(self.root, self.kubeconfig, *args, verbose=verbose),
            env=kubelet_plugin_env(self.root, list((env or {}).items())),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.processes.append(process)

        def serving() -> bool:  # a killed process's stale socket may be there: it must answer
            if process.poll() is not None:
                raise AssertionError(f"the plugin exited:\n{process.communicate(timeout=5)[0]}")
            return self._answers()

        wait_for("the plugin to serve", serving, timeout=30)
        return process

    def _answers(self) -> bool:
        if not self.registration_socket.exists():
            return False
        try:
            with KubeletClient(self.registration_socket, timeout=2) as probe:
                probe.register()
        except grpc.RpcError:
            return False
        return True

    def kubelet(self) -> KubeletClient:
        kubelet = KubeletClient(self.registration_socket)
        kubelet.register()
        return kubelet

    def instances(self) -> list[tuple[int, int, str, int]]:
        """(GPU index, GI ID, placement, CI count) of every instance on the simulated node."""
        return sorted(
            (gpu.index, gi.gpu_instance_id, f"{gi.placement.start}:{gi.placement.size}", len(gi.compute_instances))
            for gpu in sim.snapshot(self.state).gpus
            for gi in gpu.gpu_instances
        )


def _api(plugin: PluginProcess) -> client.ApiClient:
    return plugin.api.api_client()


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return output


def test_register_prepare_and_unprepare_on_v1_and_v1beta1(plugin: PluginProcess) -> None:
    process = plugin.start()
    with _api(plugin) as api_client:
        claim = create_claim(api_client, "three-g", [result("gpu-0-mig-3g40gb-9-4")])
        old_kubelet_claim = create_claim(api_client, "one-g", [result("gpu-1-mig-1g20gb-15-6")])
        with plugin.kubelet() as kubelet:
            assert kubelet.info.type == "DRAPlugin"
            assert kubelet.info.name == DRIVER
            assert list(kubelet.info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
            assert kubelet.version == "v1.DRAPlugin"
            prepared = kubelet.prepare([claim])[claim.uid]
        with KubeletClient(plugin.registration_socket, versions=["v1beta1.DRAPlugin"]) as old_kubelet:
            assert old_kubelet.register() == "v1beta1.DRAPlugin"
            old = old_kubelet.prepare([old_kubelet_claim])[old_kubelet_claim.uid]
        assert prepared.error == ""
        assert old.error == ""
        assert [d.device_name for d in prepared.devices] == ["gpu-0-mig-3g40gb-9-4"]
        assert prepared.devices[0].cdi_device_ids == (f"{DRIVER}/claim={claim.uid}-gpu-0-mig-3g40gb-9-4",)
        assert plugin.instances() == [(0, 2, "4:4", 1), (1, 6, "6:2", 1)]

        # the plugin writes the claim's status after the call returns (its reporter's queue)
        status = wait_for(
            "the claim's device status", lambda: read_claim_json(api_client, claim)["status"].get("devices")
        )
        assert status[0]["device"] == "gpu-0-mig-3g40gb-9-4"
        assert status[0]["data"]["placement"] == {"start": 4, "size": 4}
        assert status[0]["data"]["migUUID"].startswith("MIG-")
        assert status[0]["conditions"][0]["type"] == "Ready"

        with plugin.kubelet() as kubelet:
            unprepared = kubelet.unprepare([claim, old_kubelet_claim])
        assert {uid: r.error for uid, r in unprepared.items()} == {claim.uid: "", old_kubelet_claim.uid: ""}
        assert plugin.instances() == []

        # our instances are published as usual while they exist; all placements again afterwards
        def published() -> int:
            slices = client.ResourceV1Api(api_client).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
            return sum(len(s.spec.devices or []) for s in slices)

        wait_for("every placement to be published again", lambda: published() == 2 * 25)  # every placement
    output = _stop(process)
    assert not plugin.registration_socket.exists()
    assert "Traceback" not in output


CRASH_POINTS = {
    "after GI creation": {
        "MIGDRA_SIM_FAULTS": json.dumps(
            {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "action": "kill_after"}]}
        )
    },
    "after CI creation": {
        "MIGDRA_SIM_FAULTS": json.dumps(
            {"rules": [{"symbol": "nvmlGpuInstanceCreateComputeInstance", "action": "kill_after"}]}
        )
    },
    "after the checkpoint write": {"MIGDRA_TEST_CRASH_AT": "after-checkpoint-completed"},
    "after the CDI write": {"MIGDRA_TEST_CRASH_AT": "after-cdi"},
}


@pytest.mark.parametrize("crash", sorted(CRASH_POINTS))
def test_kill_9_during_prepare_then_restart_leaks_nothing(plugin: PluginProcess, crash: str) -> None:
    # An administrator's instance exists before migdra starts: it must survive everything below.
    sim.install(plugin.state, gpus=["H100-SXM5-80GB"] * 2, mig_enabled=True, faults=sim.FaultPlan())
    try:
        import pynvml

        pynvml.nvmlInit()
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = 0, 1
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, H100.profile_by_name("1g.10gb").profile_id, pynvml.byref(placement)
        )
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    foreign = (1, 7, "0:1", 0)

    doomed = plugin.start(CRASH_POINTS[crash])
    with _api(plugin) as api_client:
        claim = create_claim(api_client, "crashy", [result("gpu-0-mig-2g20gb-14-2")])
        with plugin.kubelet() as kubelet, pytest.raises(Exception):  # noqa: B017,PT011 -- the call dies with the process
            kubelet.prepare([claim])
        doomed.wait(timeout=30)
        assert doomed.returncode == -signal.SIGKILL
        assert foreign in plugin.instances()

        survivor = plugin.start()
        with plugin.kubelet() as kubelet:
            prepared = kubelet.prepare([claim])[claim.uid]
            assert prepared.error == ""
            again = kubelet.prepare([claim])[claim.uid]
            assert again == prepared
            assert sorted(plugin.instances()) == sorted([(0, 4, "2:2", 1), foreign])  # exactly one, no duplicate
            assert kubelet.unprepare([claim])[claim.uid].error == ""
        assert plugin.instances() == [foreign]
        assert not list((plugin.root / "cdi").glob("*"))
    _stop(survivor)


def test_health_stream_is_served_by_default_and_reports_every_published_device(plugin: PluginProcess) -> None:
    """Kubelets from 1.34 open the stream of every plugin that offers it, and log an error for one that
    does not: served unless ``--no-health``."""
    process = plugin.start()
    with plugin.kubelet() as kubelet:
        assert "v1alpha1.DRAResourceHealth" in list(kubelet.info.supported_versions)
        deadline = time.monotonic() + 20
        devices: list[Any] = []
        for devices in kubelet.watch_health(timeout=20):
            if devices or time.monotonic() > deadline:
                break
    assert len(devices) == 2 * 25  # two H100s: every exclusive placement (no shared devices unless enabled)
    assert {d.health for d in devices} == {"HEALTHY"}
    assert {d.pool_name for d in devices} == {NODE}
    _stop(process)
