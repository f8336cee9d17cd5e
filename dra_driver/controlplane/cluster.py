"""A whole simulated cluster on one machine: what ``migdra sim up`` runs and ``migdra sim down`` stops.

Parts, started in this order and stopped in reverse:

1. the local API server (in this process), its kubeconfig at ``<workdir>/kubeconfig``;
2. the DeviceClasses of ``deviceclasses/`` (and ``examples/``), with the driver name substituted in
   their CEL selectors when it is not the default, as the Helm chart does;
3. the resourceclaim controller and the scheduler (threads of this process), and migdra's reservation
   controller as its own **process** (``migdra controller``, leader election on, log
   ``<workdir>/controller.log``);
4. per node ``node-1 … node-N``: a kubelet (threads of this process; it creates the Node object and
   wipes the node's slices, as kubelet does at start-up) and the node's own ``migdra kubelet-plugin``
   **process** on its own simulated GPUs (``<workdir>/nodes/<node>/nvml-state.json``), registered
   through real unix sockets.  A plugin process that exits is started again after a short backoff,
   as a DaemonSet's pod would be.

Ready means every node's pool of ResourceSlices is published and complete.  Every process this
supervisor starts is recorded (``<workdir>/sim.pid``, ``<workdir>/controller.pid``,
``<workdir>/nodes/<node>/plugin.pid``) so that
``migdra sim down`` can stop a cluster whose supervisor was killed and leave nothing running.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.controlplane.apiserver import LocalAPIServer
from dra_driver.controlplane.claimcontroller import ClaimController
from dra_driver.controlplane.kubelet.kubelet import Kubelet
from dra_driver.controlplane.scheduler.scheduler import Scheduler
from dra_driver.devicemodel.naming import driver_name_problem
from dra_driver.durable import writable_directory_problem, write_file_atomically
from dra_driver.errors import ConfigurationError
from dra_driver.kube.client import DEVICE_CLASSES, SLICES, Client

log = logging.getLogger(__name__)

DEFAULT_DRIVER = "gpu.migdra.io"
DEVICECLASS_DIR = Path(__file__).resolve().parents[2] / "deviceclasses"
SUPERVISOR_PID = "sim.pid"
PLUGIN_PID = "plugin.pid"
CONTROLLER_PID = "controller.pid"
READY_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 15.0
_MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
_RESTART_BACKOFF = (0.5, 10.0)


@dataclass(frozen=True)
class ClusterSpec:
    """What to simulate.  ``gpus``: ``MODEL:COUNT[,MODEL:COUNT]`` per node (catalog keys or aliases)."""

    workdir: Path
    nodes: int
    gpus: str
    driver_name: str = DEFAULT_DRIVER
    seed: int = 0
    wipe_delay: float = 30.0
    deviceclass_dir: Path = DEVICECLASS_DIR
    realize_before_bind: bool = False
    # (node, variable, value): extra environment of one node's plugin (a fault plan for one node's GPUs).
    plugin_env: tuple[tuple[str, str, str], ...] = ()

    def node_names(self) -> list[str]:
        return [f"node-{number}" for number in range(1, self.nodes + 1)]

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


def substitute_driver(document: dict[str, Any], driver: str) -> dict[str, Any]:
    """A DeviceClass with ``gpu.migdra.io`` replaced by ``driver`` in its CEL selectors (never in its name)."""
    if driver == DEFAULT_DRIVER:
        return document
    for selector in (document.get("spec") or {}).get("selectors") or []:
        cel = selector.get("cel") or {}
        if "expression" in cel:
            cel["expression"] = cel["expression"].replace(DEFAULT_DRIVER, driver)
    return document


def deviceclass_documents(directory: Path, driver: str) -> list[dict[str, Any]]:
    """Every DeviceClass under ``directory`` (``*.yaml``, then ``examples/*.yaml``)."""
    if not directory.is_dir():
        raise ConfigurationError(f"DeviceClass directory {directory}: not found (run from a migdra source checkout)")
    documents = []
    for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("examples/*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "DeviceClass":
                documents.append(substitute_driver(document, driver))
    return documents


class SupervisedProcess(ABC):
    """A ``migdra`` process of the cluster, started again when it exits (until :meth:`stop`), as a
    DaemonSet's or Deployment's pod would be.  Subclasses say what to run and where it logs."""

    def __init__(
        self,
        spec: ClusterSpec,
        name: str,
        log_path: Path,
        pid_path: Path,
        kubeconfig: Path,
        progress: Callable[[str], None],
    ) -> None:
        self.spec = spec
        self.name = name
        self.kubeconfig = kubeconfig
        self.progress = progress
        self.log_path = log_path
        self.pid_path = pid_path
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line to run."""

    def env(self) -> dict[str, str]:
        """The process's environment: this one's without ``MIGDRA_*`` (its settings are its flags)."""
        return {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log_file:  # appended to by restarts; a new cluster starts it afresh
            self.process = subprocess.Popen(
                self.argv(), stdout=log_file, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        record_process(self.pid_path, self.process.pid)

    def _watch(self) -> None:
        delay = _RESTART_BACKOFF[0]
        while not self._stopping.is_set():
            process = self.process
            if process is None:
                return
            started = time.monotonic()
            while process.poll() is None:
                if self._stopping.wait(0.2):
                    return
            if self._stopping.is_set():
                return
            delay = _RESTART_BACKOFF[0] if time.monotonic() - started > 30 else min(delay * 2, _RESTART_BACKOFF[1])
            self.progress(f"{self.name} exited with status {process.returncode}; restarting it in {delay:g} s")
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            self._spawn()

    def exited(self) -> int | None:
        """The exit status of the current process, or None while it runs."""
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.pid_path.unlink(missing_ok=True)


class ControllerProcess(SupervisedProcess):
    """The reservation controller, ``migdra controller`` (leader election on, as in a cluster)."""

    def __init__(self, spec: ClusterSpec, kubeconfig: Path, progress: Callable[[str], None]) -> None:
        super().__init__(
            spec, "controller", spec.workdir / "controller.log", spec.workdir / CONTROLLER_PID, kubeconfig, progress
        )

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
            "kube-system",
            "--identity",
            "controller-0",
        ]


class PluginProcess(SupervisedProcess):
    """One node's ``migdra kubelet-plugin`` process."""

    def __init__(self, spec: ClusterSpec, node: str, kubeconfig: Path, progress: Callable[[str], None]) -> None:
        self.node = node
        self.paths = node_layout(spec, node)
        super().__init__(spec, f"plugin of {node}", self.paths["log"], self.paths["pid"], kubeconfig, progress)

    def argv(self) -> list[str]:
        migdra = str(Path(sys.executable).with_name("migdra"))
        p = self.paths
        return [
            migdra,
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
            self.spec.gpus,
            *(["--realize-before-bind"] if self.spec.realize_before_bind else []),
        ]

    def start(self) -> None:
        for key in ("registry", "plugin", "cdi", "proc"):
            self.paths[key].mkdir(parents=True, exist_ok=True)
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
        self.api: LocalAPIServer | None = None
        self.client: Client | None = None
        self.controller: ClaimController | None = None
        self.scheduler: Scheduler | None = None
        self.kubelets: dict[str, Kubelet] = {}
        self.plugins: dict[str, PluginProcess] = {}
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
                f"--driver-name {name!r}: not a DRA driver name: it {problem} (e.g. {DEFAULT_DRIVER!r})"
            )
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
        shutil.rmtree(self.spec.workdir / "nodes", ignore_errors=True)
        self.progress("starting the API server")
        self.api = LocalAPIServer()
        self.api.start()
        self.api.write_kubeconfig(self.kubeconfig)
        self.client = Client(self.kubeconfig)
        documents = deviceclass_documents(self.spec.deviceclass_dir, self.spec.driver_name)
        for document in documents:
            self.client.create(DEVICE_CLASSES, document)
        self.progress(f"installed {len(documents)} DeviceClasses")
        self.controller = ClaimController(self.client)
        self.controller.start()
        self.scheduler = Scheduler(self.client, seed=self.spec.seed)
        self.scheduler.start()
        self.progress("starting the reservation controller")
        self.reservation_controller = ControllerProcess(self.spec, self.kubeconfig, self.progress)
        self.reservation_controller.start()
        for node in self.spec.node_names():
            layout = node_layout(self.spec, node)
            layout["registry"].mkdir(parents=True, exist_ok=True)
            kubelet = Kubelet(self.client, node, layout["registry"], wipe_delay=self.spec.wipe_delay)
            kubelet.start()
            self.kubelets[node] = kubelet
        for node in self.spec.node_names():
            self.progress(f"starting the kubelet plugin of {node} ({self.spec.gpus})")
            plugin = PluginProcess(self.spec, node, self.kubeconfig, self.progress)
            plugin.start()
            self.plugins[node] = plugin
        if not self._wait_published(timeout, interrupt or threading.Event()):
            return None
        return self.kubeconfig

    def _wait_published(self, timeout: float, interrupt: threading.Event) -> bool:
        assert self.client is not None
        deadline = time.monotonic() + timeout
        waiting = set(self.spec.node_names())
        while waiting:
            for node in sorted(waiting):
                if self._pool_complete(node):
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

    def stop(self) -> None:
        """Stop everything that was started, in reverse order; safe to call twice."""
        for plugin in self.plugins.values():
            plugin.stop()
        for kubelet in self.kubelets.values():
            kubelet.stop()
        if self.reservation_controller is not None:
            self.reservation_controller.stop()
            self.reservation_controller = None
        for component in (self.scheduler, self.controller):
            if component is not None:
                component.stop()
        if self.client is not None:
            self.client.close()
        if self.api is not None:
            self.api.stop()
        self.plugins.clear()
        self.kubelets.clear()
        self.scheduler = self.controller = self.client = self.api = None


@dataclass(frozen=True)
class RecordedProcess:
    """A process a supervisor started, as its pid file says: the pid and the process's start time.

    Why the start time: pids are reused, and ``sim down`` must never signal a stranger that happens
    to have the pid of a plugin that exited long ago.
    """

    path: Path
    pid: int
    start_time: int | None

    def alive(self) -> bool:
        return process_alive(self.pid) and (self.start_time is None or process_start_time(self.pid) == self.start_time)


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def record_process(path: Path, pid: int) -> None:
    """Write ``path`` atomically (a reader never sees half a pid): ``<pid> <start time>``."""
    start = process_start_time(pid)
    write_file_atomically(path, f"{pid} {start if start is not None else ''}\n".encode(), sync=False)


def recorded_processes(workdir: Path) -> list[RecordedProcess]:
    """Every pid file a supervisor wrote under ``workdir`` (the supervisor's first)."""
    found = []
    for path in [workdir / SUPERVISOR_PID, workdir / CONTROLLER_PID, *sorted(workdir.glob(f"nodes/*/{PLUGIN_PID}"))]:
        try:
            parts = path.read_text().split()
            found.append(RecordedProcess(path, int(parts[0]), int(parts[1]) if len(parts) > 1 else None))
        except (OSError, ValueError, IndexError):
            continue
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def stop_recorded(workdir: Path, timeout: float = 30.0) -> list[int]:
    """``migdra sim down``: SIGTERM the supervisor, wait for it, then kill any plugin left behind."""
    stopped: list[int] = []
    for record in recorded_processes(workdir):
        if not record.alive():
            record.path.unlink(missing_ok=True)
            continue
        os.kill(record.pid, signal.SIGTERM)
        limit = timeout if record.path.name == SUPERVISOR_PID else STOP_TIMEOUT_SECONDS
        deadline = time.monotonic() + limit
        while record.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if record.alive():
            os.kill(record.pid, signal.SIGKILL)
        record.path.unlink(missing_ok=True)
        stopped.append(record.pid)
    return stopped
