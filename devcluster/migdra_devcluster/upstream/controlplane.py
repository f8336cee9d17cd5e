"""Starting and stopping the upstream control plane: etcd, then kube-apiserver, then
kube-controller-manager and kube-scheduler, each a supervised process of ``sim up`` (restarted when it
exits, as a static pod's container is), each waited for on its own health endpoint.

Why wait on health endpoints rather than on time: on a busy machine kube-apiserver may take tens of
seconds to open its port; its ``/readyz`` says when its post-start hooks (RBAC bootstrap policy, system
namespaces, priority classes) are done, which is what the next steps need.
"""

from __future__ import annotations

import shutil
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_driver.errors import ConfigurationError
from dra_driver.kube.client import Client
from migdra_devcluster.kubeconfig import write_kubeconfig
from migdra_devcluster.ports import free_port
from migdra_devcluster.supervision import SupervisedProcess
from migdra_devcluster.upstream.access import (
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNTS,
    ChartAccess,
    PluginPodKeeper,
    controller_kubeconfig_path,
    grant_chart_access,
    plugin_kubeconfig_path,
    write_component_kubeconfigs,
)
from migdra_devcluster.upstream.binaries import KubeBinaries
from migdra_devcluster.upstream.components import (
    AUDIT_POLICY,
    KubeFiles,
    Ports,
    build_apiserver_argv,
    build_controller_manager_argv,
    build_etcd_argv,
    build_scheduler_argv,
)
from migdra_devcluster.upstream.pki import write_cluster_pki

START_TIMEOUT_SECONDS = 180.0
"""For each component to become healthy: kube-apiserver's first start on a loaded two-core machine has
been seen to take a minute."""
ADMIN_USER = "migdra-sim-admin"
ADMIN_GROUP = "system:masters"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"


class UpstreamProcess(SupervisedProcess):
    """One upstream binary with a fixed command line."""

    def __init__(self, name: str, command: list[str], files: KubeFiles, progress: Callable[[str], None]) -> None:
        super().__init__(name, files.log(name), files.pid(name), progress)
        self._command = command

    def argv(self) -> list[str]:
        return list(self._command)


def write_audit_policy(files: KubeFiles) -> None:
    """The policy file ``--audit-policy-file`` names, and an empty log (a new cluster's requests only)."""
    files.directory.mkdir(parents=True, exist_ok=True)
    files.audit_policy.write_text(yaml.safe_dump(dict(AUDIT_POLICY), sort_keys=False))
    files.audit_log.unlink(missing_ok=True)


def wait_healthy(
    process: UpstreamProcess,
    url: str,
    context: ssl.SSLContext | None,
    interrupt: threading.Event | None = None,
    timeout: float = START_TIMEOUT_SECONDS,
) -> bool:
    """Poll the component's health ``url`` until it answers 200 (False when ``interrupt`` is set); a
    component that keeps exiting or never gets healthy is one error with the end of its log."""
    interrupt = interrupt or threading.Event()
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as answer:
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, OSError, TimeoutError):
            pass
        if process.exited() is not None and process.restarts >= 2:
            raise ConfigurationError(
                f"{process.name} keeps exiting (status {process.exited()}); the end of {process.log_path}:\n"
                f"{process.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"{process.name} not healthy at {url} after {timeout:g} s; the end of "
                f"{process.log_path}:\n{process.log_tail()}"
            )
        if interrupt.wait(0.25):
            return False


@dataclass(frozen=True)
class Component:
    """One upstream process to start: its command line, and the health endpoint that says it is up."""

    name: str
    argv: list[str]
    health_url: str
    context: ssl.SSLContext | None  # how to verify the endpoint's certificate; None: plain HTTP


def build_store_and_apiserver(binaries: KubeBinaries, files: KubeFiles, ports: Ports, ca_cert: Path) -> list[Component]:
    """etcd, then kube-apiserver with the development cluster's flags: the start of every upstream control
    plane (:class:`UpstreamControlPlane`), in that order."""
    return [
        Component(
            "etcd",
            build_etcd_argv(binaries.path("etcd"), files, ports),
            f"http://127.0.0.1:{ports.etcd_client}/health",
            None,
        ),
        Component(
            "kube-apiserver",
            build_apiserver_argv(binaries.path("kube-apiserver"), files, ports),
            f"https://127.0.0.1:{ports.apiserver}/readyz",
            ssl.create_default_context(cafile=str(ca_cert)),
        ),
    ]


@dataclass(frozen=True)
class ControlPlaneShape:
    """What runs beside etcd and kube-apiserver.  ``sim up`` runs everything; the tests' API server
    nothing else (a test of one component wants the API server's answers, not other writers); the
    scheduler benchmarks kube-scheduler alone, with its profiling endpoint and more client QPS."""

    controller_manager: bool = True
    scheduler: bool = True
    scheduler_profiling: bool = False  # its /debug/pprof endpoints (off in sim up, as in a cluster)
    scheduler_flags: tuple[str, ...] = ()  # appended to sim up's (e.g. --kube-api-qps)


SIM_UP_SHAPE = ControlPlaneShape(scheduler_flags=("--v=2",))
"""What ``sim up`` runs: everything, kube-scheduler at log level 2 -- each pod it binds, and each it cannot
place with why ("Unable to schedule pod; no fit; waiting"), is a line of ``kube/kube-scheduler.log``, where
a user (or a test that timed out) reads why a pod waits.  The benchmarks keep level 0."""


def _quiet(line: str) -> None:
    """Progress lines nobody asked for: the processes' logs are in the work directory."""


class UpstreamControlPlane:
    """The one way migdra starts an upstream control plane -- ``sim up``, the tests' API server and the
    scheduler benchmarks all start it here, with the same flags: the cluster's PKI, the admin kubeconfig
    (and ``admin.crt``/``admin.key`` for raw HTTPS), each component's kubeconfig, the audit policy; etcd,
    then kube-apiserver, then kube-controller-manager and kube-scheduler together, each waited for on its
    health endpoint (:func:`wait_healthy`); :meth:`stop` stops them in reverse order.  One component may
    be stopped and started again on the same port (an API outage: :meth:`stop_component`)."""

    def __init__(
        self,
        workdir: Path,
        binaries: KubeBinaries,
        shape: ControlPlaneShape | None = None,
        progress: Callable[[str], None] = _quiet,
        timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        self.workdir = workdir
        self.binaries = binaries
        self.shape = shape or ControlPlaneShape()
        self.progress = progress
        self.timeout = timeout
        self.files = KubeFiles(workdir / "kube")
        self.kubeconfig = workdir / "kubeconfig"
        self.ports = Ports(free_port(), free_port(), free_port(), free_port(), free_port())
        self.url = f"https://127.0.0.1:{self.ports.apiserver}"
        self.components: dict[str, Component] = {}
        self.processes: dict[str, UpstreamProcess] = {}

    def start(self, interrupt: threading.Event | None = None) -> bool:
        """Write the files and start every component of the shape; False when ``interrupt`` came first."""
        self.files.directory.mkdir(parents=True, exist_ok=True)
        # A new cluster starts afresh: the nodes' simulated GPUs are new too, so no object may outlive them.
        shutil.rmtree(self.files.etcd_data, ignore_errors=True)
        pki = write_cluster_pki(self.files.pki.directory)
        write_audit_policy(self.files)
        ca = pki.ca_pem()
        admin = pki.client_certificate(ADMIN_USER, (ADMIN_GROUP,))
        write_kubeconfig(self.kubeconfig, self.url, None, ca, admin)
        (self.workdir / "admin.crt").write_bytes(admin.cert_pem)
        (self.workdir / "admin.key").write_bytes(admin.key_pem)
        for name, user in (("kube-controller-manager", CONTROLLER_MANAGER_USER), ("kube-scheduler", SCHEDULER_USER)):
            write_kubeconfig(self.files.kubeconfig(name), self.url, None, ca, pki.client_certificate(user))
        for core in build_store_and_apiserver(self.binaries, self.files, self.ports, pki.ca_cert):
            self.components[core.name] = core
            if not self._start(core, interrupt):
                return False
        later = self._controllers()
        for component in later:  # both at once: neither needs the other
            self.components[component.name] = component
            self._spawn(component)
        return all(
            wait_healthy(self.processes[c.name], c.health_url, c.context, interrupt, self.timeout) for c in later
        )

    def _controllers(self) -> list[Component]:
        bins, files, ports, shape = self.binaries, self.files, self.ports, self.shape
        # Both serve with a certificate they made themselves at start-up: nothing to verify it against.
        unverified = ssl._create_unverified_context()
        found = []
        if shape.controller_manager:
            argv = build_controller_manager_argv(bins.path("kube-controller-manager"), files, ports)
            health = f"https://127.0.0.1:{ports.controller_manager}/healthz"
            found.append(Component("kube-controller-manager", argv, health, unverified))
        if shape.scheduler:
            argv = build_scheduler_argv(bins.path("kube-scheduler"), files, ports)
            if shape.scheduler_profiling:
                argv = ["--profiling=true" if flag == "--profiling=false" else flag for flag in argv]
            health = f"https://127.0.0.1:{ports.scheduler}/healthz"
            found.append(Component("kube-scheduler", [*argv, *shape.scheduler_flags], health, unverified))
        return found

    def _spawn(self, component: Component) -> UpstreamProcess:
        self.progress(f"starting {component.name} ({self.binaries.version})")
        self.files.log(component.name).unlink(missing_ok=True)
        process = UpstreamProcess(component.name, component.argv, self.files, self.progress)
        process.start()
        self.processes[component.name] = process
        return process

    def _start(self, component: Component, interrupt: threading.Event | None) -> bool:
        process = self._spawn(component)
        return wait_healthy(process, component.health_url, component.context, interrupt, self.timeout)

    def stop_component(self, name: str) -> None:
        """``name`` goes away (the others stay): an outage, until :meth:`start_component`."""
        self.processes[name].stop()

    def start_component(self, name: str) -> None:
        """``name`` again, with the same command line (the same port), waited for until healthy."""
        self._start(self.components[name], None)

    @property
    def pids(self) -> dict[str, int]:
        """The running components' process IDs (the benchmarks read their CPU and memory)."""
        return {name: p.process.pid for name, p in self.processes.items() if p.process is not None}

    def stop(self) -> None:
        """Stop every component, the last started first; safe to call twice."""
        for process in reversed(list(self.processes.values())):
            process.stop()
        self.processes.clear()


class KubeControlPlane:
    """The control plane of one ``sim up`` (every component: :class:`UpstreamControlPlane`), and migdra's
    components' credentials from the Helm chart (:mod:`.access`)."""

    lease_namespace = RELEASE_NAMESPACE

    def __init__(
        self,
        workdir: Path,
        binaries: KubeBinaries,
        access: ChartAccess,
        progress: Callable[[str], None],
    ) -> None:
        self.workdir = workdir
        self.binaries = binaries
        self.access = access
        self.progress = progress
        self.upstream = UpstreamControlPlane(workdir, binaries, SIM_UP_SHAPE, progress)
        self.keeper: PluginPodKeeper | None = None

    @property
    def files(self) -> KubeFiles:
        return self.upstream.files

    @property
    def url(self) -> str:
        return self.upstream.url

    def start(self, interrupt: threading.Event) -> Path | None:
        """Start every component; the admin kubeconfig once all are healthy and the chart's access is
        granted (None if interrupted)."""
        if not self.upstream.start(interrupt):
            return None
        client = Client(self.upstream.kubeconfig)
        try:
            if not self._wait_default_service_account(client, interrupt):
                return None
            grant_chart_access(client, self.access)
        finally:
            client.close()
        return self.upstream.kubeconfig

    def _wait_default_service_account(self, client: Client, interrupt: threading.Event) -> bool:
        """Pods are refused until the serviceaccount controller made ``default/default``."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while client.get(SERVICE_ACCOUNTS, "default", "default") is None:
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    "kube-controller-manager made no ServiceAccount default/default; the end of its log:\n"
                    + self.files.log("kube-controller-manager").read_text(errors="replace")[-2000:]
                )
            if interrupt.wait(0.25):
                return False
        return True

    def grant(self, client: Client, nodes: list[str], stand_ins: Mapping[str, str] | None = None) -> None:
        """Each node's plugin Pod and token, and the controller's token (once the Nodes exist: a token
        bound to a Pod names the Pod's node); from then on a deleted plugin Pod is made again with a new
        token (:class:`PluginPodKeeper`), as the chart's DaemonSet would.  ``stand_ins``: node -> image of
        the stand-in container a real node's kubelet runs in the plugin's Pod (:func:`plugin_pod`)."""
        ca = self.files.pki.ca_pem()
        write_component_kubeconfigs(client, self.access, nodes, self.workdir, self.url, ca, stand_ins)
        self.keeper = PluginPodKeeper(client, self.access, self.workdir, nodes, self.progress, stand_ins=stand_ins)
        self.keeper.start()

    def write_node_kubeconfig(self, node: str, path: Path) -> None:
        """A real node's kubelet credentials: a client certificate for ``system:node:<node>`` in
        ``system:nodes``, so the Node authorizer and NodeRestriction judge it as any kubelet."""
        pki = self.files.pki
        certificate = pki.client_certificate(f"system:node:{node}", ("system:nodes",))
        write_kubeconfig(path, self.url, None, pki.ca_pem(), certificate)

    @property
    def ca_cert(self) -> Path:
        return self.files.pki.ca_cert

    def plugin_kubeconfig(self, node: str) -> Path:
        return plugin_kubeconfig_path(self.workdir, node)

    def controller_kubeconfig(self) -> Path:
        return controller_kubeconfig_path(self.workdir)

    def stop(self) -> None:
        """Stop in reverse order (the plugin pods' keeper, the scheduler, ..., etcd last); safe to call twice."""
        if self.keeper is not None:
            self.keeper.stop()
            self.keeper = None
        self.upstream.stop()
