"""The node plugin's own commands: ``migdra kubelet-plugin`` (the node process) and ``migdra health``
(the GPU faults that taint this node's devices, run on the node).

The ``migdra`` command line finds them by entry point (``migdra.commands`` in pyproject.toml), so the
library beneath never imports the node plugin.  Every flag of ``kubelet-plugin`` is generated from the
settings it sets (:class:`~kubeletplugin.settings.PluginSettings`,
:class:`~kubeletplugin.settings.PrepareSettings`, :class:`~dra_driver.nvml.settings.NvmlSettings`):
each setting is declared once, there.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from dra_driver.errors import ConfigurationError, build_settings
from dra_driver.nvml.settings import NvmlSettings, build_nvml_settings
from dra_driver.settings_cli import announcer, given_settings, settings_options
from kubeletplugin.settings import PluginSettings, PrepareSettings


@click.command("kubelet-plugin")
@settings_options(NvmlSettings)
@settings_options(PluginSettings)
@settings_options(PrepareSettings)
@click.option("--publish-only", is_flag=True, help="only publish ResourceSlices; do not serve kubelet")
def kubelet_plugin(publish_only: bool, **given: object) -> None:
    """Run the node plugin: publish ResourceSlices, register with kubelet, prepare and unprepare claims."""
    from dra_driver.serving import stop_on_signals  # noqa: PLC0415
    from kubeletplugin import app  # noqa: PLC0415 -- the node process is loaded only here

    nvml_settings = build_nvml_settings(**given_settings(NvmlSettings, given))
    plugin = build_settings(PluginSettings, "kubelet plugin", given_settings(PluginSettings, given))
    stop = stop_on_signals()
    if publish_only:
        sys.exit(app.run_publish_only(plugin, nvml_settings, stop, announcer()))
    prepare = build_settings(PrepareSettings, "prepare", given_settings(PrepareSettings, given))
    for beside_socket in ("state_dir", "plugin_data_dir"):  # neither flag nor variable: beside dra.sock
        if beside_socket not in prepare.model_fields_set:
            prepare = prepare.model_copy(update={beside_socket: plugin.plugin_directory})
    sys.exit(app.run_plugin(plugin, prepare, nvml_settings, stop, announcer()))


_STATE_DIR = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="the plugin's state directory (MIGDRA_STATE_DIR; default beside dra.sock)",
)


@click.group()
def health() -> None:
    """List and clear the GPU faults that taint this node's devices (run on the node)."""


def _checked(state_dir: Path) -> Path:
    if not state_dir.is_dir():
        raise ConfigurationError(f"--state-dir {state_dir}: no such directory; give the plugin's state directory")
    return state_dir


@health.command("list")
@_STATE_DIR
def list_faults(state_dir: Path) -> None:
    """Show every kept fault: GPU, taint, where on the GPU, first and last seen."""
    from kubeletplugin.taint_store import TaintStore  # noqa: PLC0415 -- keep `migdra health --help` light

    stored = TaintStore(_checked(state_dir)).load()
    if not stored.faults:
        click.echo("no GPU faults: no device is tainted")
        return
    click.echo(f"{'GPU':<44} {'IDX':>3}  {'TAINT':<16} {'WHERE':<22} {'FIRST SEEN':<20} LAST SEEN")
    for fault in stored.faults:
        taint = f"{fault.name}={fault.value}" if fault.value else fault.name
        where = (
            f"GI {fault.gpu_instance_id} slices {fault.placement_start}:{fault.placement_size}"
            if fault.placement_start is not None
            else "whole GPU"
        )
        click.echo(
            f"{fault.gpu_uuid:<44} {fault.gpu_index:>3}  {taint:<16} {where:<22} "
            f"{_when(fault.first_seen):<20} {_when(fault.last_seen)}"
        )


@health.command()
@_STATE_DIR
@click.option("--gpu", default=None, metavar="UUID|INDEX", help="clear the faults of this GPU")
@click.option("--all", "clear_all", is_flag=True, help="clear the faults of every GPU")
@click.option("--xid", type=click.IntRange(min=0), default=None, help="clear only this XID")
def clear(state_dir: Path, gpu: str | None, clear_all: bool, xid: int | None) -> None:
    """Drop faults (their taints go with the plugin's next round): the GPU was repaired or reset."""
    from kubeletplugin.taint_store import TaintStore  # noqa: PLC0415

    if (gpu is None) == (not clear_all):
        raise ConfigurationError("give exactly one of --gpu UUID|INDEX and --all")
    if gpu is not None and not gpu.strip():
        raise ConfigurationError("--gpu is empty; give a GPU UUID (GPU-...) or NVML index")
    dropped = TaintStore(_checked(state_dir)).clear(gpu, xid)
    click.echo(f"cleared {len(dropped)} fault(s)")


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
