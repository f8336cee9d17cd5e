"""A rolling update of the node plugin: the old and the new `migdra kubelet-plugin` process serve side by
side (pod-UID socket names, one plugin directory, so one state directory), a test kubelet prepares and
unprepares against both alternately and at once, then the old one stops.

What must hold (docs/operations.md, "Upgrades"): the new process starts while the old one serves;
neither creates an instance twice or loses a record of the other's; a prepare the old process is in
the middle of when the new one starts is not rolled back by the new one's start-up recovery; and after
the old process is gone the new one unprepares what the old one prepared, leaving nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from dra_driver.kubelet.calls import ClaimRef, PrepareResult
from dra_driver.nvml import sim
from kubeletplugin.prepare.locks import LOCKS_DIR, lock_file_name, release_flock, try_flock
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import KubeletClient, short_socket_dir
from tests.plugin_command import DRIVER, NODE, kubelet_plugin_argv, kubelet_plugin_env
from tests.prepare_harness import create_claim, result
from tests.waiting import wait_for

WAIT_S = 30.0


@dataclass
class Plugins:
    """Plugin processes of one node, started as the two pods of a DaemonSet update would be."""

    api: KubeApiServer
    root: Path
    kubeconfig: Path
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugin"  # also the state directory: neither pod sets --state-dir

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def sim_state(self) -> Path:
        return self.root / "nvml.json"

    def log(self, pod_uid: str) -> Path:
        return self.root / f"{pod_uid}.log"

    def registration_socket(self, pod_uid: str) -> Path:
        return self.root / "registry" / f"{DRIVER}-{pod_uid}-reg.sock"

    def start(self, pod_uid: str) -> subprocess.Popen[str]:
        with self.log(pod_uid).open("w") as log:
            process = subprocess.Popen(
                kubelet_plugin_argv(self.root, self.kubeconfig, "--pod-uid", pod_uid, verbose=True),
                env=kubelet_plugin_env(self.root),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.processes[pod_uid] = process

        def serving() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"plugin {pod_uid} exited:\n{self.log(pod_uid).read_text()[-4000:]}")
            return self._answers(pod_uid)

        wait_for(
            f"plugin {pod_uid} to serve", serving, timeout=WAIT_S, detail=lambda: self.log(pod_uid).read_text()[-4000:]
        )
        return process

    def _answers(self, pod_uid: str) -> bool:
        if not self.registration_socket(pod_uid).exists():
            return False
        try:
            with KubeletClient(self.registration_socket(pod_uid), timeout=2) as probe:
                probe.register()
        except grpc.RpcError:
            return False
        return True

    def kubelet(self, pod_uid: str) -> KubeletClient:
        kubelet = KubeletClient(self.registration_socket(pod_uid))
        kubelet.register()
        return kubelet

    def stop(self, pod_uid: str) -> str:
        process = self.processes[pod_uid]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=WAIT_S)
        output = self.log(pod_uid).read_text()
        assert process.returncode == 0, output[-4000:]
        return output

    def instances(self) -> list[tuple[int, str, int]]:
        """(GPU index, placement, compute instances) of every GI on the node."""
        return sorted(
            (gpu.index, f"{gi.placement.start}:{gi.placement.size}", len(gi.compute_instances))
            for gpu in sim.snapshot(self.sim_state).gpus
            for gi in gpu.gpu_instances
        )

    def checkpoint(self) -> dict[str, Any]:
        """The checkpoint's records by claim UID, as stored (one file per claim, of this boot)."""
        claims: dict[str, Any] = {}
        for path in (self.plugin_dir / "claims").glob("*/*.json"):
            with contextlib.suppress(FileNotFoundError):  # dropped between the listing and the read
                claim = json.loads(path.read_text())["data"]["claim"]
                claims[claim["claimUID"]] = claim
        return claims

    def gpu_uuid(self, index: int) -> str:
        return sim.snapshot(self.sim_state).gpus[index].uuid


@pytest.fixture
def plugins(api_server: KubeApiServer) -> Iterator[Plugins]:
    with short_socket_dir() as root:
        kubeconfig = root / "kubeconfig"
        api_server.write_kubeconfig(kubeconfig)
        with api_server.api_client() as c:
            client.CoreV1Api(c).create_node({"metadata": {"name": NODE}})
        runner = Plugins(api_server, root, kubeconfig)
        try:
            yield runner
        finally:
            for process in runner.processes.values():
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=10)


def wait_for_record(plugins: Plugins, claim: ClaimRef, state: str) -> None:
    """Until the checkpoint holds the claim's record in ``state`` (bounded)."""
    wait_for(
        f"claim {claim.name} to reach {state}",
        lambda: plugins.checkpoint().get(claim.uid, {}).get("state") == state,
        timeout=WAIT_S,
        detail=lambda: f"checkpoint: {plugins.checkpoint()}",
    )


def ok(result: PrepareResult) -> bool:
    return result.error == "" and len(result.devices) == 1


def test_old_and_new_plugin_serve_side_by_side_then_the_old_one_stops(plugins: Plugins) -> None:
    plugins.start("pod-old")
    devices = {
        "a": "gpu-0-mig-1g10gb-19-0",
        "b": "gpu-1-mig-3g40gb-9-4",  # in flight in the old process while the new one starts
        "c": "gpu-0-mig-1g10gb-19-1",
        "d": "gpu-0-mig-1g10gb-19-2",
        "e": "gpu-0-mig-1g10gb-19-3",
        "f": "gpu-1-mig-1g10gb-19-0",
        "g": "gpu-0-mig-1g10gb-19-4",  # g and h: the same device, a double allocation across the pods
        "h": "gpu-0-mig-1g10gb-19-4",
    }
    with plugins.api.api_client() as api_client:
        claim = {name: create_claim(api_client, name, [result(device)]) for name, device in devices.items()}
    old, pool = plugins.kubelet("pod-old"), ThreadPoolExecutor(4)
    try:
        assert ok(old.prepare([claim["a"]])[claim["a"].uid])

        # The old pod is in the middle of preparing b (its record says PrepareStarted) when the new pod
        # starts: this test holds GPU 1's lock, as a slow NVML call of the old pod would.
        gpu1_lock = plugins.plugin_dir / LOCKS_DIR / lock_file_name("gpu-", plugins.gpu_uuid(1))
        held = try_flock(gpu1_lock, None)
        assert held is not None
        try:
            in_flight: Future[dict[str, PrepareResult]] = pool.submit(old.prepare, [claim["b"]])
            wait_for_record(plugins, claim["b"], "PrepareStarted")
            plugins.start("pod-new")  # beside the old one: no wait for it
        finally:
            release_flock(gpu1_lock, held, remove=False)
        prepared_b = in_flight.result(timeout=WAIT_S)[claim["b"].uid]
        assert ok(prepared_b), prepared_b.error  # the new pod's recovery left it alone
        new = plugins.kubelet("pod-new")

        # Alternately: what one pod prepared, the other answers from the shared record.
        assert new.prepare([claim["b"]])[claim["b"].uid] == prepared_b
        assert plugins.instances() == [(0, "0:1", 1), (1, "4:4", 1)]

        # At once, on the same GPU, through both pods.
        calls = [(old, "c"), (new, "d"), (old, "e"), (new, "f")]
        results = [pool.submit(k.prepare, [claim[n]]) for k, n in calls]
        assert all(ok(r.result(timeout=WAIT_S)[claim[n].uid]) for r, (_, n) in zip(results, calls, strict=True))
        double = [pool.submit(k.prepare, [claim[n]]) for k, n in ((old, "g"), (new, "h"))]
        errors = sorted(r.result(timeout=WAIT_S)[claim[n].uid].error for r, n in zip(double, "gh", strict=True))
        assert errors[0] == "", errors  # exactly one of the two got the device ...
        assert "double allocation" in errors[1] or "prepared for claim" in errors[1], errors  # ... never both
        expected = [(0, "0:1", 1), (0, "1:1", 1), (0, "2:1", 1), (0, "3:1", 1), (0, "4:1", 1), (1, "0:1", 1)]
        assert plugins.instances() == [*expected, (1, "4:4", 1)]  # each exactly once
        assert len(plugins.checkpoint()) == 7  # no record lost: a-f and the winner of g/h

        # Unprepare through the pod that did not prepare.
        assert new.unprepare([claim["a"]])[claim["a"].uid].error == ""
        assert old.unprepare([claim["d"]])[claim["d"].uid].error == ""
        new.close()
    finally:
        old.close()
        pool.shutdown(wait=True)

    old_output = plugins.stop("pod-old")
    with plugins.kubelet("pod-new") as new:
        rest = [claim[n] for n in "bcefgh"]
        assert {uid: r.error for uid, r in new.unprepare(rest).items()} == {c.uid: "" for c in rest}
    new_output = plugins.stop("pod-new")

    assert plugins.instances() == []
    assert plugins.checkpoint() == {}
    assert sorted(p.name for p in plugins.cdi_dir.iterdir()) == []
    assert [p.name for p in (plugins.plugin_dir / LOCKS_DIR).iterdir() if p.name.startswith("claim-")] == []
    assert f"UID {claim['b'].uid}) is being prepared or unprepared by another plugin process" in new_output
    assert "rolling back" not in new_output, new_output[-4000:]
    assert "Traceback" not in old_output + new_output
