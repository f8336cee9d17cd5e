"""``migdra sim``: start pieces of the development cluster as processes (for the demo and tests).

The product's CLI finds this group by the ``migdra.commands`` entry point; only presentation and start-up live
here, the servers are the rest of :mod:`migdra_devcluster`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import click

from dra_driver.errors import ConfigurationError
from dra_driver.nvml.types import NvmlEventType


@click.group()
def sim() -> None:
    """Local stand-ins for cluster components (never for production)."""


@sim.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="directory for the kubeconfig, each node's simulated GPUs, sockets and logs (kept short: sockets live here)",
)
@click.option("--nodes", type=click.IntRange(min=1, max=64), default=1, show_default=True, help="nodes node-1 … node-N")
@click.option(
    "--gpus",
    default="H100-SXM5-80GB:4",
    show_default=True,
    metavar="MODEL:COUNT[,MODEL:COUNT]",
    help="simulated GPUs of every node (but those given --node-gpus)",
)
@click.option(
    "--node-gpus",
    "node_gpus",
    multiple=True,
    metavar="NODE=MODEL:COUNT[,MODEL:COUNT]",
    help="simulated GPUs of one node instead of --gpus, e.g. node-2=A100-SXM4-40GB:2,A30:1; repeatable",
)
@click.option("--driver-name", default="gpu.migdra.io", show_default=True, help="DRA driver name")
@click.option(
    "--realize-before-bind",
    is_flag=True,
    help="run the plugins with --realize-before-bind: MIG instances are created before pods are bound",
)
@click.option(
    "--shared-devices",
    is_flag=True,
    help="publish shared GPU-instance devices (the plugins' device config says sharedDevices: true), so claims of "
    "mig-shared.migdra.io can share one GPU instance",
)
@click.option(
    "--plugin-env",
    "plugin_env",
    multiple=True,
    metavar="NODE:NAME=VALUE",
    help="an environment variable of one node's plugin, e.g. node-1:MIGDRA_SIM_FAULTS='<fault plan>'; repeatable",
)
@click.option(
    "--kube-bin-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="MIGDRA_KUBE_BIN_DIR",
    default=None,
    help="the directory of etcd and the kube-* binaries [default: .tools/kube/<version>/bin, built on first use]",
)
@click.option(
    "--kube-version",
    default=None,
    metavar="VERSION",
    help="which Kubernetes version (1.36, v1.36.5), built first if it is not [default: the newest built, else 1.36]",
)
@click.option(
    "--real-node",
    "real_nodes",
    multiple=True,
    metavar="NODE",
    help="run NODE as a real node: the upstream kubelet, containerd with CDI and runc (root; `make node`); "
    "one per host (docs/real-node.md)",
)
def up(
    workdir: Path,
    nodes: int,
    gpus: str,
    node_gpus: tuple[str, ...],
    driver_name: str,
    realize_before_bind: bool,
    shared_devices: bool,
    plugin_env: tuple[str, ...],
    kube_bin_dir: Path | None,
    kube_version: str | None,
    real_nodes: tuple[str, ...],
) -> None:
    """Run a simulated cluster: the upstream control plane (etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler; built on first use, as `make kube` does), DeviceClasses, migdra's controller, and per
    node a simulated kubelet and a `migdra kubelet-plugin` process on simulated GPUs (docs/local-cluster.md).

    Prints `ready kubeconfig=<path>` on stdout once every node's ResourceSlices are published, then
    runs until SIGINT or SIGTERM (or `migdra sim down --workdir DIR`).
    """
    from migdra_devcluster.cluster import ClusterSpec, LocalCluster  # noqa: PLC0415 -- keep --help light
    from migdra_devcluster.supervision import SUPERVISOR_PID, record_process  # noqa: PLC0415

    workdir = workdir.absolute()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    requested = threading.Event()  # SIGUSR1: `migdra sim roll` left a request (migdra_devcluster.control)

    def on_request(signum: int, frame: FrameType | None) -> None:
        requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_request)

    def progress(message: str) -> None:
        click.echo(f"sim: {message}", err=True)

    spec = ClusterSpec(
        workdir,
        nodes,
        gpus,
        driver_name=driver_name,
        realize_before_bind=realize_before_bind,
        shared_devices=shared_devices,
        plugin_env=tuple(_parse_plugin_env(item) for item in plugin_env),
        node_gpus=tuple(_parse_node_gpus(item) for item in node_gpus),
        kube_bin_dir=kube_bin_dir.absolute() if kube_bin_dir is not None else None,
        kube_version=kube_version,
        real_nodes=real_nodes,
    )
    cluster = LocalCluster(spec, progress)
    cluster.check()
    workdir.mkdir(parents=True, exist_ok=True)
    pid_file = workdir / SUPERVISOR_PID
    record_process(pid_file, os.getpid())
    try:
        kubeconfig = cluster.start(interrupt=stop)
        if kubeconfig is not None:
            click.echo(f"ready kubeconfig={kubeconfig}")
            sys.stdout.flush()
            while not stop.wait(0.2):
                if requested.is_set():
                    requested.clear()
                    cluster.serve_requests()
        progress("stopping")
    finally:
        cluster.stop()
        pid_file.unlink(missing_ok=True)


def _parse_plugin_env(item: str) -> tuple[str, str, str]:
    """``node-1:NAME=VALUE`` -> (node, name, value)."""
    node, colon, assignment = item.partition(":")
    name, equals, value = assignment.partition("=")
    if not colon or not equals or not node or not name:
        raise ConfigurationError(f"--plugin-env {item!r}: expected NODE:NAME=VALUE, e.g. node-1:MIGDRA_SIM_FAULTS=...")
    return node, name, value


def _parse_node_gpus(item: str) -> tuple[str, str]:
    """``node-2=A100-SXM4-40GB:2`` -> (node, GPUs); the GPUs are checked with the cluster's other inputs."""
    node, equals, gpus = item.partition("=")
    if not equals or not node:
        raise ConfigurationError(
            f"--node-gpus {item!r}: expected NODE=MODEL:COUNT[,MODEL:COUNT], e.g. node-2=A100-SXM4-40GB:2"
        )
    return node, gpus


@sim.command()
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), required=True)
def down(workdir: Path) -> None:
    """Stop the simulated cluster running in --workdir (and any plugin process it left behind)."""
    from migdra_devcluster.realnode.node import restore_real_nodes  # noqa: PLC0415
    from migdra_devcluster.supervision import stop_recorded  # noqa: PLC0415

    stopped = stop_recorded(workdir.absolute())
    if stopped:
        click.echo(f"stopped {len(stopped)} process(es): {' '.join(str(p) for p in stopped)}", err=True)
    else:
        click.echo(f"nothing was running in {workdir}", err=True)
    restored = restore_real_nodes(workdir.absolute())
    if restored:
        click.echo(f"restored the host after the real node(s) {' '.join(restored)}", err=True)


@sim.command()
@click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), required=True, help="the cluster's directory"
)
@click.argument("node")
@click.option("--timeout", type=click.FloatRange(min=1), default=180.0, show_default=True, help="seconds to wait")
def roll(workdir: Path, node: str, timeout: float) -> None:
    """Roll NODE's plugin side by side, as a DaemonSet update with maxSurge does: a new process starts beside
    the old one, its kubelet registers it, then the old one stops (docs/real-node.md)."""
    from migdra_devcluster.control import wait_answer, write_request  # noqa: PLC0415
    from migdra_devcluster.supervision import SUPERVISOR_PID, recorded_processes  # noqa: PLC0415

    workdir = workdir.absolute()
    supervisor = next((p for p in recorded_processes(workdir) if p.path.name == SUPERVISOR_PID), None)
    if supervisor is None or not supervisor.alive():
        raise ConfigurationError(f"--workdir {workdir}: no migdra sim up is running there")
    if not (workdir / "nodes" / node).is_dir():
        raise ConfigurationError(f"{node}: the cluster in {workdir} has no such node")
    request = write_request(workdir, "roll", node)
    os.kill(supervisor.pid, signal.SIGUSR1)
    result = wait_answer(workdir, request, timeout)
    if result is None:
        raise ConfigurationError(f"migdra sim up in {workdir} did not answer within {timeout:g} s")
    if not result.ok:
        raise ConfigurationError(result.message)
    click.echo(result.message)


@sim.command()
@click.option(
    "--state", "state_file", type=click.Path(dir_okay=False, path_type=Path), required=True, help="simulator state file"
)
@click.option("--gpu", required=True, metavar="INDEX|UUID", help="the GPU the event happens on")
@click.option("--xid", type=click.IntRange(min=0), default=None, help="an XID critical error with this XID")
@click.option(
    "--event",
    type=click.Choice([kind.value for kind in NvmlEventType]),
    default="xid",
    show_default=True,
    help="the kind of NVML event",
)
@click.option("--gpu-instance", type=click.IntRange(min=0), default=None, help="attribute it to this GPU instance ID")
@click.option("--compute-instance", type=click.IntRange(min=0), default=None, help="... and this compute instance ID")
def xid(
    state_file: Path, gpu: str, xid: int | None, event: str, gpu_instance: int | None, compute_instance: int | None
) -> None:
    """Make an NVML event happen on a simulated GPU: the plugin's event set returns it (any process)."""
    from dra_driver.nvml.sim import SimulatedHardware, SimulatorError  # noqa: PLC0415 -- keep `migdra --help` light

    if event == "xid" and xid is None:
        raise ConfigurationError("--xid is required for --event xid: give the XID number, e.g. --xid 79")
    if event != "xid" and xid is not None:
        raise ConfigurationError(f"--xid goes only with --event xid, not --event {event}")
    if compute_instance is not None and gpu_instance is None:
        raise ConfigurationError("--compute-instance needs --gpu-instance")
    if not state_file.is_file():
        raise ConfigurationError(f"--state {state_file}: no such simulator state file")
    target: int | str = int(gpu) if gpu.isdigit() else gpu
    try:
        happened = SimulatedHardware(state_file).inject_event(target, event, xid or 0, gpu_instance, compute_instance)
    except (IndexError, SimulatorError) as exc:
        raise ConfigurationError(f"--gpu {gpu}: {exc}") from exc
    click.echo(f"event {happened.serial}: {event}{f' {xid}' if xid is not None else ''} on GPU {happened.gpu_index}")
