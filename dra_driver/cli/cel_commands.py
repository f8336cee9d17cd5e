"""``migdra cel``: test DRA CEL selectors against ResourceSlices, and lint selectors in manifests.

Only presentation and input live here (files, the cluster, flags, output, exit codes); compiling,
evaluating, explaining and linting are library code in ``dra_driver.cel``.  Heavy imports happen
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
    from dra_driver.cel.documents import Document, SliceDevice

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

    Exit code 0 when the expression compiles (whatever the devices say), 1 when it does not.
    """
    from dra_driver.cel import CELCompileError, compile_selector  # noqa: PLC0415
    from dra_driver.cel.documents import load_documents, slice_devices  # noqa: PLC0415
    from dra_driver.cel.explain import Outcome, explain  # noqa: PLC0415

    if bool(slice_files) == from_cluster:
        raise click.UsageError("give --slices FILE or --from-cluster (one of them)")
    try:
        program = compile_selector(expression, runner=runner)
    except CELCompileError as exc:
        click.echo(f"compile error:\n{exc.details()}", err=True)
        raise SystemExit(1) from exc

    documents: list[Document] = []
    if from_cluster:
        documents = _cluster_slices(kubeconfig, driver)
    for path in slice_files:
        documents += load_documents(path)
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


def _cluster_slices(kubeconfig: Path | None, driver: str | None) -> list[Document]:
    """Every ``resource.k8s.io/v1`` ResourceSlice, page by page, as the API server returns them."""
    from kubernetes import client  # noqa: PLC0415 -- only this option needs the client
    from kubernetes import config as kube_config_module  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

    from dra_driver.cel.documents import Document  # noqa: PLC0415

    kube_config: Any = kube_config_module  # its loaders carry no type annotations
    try:
        if kubeconfig is not None:
            api_client = kube_config.new_client_from_config(config_file=str(kubeconfig))
        else:
            try:
                api_client = kube_config.new_client_from_config()
            except ConfigException:
                kube_config.load_incluster_config()
                api_client = client.ApiClient()
    except (ConfigException, OSError) as exc:
        raise ConfigurationError(f"cannot load a kubeconfig: {exc}") from exc
    documents: list[Document] = []
    with api_client:
        resource = client.ResourceV1Api(api_client)
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            if driver:
                kwargs["field_selector"] = f"spec.driver={driver}"
            try:
                response: Any = resource.list_resource_slice(**kwargs)  # raw HTTP response: unparsed JSON
            except ApiException as exc:
                raise ConfigurationError(f"listing ResourceSlices failed: {exc.status} {exc.reason}") from exc
            except OSError as exc:
                raise ConfigurationError(f"cannot reach the API server: {exc}") from exc
            body = json.loads(response.data)
            documents += [Document("cluster", {"kind": "ResourceSlice", **item}) for item in body.get("items") or []]
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return documents


@cel.command(name="lint")
@click.argument("files", type=_FILE, nargs=-1, required=True)
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

    Reports compile errors, non-bool results, attributes and capacities DRIVER never publishes, and
    lookups that can raise at run time (which abort scheduling in Kubernetes), each with its YAML path
    and a suggested guarded form.  Exit code 1 when there is any error.
    """
    from dra_driver.cel.documents import load_documents, selector_sites  # noqa: PLC0415
    from dra_driver.cel.lint import Linter, Severity  # noqa: PLC0415

    classes: dict[str, tuple[str, ...]] = {}
    for path in class_paths:
        for class_file in sorted(path.rglob("*.y*ml")) if path.is_dir() else [path]:
            for document in load_documents(class_file):
                if document.kind == "DeviceClass":
                    classes[document.name] = tuple(site.expression for site in selector_sites(document))

    documents = [document for path in files for document in load_documents(path)]
    linter = Linter(driver, classes)
    findings = linter.lint_documents(documents)
    for finding in findings:
        click.echo(finding.render())
    sites = sum(len(selector_sites(document)) for document in documents)
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    warnings = len(findings) - errors
    click.echo(f"{sites} selectors in {len(documents)} objects: {errors} errors, {warnings} warnings")
    if errors:
        raise SystemExit(1)
