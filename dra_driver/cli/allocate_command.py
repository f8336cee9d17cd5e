"""``migdra allocate``: which devices would kube-scheduler give these claims on this node, and if none, why?

Input is files (``--slices``, ``--classes``, ``--claims``) or the cluster (``--from-cluster``: every
ResourceSlice, DeviceClass and allocated ResourceClaim, the Node, and the claims of ``--pod`` or
``--claim``); the answer comes from :mod:`dra_driver.tools.allocation`, the port of kube-scheduler's
allocator, and the explanation from :mod:`dra_driver.tools.allocation.explain`.  From the cluster without
``--node``, every node is tried and each gets its answer: the reason per node behind a
``FailedScheduling``, which kube-scheduler itself sums up as "N cannot allocate all claims".  Exit
status: 0 allocated (on some node), 3 the claims fit on no node tried (the explanations are printed), 1
the attempt is aborted as in Kubernetes (a CEL runtime error, an unknown class...), 2 an input cannot be
used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from dra_driver.errors import ConfigurationError
from dra_driver.jsontypes import MutableJSON
from dra_driver.resourceclaim import ResourceClaimView, describe_validation_error, parse_claims

if TYPE_CHECKING:
    from dra_driver.kube.client import Client, Kind

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_INPUT = click.Path(exists=True, path_type=Path)  # a file, or a directory of them (other kinds skipped)
EXIT_DOES_NOT_FIT = 3
_TIMEOUT_S = 15.0


@click.command(name="allocate")
@click.option("--slices", "slice_files", type=_INPUT, multiple=True, help="ResourceSlices (YAML/JSON; repeatable)")
@click.option("--classes", "class_files", type=_INPUT, multiple=True, help="DeviceClasses (repeatable)")
@click.option(
    "--claims",
    "claim_files",
    type=_INPUT,
    multiple=True,
    help="ResourceClaims: those without status.allocation are allocated together (one pod's claims); "
    "those with one are already allocated and hold their devices (repeatable)",
)
@click.option(
    "--node",
    "node_name",
    default=None,
    help="the node to allocate on (required with files; with --from-cluster, without it: every node, each "
    "with its answer -- the reason per node a FailedScheduling does not give)",
)
@click.option("--node-label", "node_labels", multiple=True, metavar="KEY=VALUE", help="a label of the node (files)")
@click.option("--from-cluster", is_flag=True, help="read slices, classes, allocated claims and the node from the API")
@click.option("--kubeconfig", type=_FILE, default=None, help="kubeconfig for --from-cluster (default: the usual rules)")
@click.option("--pod", default=None, metavar="NAMESPACE/NAME", help="with --from-cluster: allocate this pod's claims")
@click.option("--claim", "claim_refs", multiple=True, metavar="NAMESPACE/NAME", help="with --from-cluster (repeatable)")
@click.option(
    "--feature-gates",
    default="",
    metavar="GATE=BOOL,...",
    help="change the DRA feature gates from kube-scheduler 1.36's defaults (all on)",
)
@click.option("-o", "--output", type=click.Choice(["text", "yaml", "json"]), default="text", show_default=True)
def allocate_command(
    slice_files: tuple[Path, ...],
    class_files: tuple[Path, ...],
    claim_files: tuple[Path, ...],
    node_name: str,
    node_labels: tuple[str, ...],
    from_cluster: bool,
    kubeconfig: Path | None,
    pod: str | None,
    claim_refs: tuple[str, ...],
    feature_gates: str,
    output: str,
) -> None:
    """Run kube-scheduler's DRA allocator for claims on one node: print the allocation, or why it fails.

    With --from-cluster and no --node, on every node: each node's allocation or reason (kube-scheduler's
    FailedScheduling says only how many nodes could not allocate the claims).

    Exit status 0: allocated (on some node); 3: the claims fit on no node tried; 1: the attempt is
    aborted as kube-scheduler aborts it; 2: an input cannot be used.
    """
    from dra_driver.tools.allocation import AllocationError, allocate  # noqa: PLC0415 -- keep `migdra --help` light
    from dra_driver.tools.allocation.explain import explain  # noqa: PLC0415

    features = _features(feature_gates)
    if from_cluster:
        if slice_files or class_files or node_labels:
            raise click.UsageError("--from-cluster reads slices, classes and the node itself; drop the files")
        claims, nodes, slices, classes, allocated = _from_cluster(kubeconfig, node_name, pod, claim_refs, claim_files)
    else:
        if pod or claim_refs:
            raise click.UsageError("--pod and --claim need --from-cluster")
        if not slice_files or not class_files or not claim_files:
            raise click.UsageError("give --slices, --classes and --claims files (or --from-cluster)")
        if node_name is None:
            raise click.UsageError("give --node (only --from-cluster can go over every node of a cluster)")
        claims, node, slices, classes, allocated = _from_files(
            slice_files, class_files, claim_files, node_name, node_labels
        )
        nodes = [node]
    if not claims:
        raise ConfigurationError("no claim to allocate: every given claim already has status.allocation")
    answers: list[MutableJSON] = []
    for node in nodes:
        name = str(node["metadata"]["name"])
        try:
            results = allocate(claims, node, slices, classes, allocated, features)
        except AllocationError as exc:
            where = "" if node_name is not None else f" on node {name}"
            raise AllocationError(
                f"allocation attempt aborted{where} (as kube-scheduler would abort it): {exc}"
            ) from exc
        if results is not None:
            answers.append({"node": name, "allocated": True, "claims": _named(claims, results)})
        else:
            answers.append(
                {
                    "node": name,
                    "allocated": False,
                    "explanation": explain(claims, node, slices, classes, allocated, features),
                }
            )
    if node_name is not None:
        (answer,) = answers
        _print_answer(answer, output)
        if not answer["allocated"]:
            raise SystemExit(EXIT_DOES_NOT_FIT)
        return
    if output == "text":
        for answer in answers:
            _print_answer(answer, output)
    else:
        _dump({"nodes": [_document(answer) for answer in answers]}, output)
    if not any(answer["allocated"] for answer in answers):
        raise SystemExit(EXIT_DOES_NOT_FIT)


def _print_answer(answer: MutableJSON, output: str) -> None:
    """One node's answer: the allocation, or why the claims do not fit there."""
    if output != "text":
        _dump(_document(answer), output)
    elif answer["allocated"]:
        click.echo(_allocation_text(answer))
    else:
        click.echo(answer["explanation"].summary(), nl=False)


def _document(answer: MutableJSON) -> MutableJSON:
    if answer["allocated"]:
        return answer
    return {"node": answer["node"], "allocated": False, "explanation": answer["explanation"].as_dict()}


def _features(text: str) -> set[str]:
    from dra_driver.tools.allocation import DEFAULT_FEATURES, KNOWN_FEATURES  # noqa: PLC0415

    enabled = set(DEFAULT_FEATURES)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, equals, value = item.partition("=")
        if not equals or value.lower() not in ("true", "false"):
            raise ConfigurationError(f"--feature-gates {item!r}: give GATE=true or GATE=false")
        if name not in KNOWN_FEATURES:
            known = ", ".join(sorted(KNOWN_FEATURES))
            raise ConfigurationError(f"--feature-gates {name!r}: not a DRA feature gate the allocator knows ({known})")
        if value.lower() == "true":
            enabled.add(name)
        else:
            enabled.discard(name)
    return enabled


def _objects(paths: tuple[Path, ...], flag: str, kind: str) -> list[MutableJSON]:
    return load_objects(paths, flag, (kind,))


def load_objects(paths: tuple[Path, ...], flag: str, kinds: tuple[str, ...]) -> list[MutableJSON]:
    """The objects of ``kinds`` in the files (a directory: its YAML/JSON files), each validated as
    kube-apiserver would; anything else in a named file is an error naming the file and the object."""
    from dra_driver.tools.cel.documents import load_documents  # noqa: PLC0415

    wanted = " or ".join(kinds)
    plural = " or ".join(f"{kind}s" for kind in kinds)
    objects: list[MutableJSON] = []
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml", ".json"} and p.is_file())
            documents = [d for file in files for d in load_documents(file) if d.kind in kinds]
            if not documents:
                raise ConfigurationError(f"{flag} {path}: no {plural} in the directory's YAML/JSON files")
        else:
            documents = load_documents(path)
            if not documents:
                raise ConfigurationError(f"{flag} {path}: no {plural} in it (the file is empty)")
        for document in documents:
            if document.kind not in kinds:
                what = document.label if document.kind else "an object without kind"
                raise ConfigurationError(f"{flag} {path}: {what} is not a {wanted}")
            _check_object(document.body, f"{flag} {path}: {document.label}")
            objects.append(dict(document.body))
    return objects


def _check_object(body: Any, where: str) -> None:
    """Refuse what kube-apiserver would refuse on create (its validation as :mod:`dra_driver.tools.validation`
    mirrors it, judged by tests/kube/test_validation_differential.py), so a hand-written file fails with
    the field named instead of confusing the allocator."""
    from dra_driver.tools.validation import validate, validate_object_meta  # noqa: PLC0415

    kind = str(body.get("kind", ""))
    namespaced = kind not in CLUSTER_SCOPED_KINDS
    metadata = body.get("metadata")
    if namespaced and isinstance(metadata, dict) and not metadata.get("namespace"):
        body = {**body, "metadata": {**metadata, "namespace": "default"}}  # where kubectl would create it
    errors = validate_object_meta(body, namespaced, "dns-subdomain") + validate(
        "resource.k8s.io", "v1", kind, body, None, None
    )
    status = body.get("status")
    if not errors and kind == "ResourceClaim" and status is not None:
        errors = validate("resource.k8s.io", "v1", kind, body, {**body, "status": {}}, "status")
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigurationError(f"{where}: invalid: {errors[0].detail()}{more}")


CLUSTER_SCOPED_KINDS = frozenset({"ResourceSlice", "DeviceClass", "Node"})


def _read_claims(objects: list[MutableJSON], where: str) -> list[ResourceClaimView]:
    """The claims (checked as kube-apiserver checks them) read into the one claim model."""
    from pydantic import ValidationError  # noqa: PLC0415

    claims = []
    for obj in objects:
        try:
            claims.append(ResourceClaimView.model_validate(obj))
        except ValidationError as e:
            name = (obj.get("metadata") or {}).get("name")
            raise ConfigurationError(f"{where}: ResourceClaim {name}: {describe_validation_error(e)}") from e
    return claims


def _split_claims(claims: list[ResourceClaimView]) -> tuple[list[ResourceClaimView], list[ResourceClaimView]]:
    return [c for c in claims if not c.allocated], [c for c in claims if c.allocated]


def _from_files(
    slice_files: tuple[Path, ...],
    class_files: tuple[Path, ...],
    claim_files: tuple[Path, ...],
    node_name: str,
    node_labels: tuple[str, ...],
) -> tuple[list[ResourceClaimView], MutableJSON, list[MutableJSON], list[MutableJSON], list[ResourceClaimView]]:
    labels: dict[str, str] = {}
    for item in node_labels:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigurationError(f"--node-label {item!r}: give KEY=VALUE")
        labels[key] = value
    node: MutableJSON = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "labels": labels}}
    pending, allocated = _split_claims(_read_claims(_objects(claim_files, "--claims", "ResourceClaim"), "--claims"))
    slices = _objects(slice_files, "--slices", "ResourceSlice")
    classes = _objects(class_files, "--classes", "DeviceClass")
    return pending, node, slices, classes, allocated


def _reference(text: str, flag: str) -> tuple[str, str]:
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name:
        raise ConfigurationError(f"{flag} {text!r}: give NAMESPACE/NAME")
    return namespace, name


def _from_cluster(
    kubeconfig: Path | None,
    node_name: str | None,
    pod: str | None,
    claim_refs: tuple[str, ...],
    claim_files: tuple[Path, ...],
) -> tuple[list[ResourceClaimView], list[MutableJSON], list[MutableJSON], list[MutableJSON], list[ResourceClaimView]]:
    """The pending claims, the node (``node_name``; None: every node, in name order), slices, classes and
    the allocated claims, read from the API."""
    from dra_driver.kube.client import CLAIMS, DEVICE_CLASSES, NODES, SLICES, Client  # noqa: PLC0415
    from dra_driver.kube.config import load_client_configuration  # noqa: PLC0415 -- only --from-cluster needs it

    if not (pod or claim_refs or claim_files):
        raise click.UsageError("with --from-cluster, name the claims: --pod, --claim or --claims FILE")
    references = [_reference(ref, "--claim") for ref in claim_refs]
    pod_reference = _reference(pod, "--pod") if pod else None
    configuration = load_client_configuration(kubeconfig, flag="--kubeconfig", usual_rules=True)
    api = Client(configuration=configuration, timeout=_TIMEOUT_S)
    try:
        if node_name is not None:
            nodes = [_get(api, NODES, None, node_name, f"node {node_name} (--node)")]
        else:
            nodes = sorted(_list(api, NODES, "Nodes"), key=lambda n: str(n["metadata"]["name"]))
            if not nodes:
                raise ConfigurationError("the cluster has no nodes to allocate on")
        slices = _list(api, SLICES, "ResourceSlices")
        classes = _list(api, DEVICE_CLASSES, "DeviceClasses")
        every_claim = parse_claims(_list(api, CLAIMS, "ResourceClaims"))
        if pod_reference is not None:
            references += _pod_claims(api, pod_reference)
    finally:
        api.close()
    by_reference = {(c.metadata.namespace, c.metadata.name): c for c in every_claim}
    wanted: list[ResourceClaimView] = []
    for reference in references:
        claim = by_reference.get(reference)
        if claim is None:
            raise ConfigurationError(f"ResourceClaim {reference[0]}/{reference[1]} not found in the cluster")
        wanted.append(claim)
    if claim_files:
        wanted += _read_claims(_objects(claim_files, "--claims", "ResourceClaim"), "--claims")
    pending, _ = _split_claims(wanted)
    pending_ids = {id(c) for c in pending}
    allocated = [c for c in every_claim if c.allocated and id(c) not in pending_ids]
    return pending, nodes, slices, classes, allocated


def _get(api: Client, kind: Kind, namespace: str | None, name: str, what: str) -> MutableJSON:
    """The object; a missing one fails in the server's words (``answered 404 NotFound: ...``)."""
    from dra_driver.kube.failures import as_request_error  # noqa: PLC0415

    try:
        return api.read(kind, namespace, name)
    except Exception as exc:
        raise as_request_error(exc, f"reading {what}", api.server) from exc


def _list(api: Client, kind: Kind, what: str) -> list[MutableJSON]:
    """Every object of ``kind``, in pages of 500 (a cluster's every claim is never one answer)."""
    from dra_driver.kube.failures import as_request_error  # noqa: PLC0415

    try:
        items, _ = api.list(kind, page_size=500)
    except Exception as exc:
        raise as_request_error(exc, f"listing {what}", api.server) from exc
    return [item for item in items if isinstance(item, dict)]


def _pod_claims(api: Client, reference: tuple[str, str]) -> list[tuple[str, str]]:
    """The claims of a pod: named ones, and the ones generated from templates (from the pod's status)."""
    from dra_driver.kube.client import PODS  # noqa: PLC0415

    namespace, name = reference
    pod = _get(api, PODS, namespace, name, f"pod {namespace}/{name} (--pod)")
    generated = {
        status.get("name"): status.get("resourceClaimName")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    references = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        claim_name = entry.get("resourceClaimName") or generated.get(entry.get("name"))
        if not claim_name:
            raise ConfigurationError(
                f"pod {namespace}/{name}: the claim for spec.resourceClaims[{entry.get('name')}] does not exist yet"
                " (the resource claim controller creates it from the template)"
            )
        references.append((namespace, str(claim_name)))
    if not references:
        raise ConfigurationError(f"pod {namespace}/{name} has no resourceClaims")
    return references


def _named(claims: list[ResourceClaimView], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"claim": claim.metadata.label, "allocation": result} for claim, result in zip(claims, results, strict=True)
    ]


def _allocation_text(answer: MutableJSON) -> str:
    lines = [f"allocated on node {answer['node']}:"]
    for entry in answer["claims"]:
        lines.append(f"  claim {entry['claim']}:")
        for result in entry["allocation"]["devices"]["results"]:
            extra = " (admin access)" if result.get("adminAccess") else ""
            if result.get("shareID"):
                consumed = ", ".join(f"{k} {v}" for k, v in (result.get("consumedCapacity") or {}).items())
                extra += f" (share {result['shareID']}{': ' + consumed if consumed else ''})"
            lines.append(f"    {result['request']}: {result['driver']}/{result['pool']}/{result['device']}{extra}")
    return "\n".join(lines)


def _dump(document: MutableJSON, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
