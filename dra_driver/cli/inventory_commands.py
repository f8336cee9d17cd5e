"""``migdra gpus`` and ``migdra slices``: what this node's GPUs offer and what it would publish, without a
cluster.  Loaded only when used (their flags come from the NVML settings model)."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from dra_driver.cli.options import nvml_options
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError
from dra_driver.gcpause import garbage_collector_paused


@click.command()
@nvml_options
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table", show_default=True)
@click.option("--all-placements/--free-only", default=True, help="list every legal placement or only free ones")
def gpus(
    nvml: str | None,
    sim_state: str | None,
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


@click.command()
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
    sim_state: str | None,
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
    with garbage_collector_paused():
        with open_nvml(settings) as session:
            inventory = read_inventory(session)
        gpus = [(entry.gpu.uuid, entry.gpu.pci_bus_id) for entry in inventory.gpus]
        check_excluded_gpus_exist(config, gpus, from_flags=exclude_gpu, path=config_file)
        pool = build_pool(inventory, config)
        text = slices_view.render(render_slices(pool, node, generation=1), pool, output)
    click.echo(text, nl=False)
