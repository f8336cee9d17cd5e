"""A whole simulated cluster on one machine: what ``migdra sim up`` runs and ``migdra sim down`` stops.

Parts, started in this order and stopped in reverse:

1. the upstream control plane (:mod:`migdra_devcluster.upstream`): etcd, kube-apiserver,
   kube-controller-manager and kube-scheduler as supervised processes, built on first use; the admin
   kubeconfig at ``<workdir>/kubeconfig``;
2. the DeviceClasses of ``deviceclasses/`` (and ``examples/``), with the driver name substituted in
   their CEL selectors when it is not the default, as the Helm chart does;
3. the Helm chart's ServiceAccounts, RBAC and admission policy, and migdra's reservation controller as
   its own **process** (``migdra controller``, leader election on, log ``<workdir>/controller.log``),
   logged in as its ServiceAccount;
4. per node ``node-1 … node-N``: a kubelet (threads of this process; it creates the Node object and
   wipes the node's slices, as kubelet does at start-up) and the node's own ``migdra kubelet-plugin``
   **process** on its own simulated GPUs (``<workdir>/nodes/<node>/nvml-state.json``), registered
   through real unix sockets.  A plugin process that exits is started again after a short backoff,
   as a DaemonSet's pod would be.  A node named in ``real_nodes`` is a real node instead
   (:mod:`migdra_devcluster.realnode`): containerd with CDI and the upstream kubelet, which registers the
   Node and calls the same plugin process through its own plugin registry; root only.

Ready means every node's pool of ResourceSlices is published and complete.  Every process this
supervisor starts is recorded (``<workdir>/sim.pid``, ``<workdir>/controller.pid``,
``<workdir>/nodes/<node>/plugin.pid``) so that
``migdra sim down`` can stop a cluster whose supervisor was killed and leave nothing running.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.devicemodel.naming import driver_name_problem
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.durable import writable_directory_problem
from dra_driver.errors import ConfigurationError
from dra_driver.kube.client import DEVICE_CLASSES, NODES, SLICES, Client
from migdra_devcluster.control import Answer, answer, pending_requests
from migdra_devcluster.kubelet.kubelet import Kubelet
from migdra_devcluster.realnode.containerd import NodeNetwork
from migdra_devcluster.realnode.images import TEST_IMAGE
from migdra_devcluster.realnode.node import (
    NODE_TOOLS_DIR,
    REAL_NODE_DIR,
    RealNode,
    RealNodeSpec,
    real_node_problem,
    restore_real_nodes,
)
from migdra_devcluster.supervision import (
    CONTROLLER_PID,
    PLUGIN_PID,
    SupervisedProcess,
    recorded_processes,
)

if TYPE_CHECKING:
    from migdra_devcluster.upstream.controlplane import KubeControlPlane

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 120.0
_MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL


@dataclass(frozen=True)
class ClusterSpec:
    """What to simulate.  ``gpus``: ``MODEL:COUNT[,MODEL:COUNT]`` per node (catalog keys or aliases);
    ``node_gpus``: (node, ``MODEL:COUNT[,...]``) for the nodes that have other GPUs (a mixed fleet)."""

    workdir: Path
    nodes: int
    gpus: str
    driver_name: str = DEFAULT_DRIVER_NAME
    wipe_delay: float = 30.0
    deviceclass_dir: Path = DEVICECLASS_DIR
    realize_before_bind: bool = False
    shared_devices: bool = False  # the plugins publish shared GPU-instance devices (sharedDevices: true)
    # (node, variable, value): extra environment of one node's plugin (a fault plan for one node's GPUs).
    plugin_env: tuple[tuple[str, str, str], ...] = ()
    node_gpus: tuple[tuple[str, str], ...] = ()
    kube_bin_dir: Path | None = None
    kube_version: str | None = None
    real_nodes: tuple[str, ...] = ()  # nodes run by the upstream kubelet and containerd (root only)

    def node_names(self) -> list[str]:
        return [f"node-{number}" for number in range(1, self.nodes + 1)]

    def gpus_of(self, node: str) -> str:
        """The simulated GPUs of ``node``: its ``node_gpus`` entry, else ``gpus``."""
        return dict(self.node_gpus).get(node, self.gpus)

    def node_dir(self, node: str) -> Path:
        return self.workdir / "nodes" / node


def node_layout(spec: ClusterSpec, node: str) -> dict[str, Path]:
    """The directories and files of one node's plugin (a kubelet's view of its host paths)."""
    root = spec.node_dir(node)
    return {
        "root": root,
        "registry": root / "registry",
        "plugin": root / "plugin",
        "cdi": root / "cdi",
        "proc": root / "proc",
        "state": root / "nvml-state.json",
        "log": root / "plugin.log",
        "device_config": root / "device-config.yaml",
        "pid": root / PLUGIN_PID,
    }


def _socket_problem(spec: ClusterSpec) -> str | None:
    longest = max(
        [
            len(str(node_layout(spec, n)["registry"] / f"{spec.driver_name}-reg.sock").encode())
            for n in spec.node_names()
        ]
        + [len(str(node_layout(spec, n)["plugin"] / "dra.sock").encode()) for n in spec.node_names()]
    )
    if longest > _MAX_SOCKET_PATH:
        return (
            f"--workdir {spec.workdir}: too long for the plugins' unix sockets ({longest} bytes under it, "
            f"at most {_MAX_SOCKET_PATH}); give a shorter directory"
        )
    return None


def gpu_instances_per_node(workdir: Path) -> dict[str, int]:
    """MIG GPU instances on each node's simulated GPUs, read through NVML as the plugins read them
    (what the demo, the tests and the benchmarks check is left after pods are gone)."""
    from dra_driver.nvml.session import open_nvml  # noqa: PLC0415 -- loads pynvml and the simulator
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415

    counts = {}
    for state in sorted(workdir.glob("nodes/*/nvml-state.json")):
        with open_nvml(build_nvml_settings(nvml="simulated", sim_state=state)) as nvml:
            counts[state.parent.name] = sum(len(nvml.gpu_instances(gpu.uuid)) for gpu in nvml.list_gpus())
    return counts


class ControllerProcess(SupervisedProcess):
    """The reservation controller, ``migdra controller`` (leader election on, as in a cluster)."""

    def __init__(
        self, spec: ClusterSpec, kubeconfig: Path, lease_namespace: str, progress: Callable[[str], None]
    ) -> None:
        super().__init__("controller", spec.workdir / "controller.log", spec.workdir / CONTROLLER_PID, progress)
        self.spec = spec
        self.kubeconfig = kubeconfig
        self.lease_namespace = lease_namespace

    def argv(self) -> list[str]:
        return [
            str(Path(sys.executable).with_name("migdra")),
            "-v",
            "controller",
            "--driver-name",
            self.spec.driver_name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--lease-namespace",
            self.lease_namespace,
            "--identity",
            "controller-0",
        ]


ROLL_TIMEOUT_S = 120.0
REGISTERED_LOG_LINE = "registered with kubelet"
"""What ``migdra kubelet-plugin -v`` logs once a kubelet accepted its registration (tests/node holds it)."""


class PluginProcess(SupervisedProcess):
    """One node's ``migdra kubelet-plugin`` process.  On a real node ``kubelet_paths`` replaces the
    simulated kubelet's directories with the real kubelet's (``registry``, ``plugin``) and containerd's
    CDI directory (``cdi``)."""

    def __init__(
        self,
        spec: ClusterSpec,
        node: str,
        kubeconfig: Path,
        progress: Callable[[str], None],
        kubelet_paths: dict[str, Path] | None = None,
        pod_uid: str | None = None,
    ) -> None:
        self.node = node
        self.pod_uid = pod_uid  # rolling-update socket names; a rollout's new process has one
        self.paths = {**node_layout(spec, node), **(kubelet_paths or {})}
        pid_path = self.paths["pid"] if pod_uid is None else self.paths["root"] / f"plugin-{pod_uid}.pid"
        super().__init__(f"plugin of {node}", self.paths["log"], pid_path, progress)
        self.spec = spec
        self.kubeconfig = kubeconfig

    def argv(self) -> list[str]:
        migdra = str(Path(sys.executable).with_name("migdra"))
        p = self.paths
        return [
            migdra,
            "-v",  # INFO: one line per kubelet call, what each prepare and unprepare did
            "kubelet-plugin",
            "--node-name",
            self.node,
            "--driver-name",
            self.spec.driver_name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--registry-dir",
            str(p["registry"]),
            "--plugin-dir",
            str(p["plugin"]),
            "--cdi-dir",
            str(p["cdi"]),
            "--nvml",
            "simulated",
            "--sim-state",
            str(p["state"]),
            "--sim-gpus",
            self.spec.gpus_of(self.node),
            *(["--realize-before-bind"] if self.spec.realize_before_bind else []),
            *(["--device-config", str(p["device_config"])] if self.spec.shared_devices else []),
            *(["--dev-root", str(p["dev_root"])] if "dev_root" in p else []),
            *(["--driver-root", str(p["driver_root"]), "--cdi-driver-files"] if "driver_root" in p else []),
            *(["--pod-uid", self.pod_uid] if self.pod_uid is not None else []),
        ]

    def registered(self) -> bool:
        """Whether a kubelet accepted this plugin (the line it logs at INFO for NotifyRegistrationStatus).
        A real kubelet finds the registration socket on its own time, after the slices are published: a
        pod scheduled before would fail with "DRA driver ... is not registered"."""
        return self.registrations() > 0

    def registrations(self) -> int:
        """How often a kubelet accepted a plugin of this node (processes of a node share its log)."""
        try:
            return self.log_path.read_text(errors="replace").count(REGISTERED_LOG_LINE)
        except FileNotFoundError:
            return 0

    def start(self) -> None:
        for key in ("registry", "plugin", "cdi", "proc"):
            self.paths[key].mkdir(parents=True, exist_ok=True)
        if self.spec.shared_devices:
            self.paths["device_config"].write_text("sharedDevices: true\n", encoding="utf-8")
        super().start()

    def env(self) -> dict[str, str]:
        env = super().env()
        env["MIGDRA_PROC_ROOT"] = str(self.paths["proc"])
        env.update({name: value for node, name, value in self.spec.plugin_env if node == self.node})
        return env


class LocalCluster:
    """The simulated cluster of :class:`ClusterSpec`; :meth:`start` returns once it is ready."""

    def __init__(self, spec: ClusterSpec, progress: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.progress = progress or (lambda message: log.info("%s", message))
        self.kubeconfig = spec.workdir / "kubeconfig"
        self.control_plane: KubeControlPlane | None = None
        self.client: Client | None = None
        self.kubelets: dict[str, Kubelet] = {}
        self.real_nodes: dict[str, RealNode] = {}
        self.plugins: dict[str, PluginProcess] = {}
        self._rollouts = 0
        self.reservation_controller: ControllerProcess | None = None

    def check(self) -> None:
        """Everything that can be known wrong before anything starts (one clear error)."""
        from dra_driver.nvml.settings import parse_sim_gpus  # noqa: PLC0415 -- loads the MIG catalog

        if self.spec.nodes < 1:
            raise ConfigurationError(f"--nodes {self.spec.nodes}: need at least 1 node")
        problem = driver_name_problem(self.spec.driver_name)
        if problem is not None:
            name = self.spec.driver_name
            raise ConfigurationError(
                f"--driver-name {name!r}: not a DRA driver name: it {problem} (e.g. {DEFAULT_DRIVER_NAME!r})"
            )
        from migdra_devcluster.upstream.access import helm_binary  # noqa: PLC0415
        from migdra_devcluster.upstream.binaries import find_binaries, kube_version_problem  # noqa: PLC0415

        if self.spec.kube_bin_dir is not None:  # else built on first use (start)
            find_binaries(self.spec.kube_bin_dir, None)
        elif self.spec.kube_version is not None and (problem := kube_version_problem(self.spec.kube_version)):
            raise ConfigurationError(problem)
        helm_binary()
        problem = writable_directory_problem(self.spec.workdir)
        if problem is not None:
            raise ConfigurationError(f"--workdir {self.spec.workdir}: cannot use it: {problem}")
        running = [r for r in recorded_processes(self.spec.workdir) if r.pid != os.getpid() and r.alive()]
        if running:
            pids = " ".join(str(record.pid) for record in running)
            raise ConfigurationError(
                f"--workdir {self.spec.workdir}: a simulated cluster still runs there (pid {pids}); "
                f"stop it with `migdra sim down --workdir {self.spec.workdir}`"
            )
        try:
            parse_sim_gpus(self.spec.gpus)
        except ValueError as exc:
            raise ConfigurationError(f"--gpus {self.spec.gpus}: {exc}") from exc
        if not self.spec.gpus:
            raise ConfigurationError("--gpus: give at least one MODEL:COUNT, e.g. H100-SXM5-80GB:4")
        problem = _socket_problem(self.spec)
        if problem is not None:
            raise ConfigurationError(problem)
        seen: set[str] = set()
        for node, gpus in self.spec.node_gpus:
            flag = f"--node-gpus {node}={gpus}"
            if node not in self.spec.node_names():
                raise ConfigurationError(f"{flag}: there is no node {node!r} (nodes node-1 … node-{self.spec.nodes})")
            if node in seen:
                raise ConfigurationError(f"{flag}: {node} is given twice; give each node's GPUs once")
            seen.add(node)
            if not gpus:
                raise ConfigurationError(f"{flag}: give at least one MODEL:COUNT, e.g. {node}=A100-SXM4-40GB:2")
            try:
                parse_sim_gpus(gpus)
            except ValueError as exc:
                raise ConfigurationError(f"{flag}: {exc}") from exc
        for node in self.spec.real_nodes:
            if node not in self.spec.node_names():
                raise ConfigurationError(
                    f"--real-node {node}: there is no node {node!r} (nodes node-1 … node-{self.spec.nodes})"
                )
        if len(set(self.spec.real_nodes)) > 1:
            raise ConfigurationError(
                f"--real-node {self.spec.real_nodes[1]}: one real node per host (two kubelets would share "
                "/var/lib/kubelet/device-plugins); run the other nodes simulated"
            )
        if self.spec.real_nodes and (problem := real_node_problem()):
            raise ConfigurationError(f"--real-node {self.spec.real_nodes[0]}: {problem}")
        for node, name, _value in self.spec.plugin_env:
            if node not in self.spec.node_names():
                raise ConfigurationError(
                    f"--plugin-env {node}:{name}=...: there is no node {node!r} (nodes node-1 … node-{self.spec.nodes})"
                )
        deviceclass_documents(self.spec.deviceclass_dir, self.spec.driver_name)

    def start(self, timeout: float = READY_TIMEOUT_SECONDS, interrupt: threading.Event | None = None) -> Path | None:
        """Start every part; returns the kubeconfig once every node's slices are published, or None
        when ``interrupt`` was set meanwhile (SIGTERM while starting: the caller stops what started)."""
        self.check()
        self.spec.workdir.mkdir(parents=True, exist_ok=True)
        # The API server keeps nothing across runs, so a previous run's simulated GPUs (with its MIG
        # instances), plugin checkpoints, CDI specs and logs would describe claims that no longer exist.
        restore_real_nodes(self.spec.workdir)  # a killed cluster's real nodes: their mounts, bridge, sysctls
        shutil.rmtree(self.spec.workdir / "nodes", ignore_errors=True)
        interrupt = interrupt or threading.Event()
        self.control_plane = self._new_control_plane()
        kubeconfig = self.control_plane.start(interrupt)
        if kubeconfig is None:
            return None
        self.client = Client(kubeconfig)
        documents = deviceclass_documents(self.spec.deviceclass_dir, self.spec.driver_name)
        for document in documents:
            self.client.create(DEVICE_CLASSES, document)
        self.progress(f"installed {len(documents)} DeviceClasses")
        for node in self.spec.node_names():
            if node in self.spec.real_nodes:
                self.real_nodes[node] = self._start_real_node(node)
                continue
            layout = node_layout(self.spec, node)
            layout["registry"].mkdir(parents=True, exist_ok=True)
            kubelet = Kubelet(self.client, node, layout["registry"], wipe_delay=self.spec.wipe_delay)
            kubelet.start()
            self.kubelets[node] = kubelet
        if not self._wait_real_nodes_registered(timeout, interrupt):
            return None
        stand_ins = dict.fromkeys(self.real_nodes, TEST_IMAGE)
        self.control_plane.grant(self.client, self.spec.node_names(), stand_ins)
        self.progress("starting the reservation controller")
        self.reservation_controller = ControllerProcess(
            self.spec, self.control_plane.controller_kubeconfig(), self.control_plane.lease_namespace, self.progress
        )
        self.reservation_controller.start()
        for node in self.spec.node_names():
            self.progress(f"starting the kubelet plugin of {node} ({self.spec.gpus_of(node)})")
            real = self.real_nodes.get(node)
            kubelet_paths = (
                {
                    "registry": real.plugins_registry,
                    "plugin": real.plugin_dir(self.spec.driver_name),
                    "cdi": real.cdi_dir,
                    "dev_root": real.dev_root,
                    "driver_root": real.driver_root,
                }
                if real is not None
                else None
            )
            plugin = PluginProcess(
                self.spec, node, self.control_plane.plugin_kubeconfig(node), self.progress, kubelet_paths
            )
            plugin.start()
            self.plugins[node] = plugin
        if not self._wait_published(timeout, interrupt):
            return None
        return self.kubeconfig

    def _start_real_node(self, node: str) -> RealNode:
        from dra_driver.nvml.settings import parse_sim_gpus  # noqa: PLC0415 -- loads the MIG catalog

        assert self.control_plane is not None
        kubelet = self.control_plane.binaries.path("kubelet")
        if not kubelet.is_file():
            version = self.control_plane.binaries.version
            raise ConfigurationError(
                f"--real-node {node}: no kubelet for {version} in {kubelet.parent}; build it with "
                f"`make node NODE_VERSIONS={version.lstrip('v').rsplit('.', 1)[0]}`"
            )
        number = self.spec.node_names().index(node) + 1
        control_plane = self.control_plane
        real = RealNode(
            RealNodeSpec(
                name=node,
                directory=self.spec.node_dir(node) / REAL_NODE_DIR,
                kubelet=kubelet,
                node_bin=NODE_TOOLS_DIR,
                client_ca=control_plane.ca_cert,
                kubelet_kubeconfig_writer=lambda path: control_plane.write_node_kubeconfig(node, path),
                network=NodeNetwork(bridge=f"migdra-{node}"[:15], subnet=f"10.244.{number}.0/24"),
                gpu_count=len(parse_sim_gpus(self.spec.gpus_of(node))),
            ),
            self.progress,
        )
        real.start()
        return real

    def _wait_real_nodes_registered(self, timeout: float, interrupt: threading.Event) -> bool:
        """Until each real node's kubelet has created its Node (its plugin's token is bound to a Pod there)."""
        assert self.client is not None
        deadline = time.monotonic() + timeout
        waiting = set(self.real_nodes)
        while waiting:
            for node in sorted(waiting):
                if self.client.get(NODES, None, node) is not None:
                    waiting.discard(node)
                    self.progress(f"{node}: registered by its kubelet (real node)")
            for node, real in self.real_nodes.items():
                if node in waiting and real.kubelet is not None and real.kubelet.restarts >= 2:
                    raise ConfigurationError(
                        f"the kubelet of {node} keeps exiting; its log:\n{real.kubelet.log_tail()}"
                    )
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise ConfigurationError(f"timed out after {timeout:g} s waiting for the kubelets of {sorted(waiting)}")
            if interrupt.wait(0.1):
                return False
        return True

    def _new_control_plane(self) -> KubeControlPlane:
        from migdra_devcluster.upstream.access import render_chart_access  # noqa: PLC0415
        from migdra_devcluster.upstream.binaries import ensure_binaries  # noqa: PLC0415
        from migdra_devcluster.upstream.controlplane import KubeControlPlane  # noqa: PLC0415

        binaries = ensure_binaries(self.spec.kube_bin_dir, self.spec.kube_version, self.progress)
        access = render_chart_access(self.spec.driver_name, self.spec.realize_before_bind)
        return KubeControlPlane(self.spec.workdir, binaries, access, self.progress)

    def _wait_published(self, timeout: float, interrupt: threading.Event) -> bool:
        assert self.client is not None
        deadline = time.monotonic() + timeout
        waiting = set(self.spec.node_names())
        while waiting:
            for node in sorted(waiting):
                if self._pool_complete(node) and (node not in self.real_nodes or self.plugins[node].registered()):
                    waiting.discard(node)
                    self.progress(f"{node}: ResourceSlices published")
            for node, plugin in self.plugins.items():
                status = plugin.exited()
                if node in waiting and status is not None and plugin.restarts >= 2:
                    raise ConfigurationError(
                        f"the kubelet plugin of {node} keeps exiting (status {status}); its log:\n{plugin.log_tail()}"
                    )
            if not waiting:
                return True
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"timed out after {timeout:g} s waiting for the ResourceSlices of {', '.join(sorted(waiting))}"
                )
            if interrupt.wait(0.1):
                return False
        return True

    def _pool_complete(self, node: str) -> bool:
        assert self.client is not None
        slices, _ = self.client.list(SLICES, field_selector=f"spec.nodeName={node},spec.driver={self.spec.driver_name}")
        if not slices:
            return False
        generation = max(int(s["spec"]["pool"].get("generation", 0)) for s in slices)
        current = [s for s in slices if int(s["spec"]["pool"].get("generation", 0)) == generation]
        return len(current) == int(current[0]["spec"]["pool"].get("resourceSliceCount", 1))

    def serve_requests(self) -> None:
        """Carry out what ``migdra sim roll`` asked for (:mod:`migdra_devcluster.control`)."""
        assert self.client is not None
        for request in pending_requests(self.spec.workdir):
            if request.action != "roll" or request.node not in self.plugins:
                result = Answer(False, f"no such request: {request.action} of node {request.node!r}")
            else:
                try:
                    result = Answer(True, self.roll_plugin(request.node))
                except ConfigurationError as exc:
                    result = Answer(False, str(exc))
            answer(self.spec.workdir, request, result)

    def roll_plugin(self, node: str, timeout: float = ROLL_TIMEOUT_S) -> str:
        """A side-by-side rollout of ``node``'s plugin, as a DaemonSet with ``maxSurge`` does it: a new
        process in rolling-update mode (its sockets named for a new pod UID) starts beside the old one,
        the kubelet registers it (the newest registered instance serves), and only then is the old one
        stopped; the new process takes the old one's pid file.  Returns what happened, in one line."""
        old = self.plugins[node]
        self._rollouts += 1
        pod_uid = f"r{self._rollouts}"  # short: unix socket paths are limited to 107 bytes
        before = old.registrations()
        new = PluginProcess(self.spec, node, old.kubeconfig, self.progress, old.paths, pod_uid=pod_uid)
        self.progress(f"{node}: rolling its plugin: starting the new one ({pod_uid}) beside the old one")
        new.start()
        deadline = time.monotonic() + timeout
        while new.registrations() <= before:
            if new.restarts >= 2 or time.monotonic() > deadline:
                new.stop()
                raise ConfigurationError(
                    f"the new plugin of {node} was not registered by its kubelet within {timeout:g} s "
                    f"(it keeps the old one); its log:\n{new.log_tail()}"
                )
            time.sleep(0.1)
        old_pid = old.process.pid if old.process is not None else None
        old.stop()
        new.take_pid_file(old.paths["pid"])
        self.plugins[node] = new
        message = f"{node}: plugin rolled: pid {old_pid} stopped, pid {new.process.pid if new.process else None} serves"
        self.progress(message)
        return message

    def stop(self) -> None:
        """Stop everything that was started, in reverse order; safe to call twice."""
        for plugin in self.plugins.values():
            plugin.stop()
        if self.reservation_controller is not None:
            self.reservation_controller.stop()
            self.reservation_controller = None
        for kubelet in self.kubelets.values():
            kubelet.stop()
        for real in self.real_nodes.values():
            real.stop()
        if self.client is not None:
            self.client.close()
        if self.control_plane is not None:
            self.control_plane.stop()
        self.plugins.clear()
        self.kubelets.clear()
        self.real_nodes.clear()
        self.control_plane = self.client = None
