"""``migdra bench``: measurements anyone can re-run (``placement``: policies against the repacking oracle).

The repository's ``hack/bench/`` scripts measure migdra's speed against baselines; ``migdra bench
placement`` measures placement *quality*, which needs no machine of its own: it is a deterministic
function of the seeds, so its numbers are reproducible anywhere (docs/placement.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from dra_driver.devicemodel.policy import PLACEMENT_POLICIES
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME

_ORDERS = ("1.36", "1.35")


@click.group(name="bench")
def bench() -> None:
    """Measurements anyone can re-run."""


def _workload_names(sharing: bool = False) -> list[str]:
    from dra_driver.tools.packing.workloads import all_workloads, sharing_workloads  # noqa: PLC0415

    return [w.name for w in (sharing_workloads() if sharing else all_workloads())]


@bench.command("placement")
@click.option("--seeds", type=click.IntRange(1, 1000), default=10, show_default=True, help="traces per workload")
@click.option("--first-seed", type=click.IntRange(0, 2**31), default=1, show_default=True)
@click.option("--arrivals", type=click.IntRange(10, 100_000), default=400, show_default=True, help="claims per trace")
@click.option(
    "--load",
    type=click.FloatRange(0, 10, min_open=True),
    default=1.0,
    show_default=True,
    help="offered load: mean memory slices asked for / the cluster's",
)
@click.option(
    "--lag",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="allocations before a re-publish is visible to the scheduler",
)
@click.option("--workload", "workloads", multiple=True, help="only these workloads (repeatable) [all standard ones]")
@click.option(
    "--sharing",
    is_flag=True,
    help="the sharing comparison: the same pods asked for exclusively and as shares of a GPU instance, "
    "pods per GPU against a compute and memory bound",
)
@click.option(
    "--policy",
    "policies",
    type=click.Choice(list(PLACEMENT_POLICIES)),
    multiple=True,
    help="only these policies (repeatable) [all]",
)
@click.option(
    "--order",
    "orders",
    type=click.Choice(_ORDERS),
    multiple=True,
    help="allocator order: 1.36 (slices sorted by name) or 1.35 (shuffled) (repeatable) [both]",
)
@click.option("--jobs", type=click.IntRange(0, 256), default=0, show_default=True, help="processes (0: one per CPU)")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--json-file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="also write the JSON")
def placement(
    seeds: int,
    first_seed: int,
    arrivals: int,
    load: float,
    lag: int,
    workloads: tuple[str, ...],
    sharing: bool,
    policies: tuple[str, ...],
    orders: tuple[str, ...],
    jobs: int,
    output: str,
    json_file: Path | None,
) -> None:
    """Placement policies side by side against the repacking oracle, with 95 % confidence intervals."""
    from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents  # noqa: PLC0415
    from dra_driver.tools.packing.bench import (  # noqa: PLC0415
        COMPARED_POLICIES,
        BenchConfig,
        pods_rows,
        run_bench,
        table_rows,
    )

    known = _workload_names()
    for name in workloads:
        if name not in known:
            raise click.BadParameter(f"unknown workload {name!r}; known: {', '.join(known)}", param_hint="--workload")
    if sharing:
        workloads = (*workloads, *(name for name in _workload_names(sharing=True) if name not in workloads))
    classes = [c for c in deviceclass_documents(DEVICECLASS_DIR, DEFAULT_DRIVER_NAME) if _is_mig_class(c)]
    config = BenchConfig(
        seeds=seeds,
        first_seed=first_seed,
        arrivals=arrivals,
        load=load,
        lag=lag,
        workloads=workloads,
        policies=policies or COMPARED_POLICIES,
        orders=orders or _ORDERS,
        jobs=jobs,
    )

    def progress(line: str) -> None:
        if output == "table":
            click.echo(f"  {line}", err=True)

    report = run_bench(config, classes, progress)
    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if output == "json":
        json.dump(report, sys.stdout, indent=1, sort_keys=True)
        click.echo()
        return
    for order in config.orders:
        rows = table_rows(report, order)
        if rows:
            click.echo(
                f"\nallocator order {order}: acceptance (95 % CI) and share of the oracle's; fill-*: utilisation"
            )
            _echo_table(["workload", "oracle", *config.policies], rows)
        pods = pods_rows(report, order)
        if pods:
            click.echo(
                f"\nallocator order {order}: pods per GPU at the first rejected pod, median (min-max) over the seeds; "
                "bound: compute slices and memory; oracle: exclusive devices only"
            )
            _echo_table(["workload", "bound", "oracle", *config.policies], pods)


def _echo_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


_MIG_CLASSES = ("mig.migdra.io", "mig-shared.migdra.io")


def _is_mig_class(document: dict[str, object]) -> bool:
    """The classes the workloads name: exclusive MIG devices and shared GPU instances."""
    metadata = document.get("metadata")
    return isinstance(metadata, dict) and metadata.get("name") in _MIG_CLASSES
