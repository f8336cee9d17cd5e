"""The ``migdra`` command line.

Each subcommand builds its settings from flags plus environment, opens what it needs, and hands off
to library code; no logic of its own beyond presentation lives here.
"""

from __future__ import annotations

import logging
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import click

from dra_driver import __version__
from dra_driver.cli.lazy import LazyGroup
from dra_driver.cli.options import nvml_options
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError, MigdraError

SettingsT = TypeVar("SettingsT")


# Subcommand groups whose modules load only when used, so `migdra --help` and the commands defined here
# do not pay for the CEL environment or the recorder.
_LAZY_GROUPS = {
    "allocate": (
        "dra_driver.cli.allocate_command",
        "allocate_command",
        "Which devices kube-scheduler would allocate to claims on a node; or why none.",
    ),
    "bench": ("dra_driver.cli.bench_commands", "bench", "Measurements anyone can re-run (placement quality)."),
    "cel": ("dra_driver.cli.cel_commands", "cel", "Evaluate and lint DRA CEL selectors."),
    "health": (
        "dra_driver.cli.health_commands",
        "health",
        "List and clear the GPU faults that taint this node's devices (run on the node).",
    ),
    "hw": ("dra_driver.cli.hw_commands", "hw", "Record what real NVML answers (read-only); check the simulator."),
    "plan": (
        "dra_driver.cli.plan_command",
        "plan_command",
        "Will this workload mix fit these nodes? How many, which fails first and why (before deploying).",
    ),
    "status": (
        "dra_driver.cli.status_command",
        "status_command",
        "Per GPU: which memory slices hold which claim, what is realized, what still fits (from the API).",
    ),
}


# Commands of other distributions, found by entry point (dra_driver.cli.lazy.ENTRY_POINT_GROUP) when used: the
# development cluster is not part of the product, which never imports it (docs/local-cluster.md).
_ENTRY_POINT_GROUPS = {
    "sim": (
        "Local stand-ins for cluster components (never for production).",
        "the development cluster (package migdra-devcluster) is not installed; "
        "pip install 'migdra[dev]' installs it (in a source checkout: make install)",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy_commands=_LAZY_GROUPS,
    entry_point_commands=_ENTRY_POINT_GROUPS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="migdra")
@click.option("-v", "--verbose", count=True, help="more log output (-vv for debug)")
@click.option(
    "--log-format", default=None, metavar="text|json", help="json: one JSON object per line [env MIGDRA_LOG_FORMAT]"
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, log_format: str | None) -> None:
    """migdra: NVIDIA MIG as Kubernetes DRA devices."""
    from dra_driver.logs import LogSettings, configure_logging  # noqa: PLC0415 -- keep `migdra --help` light

    level = logging.WARNING - 10 * min(verbose, 2)
    ctx.obj = _settings(LogSettings, "logging", log_format=log_format)
    configure_logging(ctx.obj, level)
    if not verbose:  # urllib3 warns once per transport retry; migdra says once, in one line, what failed
        logging.getLogger("urllib3").setLevel(logging.ERROR)


@cli.command()
@nvml_options
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--all-placements/--free-only", default=True, help="list every legal placement or only free ones")
def gpus(
    nvml: str | None,
    sim_state: Path | None,
    sim_gpus: str | None,
    sim_mig_enabled: bool | None,
    output: str,
    all_placements: bool,
) -> None:
    """Show the GPUs, their MIG profiles and legal placements, and which placements are free."""
    from dra_driver.cli import inventory_view  # noqa: PLC0415 -- keep `migdra --help` free of NVML
    from dra_driver.nvml.session import open_nvml  # noqa: PLC0415
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415

    settings = build_nvml_settings(nvml=nvml, sim_state=sim_state, sim_gpus=sim_gpus, sim_mig_enabled=sim_mig_enabled)
    with open_nvml(settings) as session:
        inventory = inventory_view.read_inventory(session)
    click.echo(inventory_view.render(inventory, output, all_placements=all_placements), nl=False)


@cli.command()
@nvml_options
@click.option("--node-name", default=None, help="node (and pool) name [default: this host's name]")
@click.option("--driver-name", default=None, help=f"DRA driver name [default: {DEFAULT_DRIVER_NAME}]")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="device model configuration (YAML: driverName, profiles, excludeGpus, sharedDevices)",
)
@click.option("--exclude-gpu", multiple=True, help="leave out a GPU (UUID or PCI bus id); repeatable")
@click.option("-o", "--output", type=click.Choice(["table", "yaml", "json"]), default="table", show_default=True)
def slices(
    nvml: str | None,
    sim_state: Path | None,
    sim_gpus: str | None,
    sim_mig_enabled: bool | None,
    node_name: str | None,
    driver_name: str | None,
    config_file: Path | None,
    exclude_gpu: tuple[str, ...],
    output: str,
) -> None:
    """Print the ResourceSlices this node would publish, without a cluster."""
    from dra_driver.cli import slices_view  # noqa: PLC0415 -- keep `migdra --help` free of NVML
    from dra_driver.device_config import check_excluded_gpus_exist, load_device_model_config  # noqa: PLC0415
    from dra_driver.devicemodel.layout import render_slices  # noqa: PLC0415
    from dra_driver.devicemodel.naming import node_name_problem  # noqa: PLC0415
    from dra_driver.devicemodel.pool import build_pool  # noqa: PLC0415
    from dra_driver.nvml.inventory import read_inventory  # noqa: PLC0415
    from dra_driver.nvml.session import open_nvml  # noqa: PLC0415
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415

    settings = build_nvml_settings(nvml=nvml, sim_state=sim_state, sim_gpus=sim_gpus, sim_mig_enabled=sim_mig_enabled)
    config = load_device_model_config(config_file, driver_name=driver_name, exclude_gpus=exclude_gpu)
    node = node_name or socket.gethostname().lower()
    problem = node_name_problem(node)
    if problem is not None:
        given = "--node-name" if node_name else "this host's name (give --node-name)"
        raise ConfigurationError(f"{given} {node!r}: not a Kubernetes node name: it {problem}")
    with slices_view.garbage_collector_paused():
        with open_nvml(settings) as session:
            inventory = read_inventory(session)
        gpus = [(entry.gpu.uuid, entry.gpu.pci_bus_id) for entry in inventory.gpus]
        check_excluded_gpus_exist(config, gpus, from_flags=exclude_gpu, path=config_file)
        pool = build_pool(inventory, config)
        text = slices_view.render(render_slices(pool, node, generation=1), pool, output)
    click.echo(text, nl=False)


@cli.command("kubelet-plugin")
@nvml_options
@click.option("--node-name", default=None, help="this node's name [env MIGDRA_NODE_NAME]")
@click.option("--driver-name", default=None, help=f"DRA driver name [default: {DEFAULT_DRIVER_NAME}]")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--device-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None)
@click.option("--registry-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--plugin-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--cdi-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--plugin-data-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--device-metadata/--no-device-metadata", default=None, help="KEP-5304 device metadata files in containers"
)
@click.option(
    "--driver-root",
    type=click.Path(file_okay=False),  # str: an error quotes what was typed
    default=None,
    help="where this process reads the NVIDIA driver's files [/]",
)
@click.option(
    "--host-driver-root",
    type=click.Path(file_okay=False),  # str: an error quotes what was typed
    default=None,
    help="the driver root as the host sees it (CDI host paths) [--driver-root]",
)
@click.option(
    "--nvidia-cdi-hook-path",
    "cdi_hook_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="host path of nvidia-cdi-hook [found in the driver root]",
)
@click.option(
    "--cdi-driver-files/--no-cdi-driver-files",
    default=None,
    help="bind-mount the driver's libraries and binaries through CDI (stock CUDA images run)",
)
@click.option(
    "--dev-root",
    type=click.Path(file_okay=False),  # str: an error quotes what was typed
    default=None,
    help="host directory whose dev/ holds the /dev/nvidia* device nodes (CDI host paths) [/]",
)
@click.option(
    "--cdi-device-nodes/--no-cdi-device-nodes",
    default=None,
    help="/dev/nvidia* device nodes in the CDI specs (off on a node without them)",
)
@click.option("--pod-uid", default=None, help="rolling-update mode: socket names carry this pod UID")
@click.option("--rescan-interval", type=float, default=None, help="seconds between NVML rescans [60]")
@click.option("--cleanup-on-exit/--keep-slices-on-exit", default=None, help="delete the slices on exit")
@click.option("--metrics-address", default=None, metavar="HOST:PORT", help="serve Prometheus metrics here")
@click.option("--health/--no-health", default=None, help="serve kubelet's DRA resource-health stream")
@click.option(
    "--device-taints/--no-device-taints",
    default=None,
    help="taint the devices of faulty GPUs (NVML XIDs), kept across restarts [on; env MIGDRA_DEVICE_TAINTS]",
)
@click.option(
    "--health-clear-after",
    type=float,
    default=None,
    metavar="SECONDS",
    help="drop a fault's taint after this long without a new event; 0: never [env MIGDRA_HEALTH_CLEAR_AFTER]",
)
@click.option(
    "--health-ignored-xids",
    default=None,
    metavar="XID,...",
    help="XIDs that taint nothing [13,31,43,45,68,109; env MIGDRA_HEALTH_IGNORED_XIDS]",
)
@click.option(
    "--healthcheck-address", default=None, metavar="HOST:PORT", help="serve the gRPC liveness check here (e.g. :51515)"
)
@click.option(
    "--realize-before-bind/--no-realize-before-bind",
    default=None,
    help="create a claim's MIG instance before its pod is bound (binding conditions)",
)
@click.option(
    "--placement-policy",
    default=None,
    metavar="NAME",
    help="how devices are grouped and ordered in the slices: static or dynamic [env MIGDRA_PLACEMENT_POLICY]",
)
@click.option("--publish-only", is_flag=True, help="only publish ResourceSlices; do not serve kubelet")
def kubelet_plugin(
    nvml: str | None,
    sim_state: Path | None,
    sim_gpus: str | None,
    sim_mig_enabled: bool | None,
    node_name: str | None,
    driver_name: str | None,
    kubeconfig: Path | None,
    device_config: Path | None,
    registry_dir: Path | None,
    plugin_dir: Path | None,
    cdi_dir: Path | None,
    state_dir: Path | None,
    plugin_data_dir: Path | None,
    device_metadata: bool | None,
    driver_root: str | None,
    host_driver_root: str | None,
    cdi_hook_path: Path | None,
    cdi_driver_files: bool | None,
    dev_root: str | None,
    cdi_device_nodes: bool | None,
    pod_uid: str | None,
    rescan_interval: float | None,
    cleanup_on_exit: bool | None,
    metrics_address: str | None,
    health: bool | None,
    device_taints: bool | None,
    health_clear_after: float | None,
    health_ignored_xids: str | None,
    healthcheck_address: str | None,
    realize_before_bind: bool | None,
    placement_policy: str | None,
    publish_only: bool,
) -> None:
    """Run the node plugin: publish ResourceSlices, register with kubelet, prepare and unprepare claims."""
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415
    from dra_driver.serving import stop_on_signals  # noqa: PLC0415
    from kubeletplugin import app  # noqa: PLC0415 -- the node process is loaded only here
    from kubeletplugin.settings import PluginSettings, PrepareSettings  # noqa: PLC0415

    nvml_settings = build_nvml_settings(
        nvml=nvml, sim_state=sim_state, sim_gpus=sim_gpus, sim_mig_enabled=sim_mig_enabled
    )
    plugin = _settings(
        PluginSettings,
        "kubelet plugin",
        node_name=node_name,
        driver_name=driver_name,
        kubeconfig=kubeconfig,
        device_config=device_config,
        registry_dir=registry_dir,
        plugin_dir=plugin_dir,
        pod_uid=pod_uid,
        rescan_interval=rescan_interval,
        cleanup_on_exit=cleanup_on_exit,
        metrics_address=metrics_address,
        health=health,
        device_taints=device_taints,
        health_clear_after=health_clear_after,
        health_ignored_xids=health_ignored_xids,
        healthcheck_address=healthcheck_address,
        realize_before_bind=realize_before_bind,
        placement_policy=placement_policy,
    )
    stop = stop_on_signals()
    if publish_only:
        sys.exit(app.run_publish_only(plugin, nvml_settings, stop, _announcer()))
    prepare = _settings(
        PrepareSettings,
        "prepare",
        cdi_dir=cdi_dir,
        state_dir=state_dir,
        plugin_data_dir=plugin_data_dir,
        device_metadata=device_metadata,
        driver_root=driver_root,
        host_driver_root=host_driver_root,
        cdi_hook_path=cdi_hook_path,
        cdi_driver_files=cdi_driver_files,
        dev_root=dev_root,
        cdi_device_nodes=cdi_device_nodes,
    )
    for beside_socket in ("state_dir", "plugin_data_dir"):  # neither flag nor variable: beside dra.sock
        if beside_socket not in prepare.model_fields_set:
            prepare = prepare.model_copy(update={beside_socket: plugin.plugin_directory})
    sys.exit(app.run_plugin(plugin, prepare, nvml_settings, stop, _announcer()))


@cli.command("controller")
@click.option("--driver-name", default=None, help=f"DRA driver name [default: {DEFAULT_DRIVER_NAME}]")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--leader-elect/--no-leader-elect", default=None, help="compete for a Lease; only the holder writes")
@click.option("--lease-namespace", default=None, help="namespace of the leader-election Lease [kube-system]")
@click.option("--lease-name", default=None, help="the Lease's name [<driver name>-controller]")
@click.option("--identity", default=None, help="this replica's holder identity [host_pid]")
@click.option("--lease-duration", type=float, default=None, help="seconds a Lease is held without renewal [15]")
@click.option("--renew-deadline", type=float, default=None, help="seconds the leader may fail to renew [10]")
@click.option("--retry-period", type=float, default=None, help="seconds between acquire/renew attempts [2]")
@click.option("--resync-interval", type=float, default=None, help="seconds between full passes [60]")
@click.option("--write-qps", type=float, default=None, help="claim status writes per second, at most [20]")
@click.option("--write-burst", type=int, default=None, help="status writes allowed at once [50]")
@click.option("--metrics-address", default=None, metavar="HOST:PORT", help="serve Prometheus metrics here")
def controller(
    driver_name: str | None,
    kubeconfig: Path | None,
    leader_elect: bool | None,
    lease_namespace: str | None,
    lease_name: str | None,
    identity: str | None,
    lease_duration: float | None,
    renew_deadline: float | None,
    retry_period: float | None,
    resync_interval: float | None,
    write_qps: float | None,
    write_burst: int | None,
    metrics_address: str | None,
) -> None:
    """Run the reservation controller: every allocated claim of the driver shows its exact placement
    (docs/claim-status.md); conflicts are flagged, never deallocated."""
    from dra_driver.controller.app import run_controller  # noqa: PLC0415 -- keep `migdra --help` light
    from dra_driver.controller.settings import ControllerSettings  # noqa: PLC0415
    from dra_driver.serving import stop_on_signals  # noqa: PLC0415

    settings = _settings(
        ControllerSettings,
        "controller",
        driver_name=driver_name,
        kubeconfig=kubeconfig,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        resync_interval=resync_interval,
        write_qps=write_qps,
        write_burst=write_burst,
        metrics_address=metrics_address,
    )
    stop = stop_on_signals()
    sys.exit(run_controller(settings, stop, _announcer()))


def _announce(line: str) -> None:
    """The plugin's one line once the node is published (and served); it is quiet otherwise."""
    click.echo(line, err=True)


def _announcer() -> Callable[[str], None]:
    """:func:`_announce`, or with ``--log-format json`` the same line as a JSON log line (a log pipeline
    reads nothing else); chosen here, on the command's thread, as the line may come from another."""
    from dra_driver.logs import LogFormat, LogSettings, render_announcement  # noqa: PLC0415

    settings: LogSettings = click.get_current_context().find_root().obj  # set by the group, before any command
    if settings.log_format is LogFormat.JSON:
        return lambda line: click.echo(render_announcement(line), err=True)
    return _announce


def _settings(model: Callable[..., SettingsT], what: str, **given: object) -> SettingsT:
    """A settings group from flags (None = not given) plus ``MIGDRA_*`` variables; errors name the flag."""
    from pydantic import ValidationError  # noqa: PLC0415 -- keep `migdra --help` light

    from dra_driver.errors import describe_settings_error  # noqa: PLC0415

    try:
        return model(**{key: value for key, value in given.items() if value is not None})
    except ValidationError as exc:
        problems = describe_settings_error(exc, model, flag_fields=given.keys())
        raise ConfigurationError(f"invalid {what} settings: {problems}") from exc


# Exit statuses of the error boundary: usage errors (a flag, variable or file that cannot be used) are
# 2, like click's own usage errors and most Unix tools; every other failure is 1.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _one_line(text: str) -> str:
    """Collapse a message onto one line: a terminal user and a log scraper both read one line per error."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def _details_requested() -> bool:
    """``-v`` was given: the group callback lowered the root logger to INFO or below."""
    return logging.getLogger().isEnabledFor(logging.INFO)


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"migdra: error: {_one_line(message)}", err=True)
    sys.exit(status)


def main() -> None:
    """Console-script entry point and the one error boundary of every ``migdra`` command.

    Every expected failure is a :class:`MigdraError` (or a click usage error) and becomes exactly one
    line ``migdra: error: ...`` on stderr: exit status 2 for usage errors (bad flags, variables, input
    files), 1 for everything else.  Anything unexpected is a bug: one line plus a hint to rerun with
    ``-v``, which prints the traceback.
    """
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        # `migdra` (or `migdra cel`) alone: the help it asks for, whole and readable, not an error line;
        # still status 2, as no command ran.
        click.echo(exc.ctx.get_help() if exc.ctx is not None else cli.get_help(click.Context(cli)))
        sys.exit(EXIT_USAGE)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "migdra"
        _fail(f"{exc.format_message()} (see '{where} --help')", EXIT_USAGE)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code or EXIT_FAILURE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("migdra: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_USAGE)
    except MigdraError as exc:
        _fail(str(exc), EXIT_FAILURE)
    except BrokenPipeError:
        # `migdra slices | head`: the reader left; nothing more to say, and nowhere to say it.
        sys.stderr.close()
        sys.exit(EXIT_FAILURE)
    except Exception as exc:
        if _details_requested():
            traceback.print_exc()
        hint = "a bug in migdra; run with -v for details: migdra -v COMMAND ..."
        _fail(f"unexpected {type(exc).__name__}: {exc} ({hint})", EXIT_FAILURE)


if __name__ == "__main__":
    main()
