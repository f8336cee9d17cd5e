"""The simulated cluster's kubelet against a real `migdra kubelet-plugin` process and kube-apiserver.

Pods and claims are written directly as the scheduler would (claim allocated and reserved for the pod,
then the pod bound); the kubelet must prepare them through the plugin's real sockets, report the pod
Running with its CDI devices, unprepare on deletion and finish the deletion.  What the simulated GPUs
hold is read from the plugin's ``--sim-state`` file, so every assertion is on observable state, polled
with a deadline.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.client import CLAIMS, EVENTS, NODES, PODS, SLICES, Client
from dra_driver.kube.failures import BackoffPolicy
from dra_driver.nvml import sim
from migdra_devcluster.kubelet import CDI_ANNOTATION, FAILED_PREPARE, FAILED_UNPREPARE, Kubelet
from tests.kube_apiserver import KubeApiServer
from tests.kubelet_client import short_socket_dir
from tests.plugin_command import DRIVER, NODE, kubelet_plugin_argv, kubelet_plugin_env
from tests.waiting import wait_for

NAMESPACE = "default"


@dataclass
class SimNode:
    """One node: API server, a kubelet, and the plugin processes started for it."""

    api: KubeApiServer
    client: Client
    root: Path
    kubeconfig: Path
    kubelet: Kubelet
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # -- the plugin ----------------------------------------------------------------------------

    def start_plugin(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A plugin process; returns once this node's kubelet has registered it and it has published."""
        before = {i.sequence for i in self.kubelet.plugins.instances()}
        log = (self.root / f"plugin-{len(self.processes)}.log").open("wb")
        with log:
            process = subprocess.Popen(
                kubelet_plugin_argv(self.root, self.kubeconfig),
                env=kubelet_plugin_env(self.root, list((env or {}).items())),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)

        def registered() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"plugin exited with {process.returncode}:\n{self.plugin_log()}")
            fresh = [i for i in self.kubelet.plugins.instances() if i.sequence not in before and i.connected]
            return bool(fresh) and self.pool_complete()

        wait_for("the plugin to be registered by the kubelet and to publish", registered)
        return process

    def plugin_log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.root.glob("plugin-*.log")))

    def kill_plugin(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        process.send_signal(sig)
        process.wait(timeout=30)

    def instances(self) -> list[tuple[int, str]]:
        """(GPU index, placement) of every GPU instance on the simulated node."""
        return sorted(
            (gpu.index, f"{gi.placement.start}:{gi.placement.size}")
            for gpu in sim.snapshot(self.root / "nvml.json").gpus
            for gi in gpu.gpu_instances
        )

    # -- API objects ---------------------------------------------------------------------------

    def slices(self) -> list[dict[str, Any]]:
        return self.client.list(SLICES, field_selector=f"spec.nodeName={NODE}")[0]

    def pool_complete(self) -> bool:
        """Whether the node's pool is published whole (a pool may take several slices)."""
        slices = self.slices()
        if not slices:
            return False
        generation = max(int(s["spec"]["pool"]["generation"]) for s in slices)
        current = [s for s in slices if int(s["spec"]["pool"]["generation"]) == generation]
        return len(current) == int(current[0]["spec"]["pool"]["resourceSliceCount"])

    def device(self, prefix: str) -> str:
        """The first published device whose name starts with ``prefix`` (e.g. ``gpu-0-mig-1g10gb-``)."""
        names = sorted(d["name"] for s in self.slices() for d in s["spec"].get("devices") or [])
        return next(n for n in names if n.startswith(prefix))

    def create_pod(self, name: str, claim: str, finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
        """A pod using ``claim``, not bound yet (the scheduler binds it after reserving the claim)."""
        return self.client.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "finalizers": list(finalizers)},
                "spec": {
                    "containers": [{"name": "app", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                },
            },
        )

    def create_claim(self, name: str, device: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
        """A claim allocated ``device`` and reserved for ``pods``, written as the scheduler does."""
        created = self.client.create(
            CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.gpu.migdra.io"}}]}
                },
            },
        )
        created["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}]},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            },
            "reservedFor": [
                {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
            ],
        }
        return self.client.update(CLAIMS, created, "status")

    def run_pod(self, name: str) -> dict[str, Any]:
        """Create and bind a pod (its claim must reserve it by then) and wait until it is Running."""
        self.client.bind(NAMESPACE, name, NODE)
        return self.wait_running(name)

    def wait_running(self, name: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.client.get(PODS, NAMESPACE, name)
            return pod if pod and pod["status"].get("phase") == "Running" else None

        return wait_for(f"pod {name} to be Running", running)

    def delete_pod(self, name: str) -> None:
        """Delete as a user does (graceful where the API server supports it), wait until it is gone."""
        self.client.delete(PODS, NAMESPACE, name)
        wait_for(f"pod {name} to be gone", lambda: self.client.get(PODS, NAMESPACE, name) is None)

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        items, _ = self.client.list(EVENTS, NAMESPACE, field_selector=f"involvedObject.name={name},reason={reason}")
        return items


@pytest.fixture
def make_node(api_server: KubeApiServer) -> Iterator[Callable[..., SimNode]]:
    """Build the node (kubelet started, no plugin yet); everything is stopped and killed afterwards."""
    nodes: list[SimNode] = []
    with short_socket_dir() as root:
        kubeconfig = root / "kubeconfig"
        api_server.write_kubeconfig(kubeconfig)
        client = Client(kubeconfig)

        def make(
            wipe_delay: float = 30.0,
            backoff: BackoffPolicy = BackoffPolicy(initial=0.2, maximum=1.0),  # noqa: B008 -- frozen
            call_timeout: float = 45.0,
        ) -> SimNode:
            kubelet = Kubelet(
                client,
                NODE,
                root / "registry",
                labels={"example.com/rack": "r1"},
                wipe_delay=wipe_delay,
                backoff=backoff,
                call_timeout=call_timeout,
            )
            node = SimNode(api_server, client, root, kubeconfig, kubelet)
            nodes.append(node)
            kubelet.start()
            return node

        try:
            yield make
        finally:
            for node in nodes:
                node.kubelet.stop()
                for process in node.processes:
                    if process.poll() is None:
                        process.kill()
                    process.wait(timeout=30)
            client.close()


def test_pod_runs_with_its_cdi_devices_and_deletion_unprepares(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    registered = node.client.get(NODES, None, NODE)
    assert registered is not None
    assert registered["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert registered["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert registered["metadata"]["labels"]["example.com/rack"] == "r1"
    assert {c["type"]: c["status"] for c in registered["status"]["conditions"]}["Ready"] == "True"
    assert registered["status"]["allocatable"]["pods"] == "110"

    node.start_plugin()
    device = node.device("gpu-0-mig-1g10gb-")
    pod = node.create_pod("app", "app-gpu")
    claim = node.create_claim("app-gpu", device, [pod])
    running = node.run_pod("app")

    cdi = json.loads(running["metadata"]["annotations"][CDI_ANNOTATION])
    assert cdi == {"app-gpu/gpu": [f"{DRIVER}/claim={claim['metadata']['uid']}-{device}"]}
    conditions = {c["type"]: c["status"] for c in running["status"]["conditions"]}
    assert conditions == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
        "PodReadyToStartContainers": "True",
    }
    assert running["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert running["status"]["podIP"]
    assert running["status"]["hostIP"]
    assert len(node.instances()) == 1
    assert [e["type"] for e in node.events("app", "Started")] == ["Normal"]

    node.client.delete(PODS, NAMESPACE, "app")
    terminating = node.client.get(PODS, NAMESPACE, "app")
    if terminating is not None:  # graceful deletion: the pod stays until the kubelet has finished
        assert terminating["metadata"]["deletionTimestamp"]
    wait_for("the pod to be gone", lambda: node.client.get(PODS, NAMESPACE, "app") is None)
    wait_for("the instance to be destroyed", lambda: node.instances() == [])
    assert node.kubelet.prepared_claims() == {}
    assert node.slices(), "the slices stay while the plugin is connected"


def test_a_pod_marked_for_deletion_is_unprepared_while_it_still_exists(make_node: Callable[..., SimNode]) -> None:
    # A finalizer keeps the deleted pod (with its deletionTimestamp) whatever the API server's pod
    # deletion does, so this is the graceful path: the kubelet acts on the mark, not on the disappearance.
    node = make_node()
    node.start_plugin()
    pod = node.create_pod("held", "held-gpu", finalizers=("example.com/hold",))
    node.create_claim("held-gpu", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.run_pod("held")
    node.client.delete(PODS, NAMESPACE, "held")
    marked = node.client.get(PODS, NAMESPACE, "held")
    assert marked is not None
    assert marked["metadata"]["deletionTimestamp"]
    wait_for("the instance to be destroyed", lambda: node.instances() == [])
    wait_for("the Killing event", lambda: node.events("held", "Killing"))
    assert node.client.get(PODS, NAMESPACE, "held") is not None  # only the finalizer holds it now
    node.client.merge_patch(PODS, NAMESPACE, "held", {"metadata": {"finalizers": None}})
    wait_for("the pod to be gone", lambda: node.client.get(PODS, NAMESPACE, "held") is None)


def test_claims_from_a_template_and_for_extended_resources_are_found_in_the_pod_status(
    make_node: Callable[..., SimNode],
) -> None:
    node = make_node()
    node.start_plugin()
    pod = node.client.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "mixed", "namespace": NAMESPACE},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox",
                        "resources": {"claims": [{"name": "gpu"}], "limits": {"example.com/mig-1g": "1"}},
                    }
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-mig"}],
            },
        },
    )
    node.create_claim("mixed-gpu-x7k2q", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.create_claim("mixed-extended-resources-9wz4d", node.device("gpu-1-mig-1g10gb-"), [pod])
    node.client.merge_patch(
        PODS,
        NAMESPACE,
        "mixed",
        {
            "status": {
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "mixed-gpu-x7k2q"}],
                "extendedResourceClaimStatus": {
                    "resourceClaimName": "mixed-extended-resources-9wz4d",
                    "requestMappings": [
                        {"containerName": "app", "resourceName": "example.com/mig-1g", "requestName": "gpu"}
                    ],
                },
            }
        },
        "status",
    )
    running = node.run_pod("mixed")
    cdi = json.loads(running["metadata"]["annotations"][CDI_ANNOTATION])
    assert sorted(cdi) == ["mixed-extended-resources-9wz4d/gpu", "mixed-gpu-x7k2q/gpu"]
    assert len(node.instances()) == 2
    node.delete_pod("mixed")
    wait_for("both instances to be destroyed", lambda: node.instances() == [])


def test_shared_claim_is_prepared_once_and_unprepared_after_the_last_pod(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    node.start_plugin()
    first, second = node.create_pod("first", "shared"), node.create_pod("second", "shared")
    claim = node.create_claim("shared", node.device("gpu-1-mig-1g10gb-"), [first, second])
    node.run_pod("first")
    node.run_pod("second")
    assert len(node.instances()) == 1
    cached = node.kubelet.prepared_claims()
    assert list(cached) == [claim["metadata"]["uid"]]
    assert cached[claim["metadata"]["uid"]].users == {first["metadata"]["uid"], second["metadata"]["uid"]}

    node.delete_pod("first")
    assert len(node.instances()) == 1, "the second pod still uses the claim"
    assert node.client.get(PODS, NAMESPACE, "second")["status"]["phase"] == "Running"  # type: ignore[index]
    node.delete_pod("second")
    wait_for("the shared instance to be destroyed", lambda: node.instances() == [])


def test_plugin_restart_keeps_running_pods_and_serves_new_ones(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    old = node.start_plugin()
    before = node.create_pod("before", "before-gpu")
    node.create_claim("before-gpu", node.device("gpu-0-mig-1g10gb-"), [before])
    node.run_pod("before")
    first_instance = node.kubelet.plugins.instances()[0]

    node.kill_plugin(old)
    wait_for("the killed plugin to count as disconnected", lambda: not node.kubelet.plugins.drivers())
    node.start_plugin()
    assert node.kubelet.plugins.instances()[-1].sequence > first_instance.sequence
    assert node.client.get(PODS, NAMESPACE, "before")["status"]["phase"] == "Running"  # type: ignore[index]

    after = node.create_pod("after", "after-gpu")
    node.create_claim("after-gpu", node.device("gpu-1-mig-1g10gb-"), [after])
    node.run_pod("after")
    assert len(node.instances()) == 2

    node.delete_pod("before")  # prepared by the old process, unprepared by the new one
    node.delete_pod("after")
    wait_for("both instances to be destroyed", lambda: node.instances() == [])


def test_deletion_while_the_plugin_is_away_completes_when_it_returns(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    process = node.start_plugin()
    pod = node.create_pod("orphan", "orphan-gpu")
    node.create_claim("orphan-gpu", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.run_pod("orphan")
    node.kill_plugin(process)
    wait_for("the killed plugin to count as disconnected", lambda: not node.kubelet.plugins.drivers())

    node.client.delete(PODS, NAMESPACE, "orphan")
    if node.client.get(PODS, NAMESPACE, "orphan") is not None:  # graceful deletion: it waits for the unprepare
        warnings = wait_for("the unprepare warning", lambda: node.events("orphan", FAILED_UNPREPARE))
        assert f"DRA driver {DRIVER} is not registered" in warnings[0]["message"]
        assert node.client.get(PODS, NAMESPACE, "orphan") is not None
    assert len(node.instances()) == 1  # nobody can unprepare while the plugin is away

    node.start_plugin()
    wait_for("the instance to be destroyed", lambda: node.instances() == [])
    wait_for("the pod to be gone", lambda: node.client.get(PODS, NAMESPACE, "orphan") is None)
    assert node.kubelet.prepared_claims() == {}


def test_failed_prepare_is_reported_and_retried_until_it_works(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    faults = {
        "rules": [{"symbol": "nvmlDeviceCreateGpuInstanceWithPlacement", "nth": 1, "count": 2, "error": "Unknown"}]
    }
    node.start_plugin({"MIGDRA_SIM_FAULTS": json.dumps(faults)})
    pod = node.create_pod("flaky", "flaky-gpu")
    node.create_claim("flaky-gpu", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.client.bind(NAMESPACE, "flaky", NODE)

    warnings = wait_for("a FailedPrepareDynamicResources event", lambda: node.events("flaky", FAILED_PREPARE))
    assert warnings[0]["type"] == "Warning"
    assert "flaky-gpu" in warnings[0]["message"]
    node.wait_running("flaky")
    assert len(node.instances()) == 1
    node.delete_pod("flaky")
    wait_for("the instance to be destroyed", lambda: node.instances() == [])


def test_pod_waits_for_an_unregistered_driver(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    pod = node.create_pod("early", "early-gpu")
    # no plugin yet, so no slices: name a device the plugin will publish
    node.create_claim("early-gpu", "gpu-0-mig-1g10gb-19-0", [pod])
    node.client.bind(NAMESPACE, "early", NODE)
    events = wait_for("the not-registered warning", lambda: node.events("early", FAILED_PREPARE))
    assert f"DRA driver {DRIVER} is not registered" in events[0]["message"]
    node.start_plugin()
    node.wait_running("early")


def test_slices_are_wiped_when_the_plugin_stays_away(make_node: Callable[..., SimNode]) -> None:
    node = make_node(wipe_delay=1.0)
    process = node.start_plugin()
    assert node.slices()
    node.kill_plugin(process, signal.SIGTERM)  # its slices stay (--keep-slices-on-exit is the default)
    wait_for("the slices to be wiped", lambda: not node.slices())
    node.start_plugin()  # it publishes again and is registered again
    assert node.slices()


def test_kubelet_start_wipes_stale_slices_of_its_node(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    node.start_plugin()
    published = len(node.slices())
    node.kubelet.stop()
    node.kill_plugin(node.processes[-1])
    assert len(node.slices()) == published  # nobody deleted them: a killed plugin cannot
    restarted = make_node()
    assert restarted.slices() == []


def test_a_finished_pod_releases_its_claims_and_stays(make_node: Callable[..., SimNode]) -> None:
    node = make_node()
    node.start_plugin()
    pod = node.create_pod("job", "job-gpu")
    node.create_claim("job-gpu", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.run_pod("job")
    assert len(node.instances()) == 1
    node.client.merge_patch(PODS, NAMESPACE, "job", {"status": {"phase": "Succeeded"}}, "status")
    wait_for("the instance of the finished pod to be destroyed", lambda: node.instances() == [])
    # the kubelet forgets the claim when NodeUnprepareResources has returned, just after the destroy
    wait_for("the kubelet to forget the finished pod's claim", lambda: node.kubelet.prepared_claims() == {})
    finished = node.client.get(PODS, NAMESPACE, "job")
    assert finished is not None, "a finished pod is not deleted by the kubelet"
    assert finished["status"]["phase"] == "Succeeded"


def test_a_prepare_that_timed_out_is_still_unprepared_when_the_pod_goes(make_node: Callable[..., SimNode]) -> None:
    # The plugin creates the instance after kubelet's call timed out; the retry comes too late (long
    # backoff), the pod is deleted first: NodeUnprepareResources must still go out, or the instance leaks.
    node = make_node(backoff=BackoffPolicy(initial=60.0, maximum=60.0), call_timeout=0.5)
    node.start_plugin({"MIGDRA_SIM_FAULTS": json.dumps({"latency": {"nvmlDeviceCreateGpuInstanceWithPlacement": 1.5}})})
    pod = node.create_pod("slow", "slow-gpu")
    node.create_claim("slow-gpu", node.device("gpu-0-mig-1g10gb-"), [pod])
    node.client.bind(NAMESPACE, "slow", NODE)
    warnings = wait_for("the timed-out prepare reported", lambda: node.events("slow", FAILED_PREPARE))
    assert "DEADLINE_EXCEEDED" in warnings[0]["message"]
    wait_for("the plugin to finish creating the instance anyway", lambda: len(node.instances()) == 1)
    current = node.client.get(PODS, NAMESPACE, "slow")
    assert current is not None
    assert current["status"]["phase"] == "Pending"
    assert current["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    node.delete_pod("slow")
    wait_for("the instance to be destroyed", lambda: node.instances() == [])
    wait_for("the kubelet to forget the claim", lambda: node.kubelet.prepared_claims() == {})
