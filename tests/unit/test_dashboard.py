"""The Grafana dashboard the Helm chart ships (helm/migdra/dashboards/migdra.json) is dashboard JSON
Grafana loads (panels with targets, unique ids, the two template variables), and every metric its
queries use is one the node plugin or the reservation controller registers -- so renaming or
dropping a metric fails here instead of leaving an empty panel in someone's Grafana."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.controller.occupancy_metrics import OccupancyMetrics
from dra_driver.controller.reservation_metrics import ReservationMetrics
from kubeletplugin.grpc.registration import RegistrationServicer
from kubeletplugin.metrics import FaultMetrics, PrepareMetrics, PublishMetrics, RealizeMetrics, register_mig_instances

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "migdra" / "dashboards" / "migdra.json"
# Metrics the dashboard may use before the part of issue #16 that registers them is merged, each with
# its owner; empty now that the device taints (FaultMetrics) are in.
PROVIDED_ELSEWHERE: set[str] = set()
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
_METRIC = re.compile(r"\bmigdra_[a-z0-9_]+")


def _declared_names() -> set[str]:
    """Every sample name the plugin's and the controller's registries can expose."""
    plugin, controller = CollectorRegistry(), CollectorRegistry()
    PublishMetrics(plugin)
    PrepareMetrics(plugin)
    RealizeMetrics(plugin)
    FaultMetrics(plugin)
    RegistrationServicer("gpu.migdra.io", Path("/plugins/dra.sock"), ["v1.DRAPlugin"], plugin)
    register_mig_instances(plugin, "node-1", list)
    ReservationMetrics(controller)
    OccupancyMetrics(controller)
    names = set()
    for registry in (plugin, controller):
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return found


def test_it_has_the_shape_grafana_loads(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"]
    assert dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    panels = _panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']}: no queries"
        assert all(target["expr"] and target["refId"] for target in panel["targets"]), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["type"] == "query"
    assert "label_values(" in variables["node"]["definition"]


def test_every_metric_it_queries_is_registered(dashboard: dict[str, Any]) -> None:
    declared = _declared_names()
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in _METRIC.findall(expr)}
    assert used, "no migdra metric found in the queries"
    unknown = used - declared - PROVIDED_ELSEWHERE
    assert not unknown, f"the dashboard queries metrics nobody registers: {sorted(unknown)}"


def test_the_check_catches_a_renamed_metric(dashboard: dict[str, Any]) -> None:
    renamed = json.loads(json.dumps(dashboard).replace("migdra_claim_duration_seconds", "migdra_claim_latency_seconds"))
    with pytest.raises(AssertionError, match="migdra_claim_latency_seconds_bucket"):
        test_every_metric_it_queries_is_registered(renamed)
