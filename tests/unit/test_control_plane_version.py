"""What the control plane's version changes in what the node plugin publishes: the dynamic policy's
interleaving (1.36+, where kube-scheduler visits slices in name order) and the scale warning (before
1.37, whose kube-scheduler gathers every node's counter slice for every node: kubernetes#138917)."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel.policy import DynamicPlacementPolicy
from kubeletplugin.control_plane_version import ControlPlaneVersion
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings


@pytest.mark.parametrize(
    ("version", "in_name_order", "scales"),
    [
        ("v1.35.4", False, False),
        ("v1.35.9+k3s1", False, False),
        ("v1.36.0", True, False),
        ("v1.36.6", True, False),
        ("v1.37.0-alpha.1", True, True),
        ("v1.37.2", True, True),
        ("v2.0.0", True, True),
        ("not-a-version", True, True),  # a distribution's own numbering: nothing turned off on a guess
    ],
)
def test_what_each_version_gets(version: str, in_name_order: bool, scales: bool) -> None:
    facts = ControlPlaneVersion.parse(version)
    assert facts.slices_in_name_order is in_name_order
    problem = facts.scale_problem()
    assert (problem is None) is scales
    if problem is not None:
        assert version in problem
        assert "kubernetes/kubernetes#138917" in problem
        assert "1.37.0 or later" in problem


class _Server:
    def __init__(self, version: str) -> None:
        self.version = version
        self.asked = 0

    def server_version(self) -> str:
        self.asked += 1
        return self.version


def _publishing(version: str) -> tuple[Publishing, _Server, CollectorRegistry]:
    registry = CollectorRegistry()
    publishing = Publishing(PluginSettings(node_name="node-1"), registry, threading.Event())
    server = _Server(version)
    publishing._client = server  # type: ignore[assignment]
    return publishing, server, registry


@pytest.mark.parametrize(("version", "interleaved"), [("v1.35.4", False), ("v1.36.5", True), ("v1.37.2", True)])
def test_the_dynamic_policy_interleaves_only_where_slices_are_visited_in_name_order(
    version: str, interleaved: bool
) -> None:
    publishing, server, _ = _publishing(version)
    assert isinstance(publishing.policy, DynamicPlacementPolicy)
    assert publishing.policy.interleave  # until the version is known: the 1.36+ order
    publishing._effective_config()
    publishing._effective_config()
    assert publishing.policy.interleave is interleaved
    assert server.asked == 1


@pytest.mark.parametrize(("version", "limited"), [("v1.36.5", 1.0), ("v1.37.2", 0.0)])
def test_an_affected_version_is_said_once_in_the_log_and_in_a_gauge(
    version: str, limited: float, caplog: pytest.LogCaptureFixture
) -> None:
    publishing, _, registry = _publishing(version)
    with caplog.at_level(logging.WARNING, logger="kubeletplugin.publishing"):
        publishing._effective_config()
        publishing._effective_config()
    assert registry.get_sample_value("migdra_control_plane_scale_limited") == limited
    warned = [record.getMessage() for record in caplog.records if "kubernetes/kubernetes#138917" in record.getMessage()]
    assert len(warned) == (1 if limited else 0)
