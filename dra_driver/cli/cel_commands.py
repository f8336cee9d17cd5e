"""``migdra cel``: test DRA CEL selectors against ResourceSlices, and lint selectors in manifests.

Only presentation and input live here (files, the cluster, flags, output, exit codes); compiling,
evaluating, explaining and linting are library code in ``dra_driver.tools.cel``.  Heavy imports happen
inside the commands so ``migdra --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.errors import ConfigurationError

if TYPE_CHECKING:
    from dra_driver.tools.cel.documents import Document, SliceDevice

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group()
def cel() -> None:
    """Kubernetes DRA CEL selectors: evaluate against slices, lint manifests."""


@cel.command(name="eval")
@click.argument("expression")
@click.option(
    "--slices", "slice_files", type=_FILE, multiple=True, help="YAML/JSON file of ResourceSlices (repeatable)"
)
@click.option("--from-cluster", is_flag=True, help="list resource.k8s.io/v1 ResourceSlices from the cluster")
@click.option("--kubeconfig", type=_FILE, default=None, help="kubeconfig for --from-cluster (default: the usual rules)")
@click.option(
    "--driver",
    default=None,
    help=f"only devices of this driver's slices; also the driver of slices naming none [{DEFAULT_DRIVER_NAME}]",
)
@click.option(
    "--runner",
    type=click.Choice(["compiled", "interpreted"]),
    default="compiled",
    show_default=True,
    help="celpy runner (both give the same answers)",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def eval_command(
    expression: str,
    slice_files: tuple[Path, ...],
    from_cluster: bool,
    kubeconfig: Path | None,
    driver: str | None,
    runner: str,
    output: str,
) -> None:
    """Evaluate EXPRESSION against every device; show which match, which do not, and why not.

    Exit code 0 when the expression compiles (whatever the devices say); 2 when it does not, or an
    input cannot be used; 1 when the cluster cannot be read.
    """
    from dra_driver.tools.cel import CELCompileError, compile_selector  # noqa: PLC0415
    from dra_driver.tools.cel.documents import slice_devices  # noqa: PLC0415
    from dra_driver.tools.cel.explain import Outcome, explain  # noqa: PLC0415

    if bool(slice_files) == from_cluster:
        raise click.UsageError("give --slices FILE or --from-cluster (one of them)")
    _check_driver(driver)
    try:
        program = compile_selector(expression, runner=runner)
    except CELCompileError as exc:
        raise ConfigurationError(f"EXPRESSION does not compile: {exc.details().splitlines()[0]}") from exc

    documents: list[Document] = []
    if from_cluster:
        documents = _cluster_slices(kubeconfig, driver)
    for path in slice_files:
        documents += _slice_documents(path)
    devices = [
        d
        for d in slice_devices(documents, default_driver=driver or DEFAULT_DRIVER_NAME)
        if not driver or d.driver == driver
    ]

    results = [(device, explain(program, device.device, driver=device.driver)) for device in devices]
    counts = {outcome: sum(1 for _, e in results if e.outcome is outcome) for outcome in Outcome}
    if output == "json":
        click.echo(json.dumps([_as_json(device, e) for device, e in results], indent=2))
        return
    width = max((len(device.name) for device in devices), default=10)
    labels = {Outcome.MATCH: "MATCH", Outcome.NO_MATCH: "NO MATCH", Outcome.ERROR: "ERROR"}
    for device, explanation in results:
        where = f"{device.driver} {device.pool or device.slice_name}".strip()
        line = f"{labels[explanation.outcome]:<9} {device.name:<{width}}  [{where}]"
        if explanation.reason:
            line += f"  {explanation.reason}"
        click.echo(line)
    click.echo(
        f"{len(devices)} devices: {counts[Outcome.MATCH]} match, {counts[Outcome.NO_MATCH]} do not match, "
        f"{counts[Outcome.ERROR]} error" + ("" if counts[Outcome.ERROR] == 1 else "s")
    )
    if counts[Outcome.ERROR]:
        click.echo(
            "warning: in Kubernetes a CEL runtime error on any device aborts the pod's whole scheduling "
            "attempt; `migdra cel lint` suggests guarded forms",
            err=True,
        )


def _as_json(device: SliceDevice, explanation: Any) -> dict[str, Any]:
    return {
        "device": device.name,
        "driver": device.driver,
        "pool": device.pool,
        "slice": device.slice_name,
        "outcome": explanation.outcome.value,
        "reason": explanation.reason,
        "clauses": [
            {"clause": c.index, "text": c.text, "outcome": c.outcome.value, "error": c.error}
            for c in explanation.clauses
        ],
    }


def _check_driver(driver: str | None) -> None:
    from dra_driver.devicemodel.naming import driver_name_problem  # noqa: PLC0415

    problem = driver_name_problem(driver) if driver is not None else None
    if problem is not None:
        raise ConfigurationError(f"--driver {driver!r}: not a DRA driver name: it {problem}")


def _slice_documents(path: Path) -> list[Document]:
    """The ResourceSlices of one ``--slices`` file; anything else in it is a mistake worth saying."""
    from dra_driver.tools.cel.documents import load_documents  # noqa: PLC0415

    documents = load_documents(path)
    if not documents:
        raise ConfigurationError(f"--slices {path}: no ResourceSlices in it (the file is empty)")
    for document in documents:
        if document.kind != "ResourceSlice":
            what = document.label if document.kind else "an object without kind"
            raise ConfigurationError(
                f"--slices {path}: {what} is not a ResourceSlice; --slices takes ResourceSlices "
                "(e.g. `kubectl get resourceslices -o yaml`, or `migdra slices -o yaml`)"
            )
    return documents


# Seconds to connect to the API server and to wait for each page: `cel eval` is interactive.
_CONNECT_TIMEOUT_S = 10.0
_READ_TIMEOUT_S = 15.0


def _cluster_slices(kubeconfig: Path | None, driver: str | None) -> list[Document]:
    """Every ``resource.k8s.io/v1`` ResourceSlice, page by page, as the API server returns them.

    One attempt per page, bounded in time: an unreachable server is one line naming it, at once.
    """
    from dra_driver.kube.client import SLICES, Client  # noqa: PLC0415 -- only this option needs the client
    from dra_driver.kube.config import load_client_configuration  # noqa: PLC0415
    from dra_driver.kube.failures import ApiRequestError, as_request_error  # noqa: PLC0415
    from dra_driver.tools.cel.documents import Document  # noqa: PLC0415

    configuration = load_client_configuration(kubeconfig, flag="--kubeconfig", usual_rules=True)
    server = str(configuration.host)
    api = Client(configuration=configuration, timeout=(_CONNECT_TIMEOUT_S, _READ_TIMEOUT_S))
    try:
        selector = f"spec.driver={driver}" if driver else None
        items, _ = api.list(SLICES, field_selector=selector, page_size=500)
    except json.JSONDecodeError as exc:
        raise ApiRequestError(
            f"listing ResourceSlices: {server} did not answer with JSON (is it a Kubernetes API server?)"
        ) from exc
    except (ValueError, KeyError) as exc:  # JSON, but not a Kubernetes list
        raise ApiRequestError(f"listing ResourceSlices: {server} did not answer with a list") from exc
    except Exception as exc:
        raise as_request_error(exc, "listing ResourceSlices", server) from exc
    finally:
        api.close()
    return [Document("cluster", {"kind": "ResourceSlice", **item}) for item in items]


@cel.command(name="lint")
@click.argument("files", type=click.Path(exists=True, path_type=Path), nargs=-1, required=True)
@click.option("--driver", default=DEFAULT_DRIVER_NAME, show_default=True, help="the driver whose vocabulary applies")
@click.option(
    "--classes",
    "class_paths",
    type=click.Path(exists=True, path_type=Path),
    multiple=True,
    help="DeviceClass files or directories used as context for claims (not linted; repeatable)",
)
def lint_command(files: tuple[Path, ...], driver: str, class_paths: tuple[Path, ...]) -> None:
    """Lint the CEL selectors of DeviceClasses, ResourceClaims and ResourceClaimTemplates in FILES.

    FILES may be directories (their *.yaml, *.yml and *.json files, recursively; other kinds of objects
    there are skipped).  Reports compile errors, non-bool results, attributes and capacities DRIVER
    never publishes, and lookups that can raise at run time (which abort scheduling in Kubernetes),
    each with its YAML path and a suggested guarded form.  Exit code 1 when there is any error; 2
    when an input cannot be linted (not YAML, malformed objects, nothing to lint).
    """
    from dra_driver.tools.cel.documents import load_documents, selector_sites  # noqa: PLC0415
    from dra_driver.tools.cel.lint import Linter, Severity  # noqa: PLC0415

    _check_driver(driver)
    classes: dict[str, tuple[str, ...]] = {}
    for path in class_paths:
        for class_file in sorted(path.rglob("*.y*ml")) if path.is_dir() else [path]:
            for document in load_documents(class_file):
                if document.kind == "DeviceClass":
                    classes[document.name] = tuple(site.expression for site in selector_sites(document))

    documents = [document for path in files for document in _lint_documents(path)]
    linter = Linter(driver, classes, classes_complete=bool(class_paths))
    findings = linter.lint_documents(documents)
    for finding in findings:
        click.echo(finding.render())
    sites = sum(len(selector_sites(document)) for document in documents)
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    warnings = len(findings) - errors
    click.echo(f"{sites} selectors in {len(documents)} objects: {errors} errors, {warnings} warnings")
    if errors:
        raise SystemExit(1)


def _lint_documents(path: Path) -> list[Document]:
    """The objects to lint in a FILES argument.  A file must hold at least one of the kinds lint checks;
    a directory's files may hold anything else too, but the directory must hold at least one."""
    from dra_driver.tools.cel.documents import holds_selectors, load_documents  # noqa: PLC0415

    kinds = "DeviceClass, ResourceClaim or ResourceClaimTemplate (resource.k8s.io)"
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml", ".json"} and p.is_file())
        documents = [d for file in files for d in load_documents(file) if holds_selectors(d)]
        if not files:
            raise ConfigurationError(f"{path}: nothing to lint: the directory holds no *.yaml, *.yml or *.json files")
        if not documents:
            raise ConfigurationError(
                f"{path}: nothing to lint: none of its {len(files)} YAML/JSON files holds a {kinds}"
            )
        return documents
    documents = load_documents(path)
    if not documents:
        raise ConfigurationError(f"{path}: nothing to lint: the file holds no objects; give a {kinds}")
    lintable = [d for d in documents if holds_selectors(d)]
    if not lintable:
        found = ", ".join(d.label if d.kind else "an object without kind" for d in documents[:3])
        more = f" and {len(documents) - 3} more" if len(documents) > 3 else ""
        raise ConfigurationError(f"{path}: nothing to lint: {found}{more} is not a {kinds}")
    return lintable
