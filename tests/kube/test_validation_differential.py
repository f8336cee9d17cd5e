"""``migdra allocate``'s validation of hand-written objects (:mod:`dra_driver.tools.validation`, a mirror of
kube-apiserver's) judged by kube-apiserver itself: every shipped manifest passes both, and each malformed
one is refused by both, naming the same fields.

kube-apiserver gets a server-side dry run (``dryRun=All``): nothing is stored.  The mirror is what runs
when ``migdra allocate`` or ``migdra plan`` reads a file, where no API server is at hand.
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
from dra_driver.tools.validation import validate, validate_object_meta
from tests.kube_apiserver import KubeApiServer
from tests.sim_cluster import REPO

KINDS = {kind.kind: kind for kind in (DEVICE_CLASSES, CLAIM_TEMPLATES, CLAIMS, PODS)}
MANIFESTS = sorted(
    [*REPO.glob("deviceclasses/*.yaml"), *REPO.glob("deviceclasses/examples/*.yaml"), *REPO.glob("demo/**/*.yaml")]
)


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


@pytest.fixture
def real(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Client]:
    client = Client(api_server.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield client
    finally:
        client.close()


def placed(document: dict[str, Any]) -> dict[str, Any]:
    """In ``default`` when namespaced and given no namespace, where ``kubectl create`` puts it."""
    kind: Kind = KINDS[document["kind"]]
    metadata = document.get("metadata") or {}
    if kind.namespaced and not metadata.get("namespace"):
        return {**document, "metadata": {**metadata, "namespace": "default"}}
    return document


def kube_refusal(client: Client, document: dict[str, Any]) -> list[str]:
    """The fields kube-apiserver's 422 names for a create of ``document`` ([] when it accepts it)."""
    try:
        client.create(KINDS[document["kind"]], placed(document), dry_run=True)
    except ApiException as exc:
        refused = exc
    else:
        return []
    assert refused.status == 422, (refused.status, refused.body)
    status = json.loads(refused.body)
    return sorted({cause.get("field", "") for cause in (status.get("details") or {}).get("causes") or []})


def mirror_refusal(document: dict[str, Any]) -> list[str]:
    """The fields migdra's mirror names, as ``migdra allocate`` runs it."""
    body = placed(document)
    group, _, version = body["apiVersion"].rpartition("/")
    errors = validate_object_meta(body, KINDS[body["kind"]].namespaced, "dns-subdomain")
    errors += validate(group, version, body["kind"], body, None, None)
    return sorted({error.field for error in errors})


@pytest.mark.parametrize("path", MANIFESTS, ids=[str(p.relative_to(REPO)) for p in MANIFESTS])
def test_every_shipped_manifest_passes_both(real: Client, path: Path) -> None:
    for document in documents(path):
        assert kube_refusal(real, document) == [], document["metadata"]
        assert mirror_refusal(document) == [], document["metadata"]


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
    request: dict[str, Any] = template["spec"]["spec"]["devices"]["requests"][0]
    return request


def _set_cel(document: dict[str, Any], expression: str) -> None:
    document["spec"]["selectors"][0]["cel"]["expression"] = expression


MALFORMED: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("class CEL does not compile", lambda: _with(_class, lambda d: _set_cel(d, "device.attributes['x'].y =="))),
    ("class CEL is not bool", lambda: _with(_class, lambda d: _set_cel(d, "device.driver"))),
    ("class CEL unknown field", lambda: _with(_class, lambda d: _set_cel(d, "device.nosuchfield == 'x'"))),
    ("class name not DNS", lambda: _with(_class, lambda d: d["metadata"].update(name="Not_A_Name"))),
    ("class label value too long", lambda: _with(_class, lambda d: d["metadata"].update(labels={"a": "x" * 64}))),
    ("template count -1", lambda: _with(_template, lambda d: _request(d)["exactly"].update(count=-1))),
    ("template without class", lambda: _with(_template, lambda d: _request(d)["exactly"].pop("deviceClassName"))),
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
def test_a_malformed_manifest_is_refused_by_both_naming_the_same_fields(
    real: Client, make: Callable[[], dict[str, Any]]
) -> None:
    document = make()
    expected = kube_refusal(real, document)
    assert expected, "kube-apiserver accepted it: the case tests nothing"
    assert mirror_refusal(document) == expected
