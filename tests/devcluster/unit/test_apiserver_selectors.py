"""Label and field selector parsing and matching, table-driven."""

from __future__ import annotations

import pytest

from migdra_devcluster.apiserver.errors import BadRequest
from migdra_devcluster.apiserver.registry import Registry
from migdra_devcluster.apiserver.selectors import parse_field_selector, parse_label_selector

LABELS = {"tier": "gpu", "zone": "a", "count": "3"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("", True, id="empty-matches-all"),
        pytest.param("tier=gpu", True, id="equals"),
        pytest.param("tier==gpu", True, id="double-equals"),
        pytest.param("tier=cpu", False, id="equals-other"),
        pytest.param("tier!=cpu", True, id="not-equals"),
        pytest.param("missing!=x", True, id="not-equals-matches-absent-key"),
        pytest.param("tier in (cpu, gpu)", True, id="in"),
        pytest.param("tier in (cpu)", False, id="in-miss"),
        pytest.param("tier notin (cpu)", True, id="notin"),
        pytest.param("missing notin (x)", True, id="notin-absent-key"),
        pytest.param("zone", True, id="exists"),
        pytest.param("missing", False, id="exists-miss"),
        pytest.param("!missing", True, id="not-exists"),
        pytest.param("!zone", False, id="not-exists-miss"),
        pytest.param("tier=gpu,zone in (a,b),!missing", True, id="conjunction"),
        pytest.param("tier=gpu,zone=b", False, id="conjunction-miss"),
        pytest.param("count>2", True, id="greater-than"),
        pytest.param("count<3", False, id="less-than"),
        pytest.param("example.com/tier!=x", True, id="prefixed-key"),
    ],
)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches({"metadata": {"labels": LABELS}}) is matches


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param("tier in (", id="unclosed-set"),
        pytest.param("bad key=x", id="space-in-key"),
        pytest.param("tier=bad value!", id="bad-value"),
        pytest.param("!tier=gpu", id="negated-comparison"),
        pytest.param("count>two", id="non-integer-bound"),
        pytest.param("-bad=x", id="key-starts-with-dash"),
    ],
)
def test_bad_label_selectors_are_bad_requests(selector: str) -> None:
    with pytest.raises(BadRequest):
        parse_label_selector(selector)


PODS = Registry().lookup("", "v1", "pods")
SLICES = Registry().lookup("resource.k8s.io", "v1", "resourceslices")
POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("metadata.name=p", True, id="name"),
        pytest.param("metadata.name==p", True, id="name-double-equals"),
        pytest.param("metadata.namespace!=ns", False, id="namespace-not-equals"),
        pytest.param("spec.nodeName=n1,status.phase=Running", True, id="conjunction"),
        pytest.param("spec.nodeName=", False, id="empty-value"),
        pytest.param("spec.schedulerName=", True, id="missing-field-reads-empty"),
    ],
)
def test_field_selector_matching(selector: str, matches: bool) -> None:
    assert PODS is not None
    assert parse_field_selector(selector, PODS).matches(POD) is matches


def test_field_selectors_are_per_resource() -> None:
    assert PODS is not None
    assert SLICES is not None
    slice_obj = {"metadata": {"name": "s"}, "spec": {"driver": "gpu.migdra.dev", "nodeName": "n1"}}
    assert parse_field_selector("spec.driver=gpu.migdra.dev,spec.nodeName=n1", SLICES).matches(slice_obj)
    with pytest.raises(BadRequest, match=r"field label not supported: spec\.driver"):
        parse_field_selector("spec.driver=x", PODS)
    with pytest.raises(BadRequest):
        parse_field_selector("metadata.name", PODS)
