"""``migdra plan``: will this workload mix fit these nodes? (before anything is deployed)

    migdra plan --nodes 2:H100-SXM5-80GB=8 --workload claims.yaml --count small=40 --count big=6

Exit status 0: everything fits; 3: something does not (the first claim that does not fit is named,
with the allocator's reasons); 2: an input cannot be used.  See :mod:`dra_driver.tools.packing.plan`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from dra_driver.devicemodel.policy import DEFAULT_POLICY, PLACEMENT_POLICIES
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError

EXIT_DOES_NOT_FIT = 3
MAX_COUNT = 100_000
_FILE = click.Path(exists=True, path_type=Path)


def _counts(values: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        name, equals, number = value.partition("=")
        if not equals or not name.strip() or not number.strip().isdigit() or not 0 <= int(number) <= MAX_COUNT:
            raise click.BadParameter(
                f"{value!r}: expected NAME=N, the claim's (or template's) name and a count of 0 to {MAX_COUNT}",
                param_hint="--count",
            )
        if name.strip() in counts:
            raise click.BadParameter(f"{name.strip()!r} is counted twice", param_hint="--count")
        counts[name.strip()] = int(number)
    return counts


@click.command(name="plan")
@click.option(
    "--nodes",
    "node_specs",
    multiple=True,
    required=True,
    metavar="[COUNT:]MODEL=N[,MODEL=N]",
    help="COUNT nodes (default 1) each with N GPUs of MODEL (a MIG catalog key or alias); repeatable",
)
@click.option(
    "--workload",
    "workload_files",
    type=_FILE,
    multiple=True,
    required=True,
    help="ResourceClaim / ResourceClaimTemplate YAML or JSON (a file or a directory); repeatable.  Pods there "
    "say how many of each they use (a template once per Pod)",
)
@click.option("--count", "counts", multiple=True, metavar="NAME=N", help="copies of a claim or template [1]")
@click.option(
    "--rate",
    "rates",
    multiple=True,
    metavar="NAME=R",
    help="instead of counts: claims of NAME arriving R per unit of time (Poisson); repeatable",
)
@click.option(
    "--lifetime",
    type=click.FloatRange(0, 1e9, min_open=True),
    default=1.0,
    show_default=True,
    help="with --rate: mean lifetime of a claim, in the rates' unit of time (exponential)",
)
@click.option("--arrivals", type=click.IntRange(20, 100_000), default=500, show_default=True, help="with --rate")
@click.option("--seeds", type=click.IntRange(1, 100), default=5, show_default=True, help="with --rate")
@click.option(
    "--policy",
    type=click.Choice(list(PLACEMENT_POLICIES)),
    default=DEFAULT_POLICY,
    show_default=True,
    help="the node plugin's placement policy",
)
@click.option(
    "--shared-devices",
    is_flag=True,
    help="the nodes publish shared GPU-instance devices (the plugin's sharedDevices: true): claims may be shares",
)
@click.option("--driver-name", default=DEFAULT_DRIVER_NAME, show_default=True, help="DRA driver name")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plan_command(
    node_specs: tuple[str, ...],
    workload_files: tuple[Path, ...],
    counts: tuple[str, ...],
    rates: tuple[str, ...],
    lifetime: float,
    arrivals: int,
    seeds: int,
    policy: str,
    shared_devices: bool,
    driver_name: str,
    output: str,
) -> None:
    """Will these claims fit these nodes? How many, which fails first and why, and the occupancy map."""
    from dra_driver.cli.allocate_command import load_objects  # noqa: PLC0415
    from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents  # noqa: PLC0415
    from dra_driver.devicemodel.naming import driver_name_problem  # noqa: PLC0415
    from dra_driver.tools.packing.plan import (  # noqa: PLC0415
        claims_from_documents,
        compute_pod_counts,
        parse_nodes,
        plan,
        shared_class_problem,
    )

    problem = driver_name_problem(driver_name)
    if problem is not None:
        raise click.BadParameter(f"{driver_name!r} is not a DRA driver name: it {problem}", param_hint="--driver-name")
    shape = dataclasses.replace(parse_nodes(node_specs), shared_devices=shared_devices)
    loaded = load_objects(workload_files, "--workload", ("ResourceClaim", "ResourceClaimTemplate", "Pod"))
    documents = [d for d in loaded if d.get("kind") != "Pod"]
    if not documents:
        raise ConfigurationError("--workload: no ResourceClaim or ResourceClaimTemplate in the given files")
    if rates and counts:
        raise click.UsageError("give --count (place that many) or --rate (arrivals over time), not both")
    rate_of = _rates(rates)
    names = {str((d.get("metadata") or {}).get("name") or "") for d in documents}
    # Pods in the files say how many of each claim they use (a template once per Pod); --count wins.
    pod_counts = compute_pod_counts([d for d in loaded if d.get("kind") == "Pod"], names)
    claims = claims_from_documents(documents, {**pod_counts, **_counts(counts)}, "--rate" if rates else "--count")
    if not shared_devices:
        shared = shared_class_problem(claims)
        if shared is not None:
            raise ConfigurationError(shared)
    unknown = sorted(set(rate_of) - {c.name for c in claims})
    if unknown:
        raise ConfigurationError(f"--rate {unknown[0]}=...: no claim or template of that name in the workload")
    classes = deviceclass_documents(DEVICECLASS_DIR, driver_name)
    if rates:
        from dra_driver.tools.packing.plan import simulate_rates  # noqa: PLC0415

        estimate = simulate_rates(
            shape,
            claims,
            rate_of,
            classes,
            policy,
            lifetime=lifetime,
            arrivals=arrivals,
            seeds=seeds,
            driver=driver_name,
        )
        document = rate_document(estimate, policy, shape, rate_of, lifetime, arrivals, seeds)
        if output == "json":
            json.dump(document, sys.stdout, indent=1, sort_keys=True)
            click.echo()
        else:
            click.echo(render_rates(document), nl=False)
        return
    result = plan(shape, claims, classes, policy, driver_name)
    if output == "json":
        json.dump(plan_document(result), sys.stdout, indent=1, sort_keys=True)
        click.echo()
    else:
        click.echo(render_plan(result), nl=False)
    if not result.fits:
        raise SystemExit(EXIT_DOES_NOT_FIT)


def _rates(values: tuple[str, ...]) -> dict[str, float]:
    rates: dict[str, float] = {}
    for value in values:
        name, equals, number = value.partition("=")
        try:
            rate = float(number) if equals else -1.0
        except ValueError:
            rate = -1.0
        if not name.strip() or not 0 < rate <= 1e9:
            raise click.BadParameter(
                f"{value!r}: expected NAME=R, the claim's (or template's) name and arrivals per unit of time > 0",
                param_hint="--rate",
            )
        if name.strip() in rates:
            raise click.BadParameter(f"{name.strip()!r} has two rates", param_hint="--rate")
        rates[name.strip()] = rate
    return rates


def rate_document(
    estimate: Any, policy: str, shape: Any, rates: dict[str, float], lifetime: float, arrivals: int, seeds: int
) -> dict[str, Any]:
    """The ``--rate`` answer (schema 1): per claim the share of arrivals placed, mean and 95 % CI."""

    def share(value: tuple[float, float, float]) -> dict[str, Any]:
        mean, low, high = value
        return {"mean": round(mean, 4), "ci95": [round(max(0.0, low), 4), round(min(1.0, high), 4)]}

    return {
        "schema": 1,
        "policy": policy,
        "nodes": [list(node) for node in shape.nodes],
        "params": {"rates": rates, "lifetime": lifetime, "arrivals": arrivals, "seeds": seeds},
        "claims": {
            name: {
                "rate": rates[name],
                "acceptance": share(value),
                "oracleAcceptance": None if estimate.oracle is None else share(estimate.oracle[name]),
            }
            for name, value in estimate.acceptance.items()
        },
        "acceptance": share(estimate.total),
        "oracleAcceptance": None if estimate.oracle_total is None else share(estimate.oracle_total),
    }


def render_rates(document: dict[str, Any]) -> str:
    params = document["params"]
    lines = [
        f"plan: {len(document['nodes'])} node(s), placement policy {document['policy']}; arrivals at the given rates, "
        f"mean lifetime {params['lifetime']:g}, {params['seeds']} seeds of {params['arrivals']} arrivals",
        "",
        "share of arrivals placed (95 % CI); with repacking: the oracle's, the most any placement could place",
    ]

    def text(share: dict[str, Any] | None) -> str:
        if share is None:
            return "-"
        low, high = share["ci95"]
        return f"{share['mean'] * 100:.1f} % ({low * 100:.1f}-{high * 100:.1f})"

    width = max(len(name) for name in document["claims"])
    for name, entry in document["claims"].items():
        lines.append(
            f"  {name:<{width}}  rate {entry['rate']:g}: {text(entry['acceptance'])}"
            f"   with repacking: {text(entry['oracleAcceptance'])}"
        )
    lines.append(
        f"  {'all':<{width}}  {text(document['acceptance'])}   with repacking: {text(document['oracleAcceptance'])}"
    )
    return "\n".join(lines) + "\n"


def plan_document(result: Any) -> dict[str, Any]:
    """The JSON answer (schema 1): what fits, what failed and why, the oracle's count, the map."""
    from dra_driver.cli.status_command import status_document  # noqa: PLC0415

    failure = result.first_failure
    return {
        "schema": 1,
        "policy": result.policy,
        "nodes": [list(node) for node in result.shape.nodes],
        "fits": result.fits,
        "claims": {
            name: {
                "requested": requested,
                "placed": result.placed.get(name, 0),
                "oraclePlaced": None if result.oracle_placed is None else result.oracle_placed.get(name, 0),
            }
            for name, requested in result.requested.items()
        },
        "firstFailure": None if failure is None else {"claim": failure[0], "copy": failure[1], **_why(result)},
        "placedOn": {node: dict(counter) for node, counter in result.nodes_used.items()},
        "sharedDevices": [
            {
                "node": use.node,
                "device": use.device,
                "computeSlices": use.compute_slices,
                "usedComputeSlices": use.used,
                "shares": [{"claim": claim, "computeSlices": size} for claim, size in use.shares],
            }
            for use in result.shares
        ],
        "occupancy": status_document(result.gpus, result.driver)["nodes"],
    }


def _why(result: Any) -> dict[str, Any]:
    return {"explanation": result.explanation, "verdict": _verdict(result)}


def _verdict(result: Any) -> str:
    """Fragmentation (a repacking would fit it) or capacity (nothing would), when the oracle can say."""
    if result.first_failure is None or result.oracle_placed is None:
        return "unknown" if result.first_failure is not None else "fits"
    name, copy = result.first_failure
    if result.oracle_placed.get(name, 0) >= copy and _oracle_reaches(result, name):
        return "fragmentation"
    return "capacity"


def _oracle_reaches(result: Any, failed: str) -> bool:
    """Whether the oracle placed every copy of the claims before ``failed`` too (the same prefix)."""
    for name, requested in result.requested.items():
        if name == failed:
            return True
        if result.oracle_placed.get(name, 0) < requested:
            return False
    return True


def render_plan(result: Any) -> str:
    from dra_driver.devicemodel.occupancy import render_occupancy  # noqa: PLC0415

    nodes = len(result.shape.nodes)
    gpus = len(result.shape.gpu_models)
    lines = [f"plan: {nodes} node(s), {gpus} GPU(s), placement policy {result.policy}", ""]
    width = max(len(name) for name in result.requested)
    for name, requested in result.requested.items():
        placed = result.placed.get(name, 0)
        oracle = "" if result.oracle_placed is None else f"   (with repacking: {result.oracle_placed.get(name, 0)})"
        lines.append(f"  {name:<{width}}  {placed:>6} of {requested:<6} placed{oracle}")
    lines.append("")
    if result.fits:
        lines.append("everything fits.")
    else:
        name, copy = result.first_failure
        verdict = _verdict(result)
        reason = {
            "fragmentation": "fragmentation: a different packing of the same instances would fit it",
            "capacity": "capacity: no packing of these instances fits it",
            "unknown": "the repacking oracle handles claims for one exclusive MIG device only, not shares",
        }[verdict]
        lines.append(f"first that does not fit: {name} #{copy} ({reason})")
        lines += ["", result.why.rstrip()]
    lines += ["", render_occupancy(result.gpus).rstrip()]
    if result.shares:
        lines += ["", "shared GPU instances (compute slices used of the instance's; each share's claim and size):"]
        for use in result.shares:
            shares = ", ".join(f"{claim} {size}" for claim, size in use.shares)
            lines.append(f"  {use.node}  {use.device}  {use.used}/{use.compute_slices}: {shares}")
    return "\n".join(lines) + "\n"
