"""Every DeviceClass of deviceclasses/ and every manifest of demo/ is accepted by the real kube-apiserver
(its validation, CEL compilation and cost limits included), and malformed ones are refused by it with the
same status, reason and field paths as by migdra's local API server.

Both servers get the same request: a server-side dry run (``dryRun=All``), so nothing is stored and one
cluster serves every case.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import CLAIM_TEMPLATES, CLAIMS, DEVICE_CLASSES, PODS, Client, Kind
from migdra_devcluster.apiserver import LocalAPIServer
from tests.kube.cluster import kube_cluster
from tests.sim_cluster import REPO

pytestmark = pytest.mark.xdist_group("kube-manifests")

KINDS = {kind.kind: kind for kind in (DEVICE_CLASSES, CLAIM_TEMPLATES, CLAIMS, PODS)}
MANIFESTS = sorted(
    [*REPO.glob("deviceclasses/*.yaml"), *REPO.glob("deviceclasses/examples/*.yaml"), *REPO.glob("demo/**/*.yaml")]
)


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


@pytest.fixture(scope="module")
def real() -> Iterator[Client]:
    """The real kube-apiserver, with admin rights."""
    with kube_cluster("--nodes", "1", "--gpus", "H100-SXM5-80GB:1") as sim:
        yield sim.client


@pytest.fixture
def local(api_server: LocalAPIServer, tmp_path: Path) -> Iterator[Client]:
    """migdra's local API server (one per test: its request threads end with it)."""
    api_server.write_kubeconfig(tmp_path / "kubeconfig")
    client = Client(tmp_path / "kubeconfig")
    try:
        yield client
    finally:
        client.close()


def dry_run_create(client: Client, document: dict[str, Any]) -> dict[str, Any]:
    kind: Kind = KINDS[document["kind"]]
    metadata = document.get("metadata") or {}
    if kind.namespaced and not metadata.get("namespace"):  # where `kubectl create` would put it
        document = {**document, "metadata": {**metadata, "namespace": "default"}}
    return client.create(kind, document, dry_run=True)


@pytest.mark.parametrize("path", MANIFESTS, ids=[str(p.relative_to(REPO)) for p in MANIFESTS])
def test_every_shipped_manifest_is_accepted_by_kube_apiserver(real: Client, path: Path) -> None:
    found = documents(path)
    assert found, path
    for document in found:
        if document["kind"] == "DeviceClass":  # `sim up` installed these very names
            document["metadata"]["name"] = "dry-run-" + document["metadata"]["name"]
        answer = dry_run_create(real, document)
        assert answer["kind"] == document["kind"]
        assert answer["metadata"]["name"] == document["metadata"]["name"]


def refusal(client: Client, document: dict[str, Any]) -> tuple[int, str, list[str]]:
    """(HTTP status, reason, the causes' field paths) of a refused create."""
    with pytest.raises(ApiException) as caught:
        dry_run_create(client, document)
    status = json.loads(caught.value.body)
    causes = sorted(cause.get("field", "") for cause in (status.get("details") or {}).get("causes") or [])
    return caught.value.status, status.get("reason", ""), causes


def _class() -> dict[str, Any]:
    return documents(REPO / "deviceclasses" / "mig.migdra.io.yaml")[0]


def _template() -> dict[str, Any]:
    return next(d for d in documents(REPO / "demo" / "02-mig-3g.yaml") if d["kind"] == "ResourceClaimTemplate")


def _pod() -> dict[str, Any]:
    return next(d for d in documents(REPO / "demo" / "02-mig-3g.yaml") if d["kind"] == "Pod")


def _with(make: Callable[[], dict[str, Any]], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = copy.deepcopy(make())
    change(document)
    return document


def _request(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["spec"]["devices"]["requests"][0]


def _set_cel(document: dict[str, Any], expression: str) -> None:
    document["spec"]["selectors"][0]["cel"]["expression"] = expression


MALFORMED: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("class CEL does not compile", lambda: _with(_class, lambda d: _set_cel(d, "device.attributes['x'].y =="))),
    ("class CEL is not bool", lambda: _with(_class, lambda d: _set_cel(d, "device.driver"))),
    ("class CEL unknown field", lambda: _with(_class, lambda d: _set_cel(d, "device.nosuchfield == 'x'"))),
    ("class name not DNS", lambda: _with(_class, lambda d: d["metadata"].update(name="Not_A_Name"))),
    ("template count -1", lambda: _with(_template, lambda d: _request(d)["exactly"].update(count=-1))),
    (
        "template without class",
        lambda: _with(_template, lambda d: _request(d)["exactly"].pop("deviceClassName")),
    ),
    (
        "template bad allocation mode",
        lambda: _with(_template, lambda d: _request(d)["exactly"].update(allocationMode="Some")),
    ),
    ("template request name", lambda: _with(_template, lambda d: _request(d).update(name="Bad Name"))),
    (
        "template duplicate request",
        lambda: _with(_template, lambda d: d["spec"]["spec"]["devices"]["requests"].append(copy.deepcopy(_request(d)))),
    ),
    (
        "pod claim without source",
        lambda: _with(_pod, lambda d: d["spec"]["resourceClaims"][0].pop("resourceClaimTemplateName")),
    ),
    (
        "pod claim with both sources",
        lambda: _with(_pod, lambda d: d["spec"]["resourceClaims"][0].update(resourceClaimName="also")),
    ),
]


@pytest.mark.parametrize("make", [m for _, m in MALFORMED], ids=[name for name, _ in MALFORMED])
def test_a_malformed_manifest_is_refused_alike_by_both_servers(
    real: Client, local: Client, make: Callable[[], dict[str, Any]]
) -> None:
    document = make()
    expected = refusal(real, document)
    assert expected[0] == 422, expected
    assert refusal(local, document) == expected
