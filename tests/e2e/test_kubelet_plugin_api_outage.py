"""The node plugin as a process through an API server outage: it keeps running and unpreparing from its
checkpoint, and once the API server is back its slices and its claims' status converge to the truth.

The outage lasts for more failed attempts than the plugin used to allow before it gave up (10 publish
rounds, then exit 1; 8 status writes, then the claim kept ``Ready=True`` for an instance that was
gone); the backoff is made short through the plugin's settings so that takes a second, not minutes.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest
from kubernetes import client

from dra_driver.kubelet.calls import ClaimRef
from dra_driver.mig import load_catalog
from dra_driver.nvml import sim
from tests.api_outage import OutputLines, RestartableApiServer, restartable_api_server
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import DRIVER, NODE, kubelet_plugin_argv, kubelet_plugin_env
from tests.prepare_harness import create_claim, read_claim_json, result
from tests.waiting import wait_for

H100 = load_catalog().model("H100-SXM5-80GB")
# Retries every 20-100 ms instead of 0.5-30 s: an outage of more than the old 10 publish rounds and
# 8 status writes then takes about a second.
FAST_RETRIES = {"MIGDRA_API_BACKOFF_INITIAL": "0.02", "MIGDRA_API_BACKOFF_MAX": "0.1"}
# Bounds for waits on the plugin's output: the plugin gets there in seconds; a plugin that gives up
# (or exits) never does, and the bound only keeps such a failure from hanging the suite.
OUTAGE_WAIT = 90.0


def _publish_failure(count: int) -> Any:
    return lambda line: f"publishing ResourceSlices failed ({count} in a row)" in line


def _status_write_failure(claim: ClaimRef) -> Any:
    return lambda line: f"writing status of {claim.namespace}/{claim.name}" in line and "failed" in line


def _report_write_failure(line: str) -> bool:
    """A failed write of the claim reporter (a status or an Event, of any claim): it retries its reports in
    order, so which claim's comes first depends on what was still unwritten when the API server went."""
    return "kubeletplugin.prepare.reporter: writing " in line and " failed: " in line


@dataclass
class Plugin:
    api: RestartableApiServer
    root: Path
    processes: list[tuple[subprocess.Popen[str], OutputLines]] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.root / "nvml.json"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / f"{DRIVER}-reg.sock"

    def start(self, env: dict[str, str]) -> tuple[subprocess.Popen[str], OutputLines]:
        process = subprocess.Popen(
            kubelet_plugin_argv(self.root, self.root / "kubeconfig", "--rescan-interval", "0.5"),
            env=kubelet_plugin_env(self.root, [*FAST_RETRIES.items(), *env.items()]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        output = OutputLines(process.stdout)
        self.processes.append((process, output))
        # The one line the plugin prints once it has published and serves kubelet.
        output.wait_for_line("the plugin serves", lambda line: line.startswith("migdra kubelet-plugin: serving node"))
        return process, output

    def kubelet(self) -> KubeletClient:
        kubelet = KubeletClient(self.registration_socket)
        kubelet.register()
        return kubelet

    def instances(self) -> list[tuple[int, str]]:
        """(GPU index, placement) of every GPU instance on the simulated node."""
        return sorted(
            (gpu.index, f"{gi.placement.start}:{gi.placement.size}")
            for gpu in sim.snapshot(self.state).gpus
            for gi in gpu.gpu_instances
        )

    def stop(self, process: subprocess.Popen[str], output: OutputLines) -> str:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        output.join()
        assert process.returncode == 0, output.text
        return output.text


@pytest.fixture
def plugin() -> Iterator[Plugin]:
    with short_socket_dir() as root, restartable_api_server(root) as api:
        api.write_kubeconfig(root / "kubeconfig")
        with api.api_client() as c:
            client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
        runner = Plugin(api, root)
        try:
            yield runner
        finally:
            for process, output in runner.processes:
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=10)
                output.join()


def _our_entries(api: RestartableApiServer, claim: ClaimRef) -> list[dict[str, Any]]:
    with api.api_client() as c:
        devices = read_claim_json(c, claim).get("status", {}).get("devices") or []
    return [d for d in devices if d["driver"] == DRIVER and d["pool"] == NODE]


def _published_devices(api: RestartableApiServer) -> set[str] | None:
    """The devices of the pool's newest generation once all its slices are there, else None."""
    with api.api_client() as c:
        slices = client.ResourceV1Api(c).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    if not slices:
        return None
    newest = max(s.spec.pool.generation for s in slices)
    current = [s for s in slices if s.spec.pool.generation == newest]
    if len(current) != current[0].spec.pool.resource_slice_count:
        return None
    return {d.name for s in current for d in s.spec.devices or []}


def _create_foreign_instance(state: Path) -> None:
    """An operator's 1g.10gb at placement 0 of GPU 1 (nvidia-smi mig -cgi), while the plugin runs."""
    sim.install(state, gpus=["H100-SXM5-80GB"] * 2, faults=sim.FaultPlan())
    try:
        pynvml.nvmlInit()
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = 0, 1
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            pynvml.nvmlDeviceGetHandleByIndex(1), H100.profile_by_name("1g.10gb").profile_id, pynvml.byref(placement)
        )
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()


def test_an_api_outage_stops_neither_the_plugin_nor_unprepare_and_everything_converges_when_it_returns(
    plugin: Plugin,
) -> None:
    process, output = plugin.start({"MIGDRA_STATUS_RECONCILE_INTERVAL": "2"})
    with plugin.api.api_client() as api_client:
        leaving = create_claim(api_client, "leaving", [result("gpu-0-mig-3g40gb-9-4")])
        staying = create_claim(api_client, "staying", [result("gpu-1-mig-1g20gb-15-6")])
        newcomer = create_claim(api_client, "newcomer", [result("gpu-0-mig-1g10gb-19-0")])
    with plugin.kubelet() as kubelet:
        prepared = kubelet.prepare([leaving, staying])
    assert {uid: r.error for uid, r in prepared.items()} == {leaving.uid: "", staying.uid: ""}
    wait_for("the prepared claim says Ready", lambda: len(_our_entries(plugin.api, leaving)) == 1)
    # The claims allocated here change the placement order (the default dynamic policy): the plugin may be
    # writing a new generation of the pool, slice by slice, so wait until one generation is complete.
    published_before = wait_for("a complete generation of the pool", lambda: _published_devices(plugin.api))

    plugin.api.stop()
    with plugin.kubelet() as kubelet:
        unprepared = kubelet.unprepare([leaving])[leaving.uid]
        refused = kubelet.prepare([newcomer])[newcomer.uid]
    assert unprepared.error == ""  # from the checkpoint alone
    assert plugin.instances() == [(1, "6:2")]  # the instance of "leaving" is gone, "staying"'s is not
    assert "reading it failed: cannot reach the API server http" in refused.error  # a new claim needs the API
    assert "MaxRetryError" not in refused.error  # one line naming the server, not urllib3's dump
    _create_foreign_instance(plugin.state)  # the pool changes while the API server is away
    output.wait_for_line(
        "more failed publish rounds than the plugin used to allow", _publish_failure(11), timeout=OUTAGE_WAIT
    )
    output.wait_for_line(
        "more failed status writes than used to be tried", _report_write_failure, count=10, timeout=OUTAGE_WAIT
    )
    assert process.poll() is None, output.text

    plugin.api.start()
    wait_for(
        "the slices are republished with the operator's instance withheld",
        lambda: (devices := _published_devices(plugin.api)) is not None and devices != published_before,
    )
    published = _published_devices(plugin.api)
    assert published is not None
    assert "gpu-1-mig-1g10gb-19-0" not in published
    assert "gpu-1-mig-1g10gb-19-1" in published
    wait_for(
        "the unprepared claim's status is cleared",
        lambda: _our_entries(plugin.api, leaving) == [],
    )
    (entry,) = _our_entries(plugin.api, staying)
    assert entry["conditions"][0]["status"] == "True"
    assert entry["data"]["placement"] == {"start": 6, "size": 2}

    text = plugin.stop(process, output)
    assert "Traceback" not in text


def test_claim_status_lost_at_shutdown_during_an_outage_is_reconciled_at_the_next_start(plugin: Plugin) -> None:
    hour = {"MIGDRA_STATUS_RECONCILE_INTERVAL": "3600"}  # only the reconciliation at start can do it
    process, output = plugin.start(hour)
    with plugin.api.api_client() as api_client:
        claim = create_claim(api_client, "interrupted", [result("gpu-0-mig-3g40gb-9-4")])
    with plugin.kubelet() as kubelet:
        assert kubelet.prepare([claim])[claim.uid].error == ""
    wait_for("the prepared claim says Ready", lambda: len(_our_entries(plugin.api, claim)) == 1)

    plugin.api.stop()
    with plugin.kubelet() as kubelet:
        assert kubelet.unprepare([claim])[claim.uid].error == ""
    output.wait_for_line("the status write is being retried", _status_write_failure(claim))
    plugin.stop(process, output)  # the status write is dropped at exit
    plugin.api.start()
    assert len(_our_entries(plugin.api, claim)) == 1  # still Ready=True, for an instance that is gone

    process, output = plugin.start(hour)  # no kubelet call from here on
    wait_for(
        "the restarted plugin clears the status",
        lambda: _our_entries(plugin.api, claim) == [],
    )
    assert "Traceback" not in plugin.stop(process, output)
