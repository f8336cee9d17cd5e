"""``migdra status``: the cluster view -- per GPU, which memory slices hold which claim, foreign
instances, what is realized, what is still allocatable -- read from the API alone.

Reads ``driver``'s ResourceSlices and every ResourceClaim (two LISTs, nothing written), computes the
picture with :func:`dra_driver.clusterview.compute_cluster_occupancy` (pure; the controller's
metrics are the same numbers) and prints it as a text map
(``-o table``) or as the stable JSON document :func:`status_document` builds (``-o json``,
``schemaVersion`` ``v1``; docs/operations.md, "Cluster view").  Exit status 0; 2 for an input that
cannot be used (a kubeconfig, ``--node``, ``--driver-name``); 1 when the API server cannot be read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from dra_driver.clusterview import compute_cluster_occupancy
from dra_driver.devicemodel.naming import driver_name_problem, node_name_problem
from dra_driver.devicemodel.occupancy import (
    CONFLICT_MARK,
    FOREIGN,
    FREE,
    WHOLE_GPU_PROFILE,
    GpuOccupancy,
    Instance,
    claim_letters,
    slice_cells,
)
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME, DeviceType
from dra_driver.errors import ConfigurationError
from dra_driver.resourceclaim import ResourceClaimView, parse_claims

STATUS_SCHEMA_VERSION = "v1"
"""``schemaVersion`` of the ``-o json`` document; fields are only ever added within one version."""
_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_TIMEOUT_S = 15.0


@click.command(name="status")
@click.option("--kubeconfig", type=_FILE, default=None, help="kubeconfig (default: the usual rules, as kubectl)")
@click.option("--driver-name", default=DEFAULT_DRIVER_NAME, show_default=True, help="DRA driver name")
@click.option("--node", "node_name", default=None, help="only this node's GPUs")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--request-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=_TIMEOUT_S,
    show_default=True,
    help="seconds to wait for each API request",
)
def status_command(
    kubeconfig: Path | None, driver_name: str, node_name: str | None, output: str, request_timeout: float
) -> None:
    """Per GPU: which memory slices hold which claim, foreign instances, what is realized, what still
    fits and how fragmented the free memory is -- read from the API alone."""
    problem = driver_name_problem(driver_name)
    if problem is not None:
        raise ConfigurationError(f"--driver-name {driver_name!r}: not a DRA driver name: it {problem}")
    if node_name is not None and (problem := node_name_problem(node_name)) is not None:
        raise ConfigurationError(f"--node {node_name!r}: not a Kubernetes node name: it {problem}")
    slices, claims = _read_cluster(kubeconfig, driver_name, node_name, request_timeout)
    gpus = compute_cluster_occupancy(slices, claims, driver_name)
    if node_name is not None:
        gpus = [gpu for gpu in gpus if gpu.node == node_name]
    if output == "json":
        click.echo(json.dumps(status_document(gpus, driver_name), indent=2))
    else:
        click.echo(render_status(gpus, driver_name), nl=False)


def _read_cluster(
    kubeconfig: Path | None, driver_name: str, node_name: str | None, timeout: float
) -> tuple[list[dict[str, Any]], list[ResourceClaimView]]:
    """The driver's slices (of ``node_name`` only, when given) and every claim migdra can read; for a
    ``--node`` that publishes nothing, a usage error saying whether the node exists at all."""
    from dra_driver.kube.client import CLAIMS, NODES, SLICES, Client  # noqa: PLC0415 -- keep `--help` light
    from dra_driver.kube.config import load_client_configuration  # noqa: PLC0415
    from dra_driver.kube.failures import as_request_error  # noqa: PLC0415

    configuration = load_client_configuration(kubeconfig, flag="--kubeconfig", usual_rules=True)
    server = str(configuration.host)
    api = Client(configuration=configuration, timeout=timeout)
    try:
        selector = f"spec.driver={driver_name}" + (f",spec.nodeName={node_name}" if node_name else "")
        try:
            slices, _ = api.list(SLICES, field_selector=selector, page_size=500)
        except Exception as exc:
            raise as_request_error(exc, "listing ResourceSlices", server) from exc
        if node_name is not None and not slices:
            try:
                node = api.get(NODES, None, node_name)
            except Exception as exc:
                raise as_request_error(exc, f"reading node {node_name} (--node)", server) from exc
            if node is None:
                raise ConfigurationError(f"--node {node_name}: no such node in the cluster at {server}")
            raise ConfigurationError(
                f"--node {node_name}: the node publishes no ResourceSlices of driver {driver_name} "
                "(is migdra's plugin running there? is --driver-name right?)"
            )
        try:
            claims, _ = api.list(CLAIMS, page_size=500)
        except Exception as exc:
            raise as_request_error(exc, "listing ResourceClaims", server) from exc
    finally:
        api.close()
    return slices, parse_claims(claims)


# -- -o json ---------------------------------------------------------------------------------------


def _instance_document(instance: Instance) -> dict[str, Any]:
    return {
        "claim": instance.claim,
        "device": instance.device,
        "profile": instance.profile,
        "placementStart": instance.placement_start,
        "placementSize": instance.placement_size,
        "realized": instance.realized,
        "migUUID": instance.mig_uuid,
        "gpuInstanceID": instance.gpu_instance_id,
        "computeInstanceID": instance.compute_instance_id,
        "conflict": instance.conflict,
        "shareID": instance.share_id,
        "computeSlices": instance.share_slices,
    }


def _gpu_document(gpu: GpuOccupancy) -> dict[str, Any]:
    foreign = set(gpu.foreign_slices)
    largest = gpu.largest_allocatable
    return {
        "name": gpu.name,
        "type": (DeviceType.GPU if gpu.whole_gpu else DeviceType.MIG).value,
        "pool": gpu.pool,
        "counterSet": gpu.counter_set or None,
        "product": gpu.product,
        "uuid": gpu.uuid,
        "memorySlices": len(gpu.slices),
        "freeMemorySlices": gpu.free_slices,
        "slices": [
            {"state": "claim", "claim": holder}
            if holder is not None
            else {"state": "foreign" if index in foreign else "free"}
            for index, holder in enumerate(gpu.slices)
        ],
        "foreign": list(gpu.foreign_slices),
        "instances": [_instance_document(instance) for instance in gpu.instances],
        "reserved": gpu.instances_by_profile(realized=False),
        "realized": gpu.instances_by_profile(realized=True),
        "allocatable": [
            {
                "device": a.device,
                "profile": a.profile,
                "placementStart": a.placement_start,
                "placementSize": a.placement_size,
                "computeSlicesFree": a.compute_slices_free,
            }
            for a in gpu.allocatable
        ],
        "largestProfile": None
        if largest is None
        else {
            "profile": largest.profile,
            "placementSize": largest.placement_size,
            "multiprocessors": largest.multiprocessors,
            "placementStarts": gpu.largest_placements,
        },
        "fragmentation": round(gpu.fragmentation, 4),
    }


def status_document(gpus: Sequence[GpuOccupancy], driver_name: str) -> dict[str, Any]:
    """The ``-o json`` document: ``{schemaVersion, driver, nodes: [{name, gpus: [...]}]}``, nodes and
    GPUs in name order (docs/operations.md has every field)."""
    nodes: dict[str, list[dict[str, Any]]] = {}
    for gpu in gpus:
        nodes.setdefault(gpu.node, []).append(_gpu_document(gpu))
    return {
        "schemaVersion": STATUS_SCHEMA_VERSION,
        "driver": driver_name,
        "nodes": [{"name": name, "gpus": documents} for name, documents in nodes.items()],
    }


# -- -o table --------------------------------------------------------------------------------------


def _placements(profile: str, starts: Sequence[int]) -> str:
    return f"{profile} at {', '.join(str(s) for s in starts)}"


def _allocatable_summary(gpu: GpuOccupancy) -> str:
    counts: dict[str, int] = {}
    for allocatable in gpu.allocatable:
        label = allocatable.profile
        if allocatable.is_share:
            label = f"a share of {allocatable.profile} ({allocatable.compute_slices_free} compute slices free)"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} x{count}" for label, count in counts.items()) or "nothing"


def _instance_line(letter: str, instance: Instance) -> str:
    whole = instance.profile == WHOLE_GPU_PROFILE
    where = "whole GPU" if whole else f"{instance.profile} at {instance.placement_start}"
    if instance.share_id is not None:
        where += f", share of {instance.share_slices} compute slice{'' if instance.share_slices == 1 else 's'}"
    if instance.conflict is not None:
        state = f"CONFLICT (Reserved=False): {instance.conflict}"
    elif instance.realized:
        ids = ""
        if instance.gpu_instance_id is not None:
            ids = f" (GI {instance.gpu_instance_id}, CI {instance.compute_instance_id})"
        state = f"realized {instance.mig_uuid}{ids}" if instance.mig_uuid else "realized"
    else:
        state = "reserved, not realized yet"
    mark = CONFLICT_MARK if instance.conflict is not None else " "
    return f"    {letter}{mark} {instance.claim}  {where}  {instance.device}  {state}"


def render_status(gpus: Sequence[GpuOccupancy], driver_name: str) -> str:
    """The text map: per GPU its memory slices (letters per GPU), what fits, the instances; a legend."""
    if not gpus:
        return f"no GPUs: no ResourceSlices of driver {driver_name}\n"
    mig = [gpu for gpu in gpus if not gpu.whole_gpu]
    whole = [gpu for gpu in gpus if gpu.whole_gpu]
    instances = [instance for gpu in gpus for instance in gpu.instances]
    realized = sum(1 for instance in instances if instance.realized)
    conflicts = sum(1 for instance in instances if instance.conflict is not None)
    summary = (
        f"{len({gpu.node for gpu in gpus})} node(s), {len(gpus)} GPU(s) of {driver_name}: "
        f"{len(instances)} instance(s) reserved, {realized} realized, {conflicts} in conflict; "
        f"{sum(g.free_slices for g in mig)} of {sum(len(g.slices) for g in mig)} MIG memory slices free"
    )
    if whole:
        summary += f", {sum(g.free_slices for g in whole)} of {len(whole)} whole GPUs free"
    lines = [summary, ""]
    for gpu in gpus:
        letters = claim_letters([gpu])
        mode = "  (MIG disabled: one whole-GPU device)" if gpu.whole_gpu else ""
        lines.append(f"{gpu.node}  {gpu.name}  {gpu.product}  {gpu.uuid}".rstrip() + mode)
        kind = "whole GPU" if gpu.whole_gpu else "memory slices"
        lines.append(
            f"    {kind:<14} [{' '.join(slice_cells(gpu, letters))}]  {gpu.free_slices}/{len(gpu.slices)} free"
        )
        largest = gpu.largest_allocatable
        if largest is None:
            fits = "nothing"
        elif gpu.whole_gpu:
            fits = "the whole GPU"
        else:
            fits = _placements(largest.profile, gpu.largest_placements)
        lines.append(f"    {'largest fit':<14} {fits}; fragmentation {gpu.fragmentation:.2f}")
        lines.append(f"    {'allocatable':<14} {_allocatable_summary(gpu)}")
        lines += [_instance_line(letters.get(i.holder, "?"), i) for i in gpu.instances]
        lines.append("")
    lines += [
        f"legend: {FREE} free memory slice   {FOREIGN} held by an instance migdra did not create (foreign)",
        "        A, B, ... the claims holding slices (letters per GPU)",
        f"        {CONFLICT_MARK} the reservation controller reports a conflict (Reserved=False)",
        "fragmentation: 1 - largest allocatable placement / free memory slices (0: all free memory fits one instance)",
    ]
    return "\n".join(lines) + "\n"
