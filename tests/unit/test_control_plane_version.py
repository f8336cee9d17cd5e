"""What the control plane's version changes in what the node plugin publishes
(kubeletplugin/control_plane_version.py):

- shared GPU-instance devices only where kube-scheduler counts committed shares when it rebuilds
  counters (kubernetes#139040, Kubernetes 1.36.2): before that an exclusive device overlapping a shared
  one may be allocated in a later scheduling cycle;
- the dynamic policy's interleaving only where kube-scheduler visits slices in name order (1.36+);
- a notice, once, where kube-scheduler gathers every node's counter slice for every node (before 1.37:
  kubernetes#138917)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.policy import DynamicPlacementPolicy
from dra_driver.devicemodel.pool import OwnedInstances, build_pool
from kubeletplugin.control_plane_version import ControlPlaneVersion, shared_devices_problem
from kubeletplugin.publisher import RoundFailure, classify_round_failure
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings


@pytest.mark.parametrize(
    ("version", "allowed"),
    [
        ("v1.36.2", True),
        ("v1.36.5", True),
        ("v1.37.0-alpha.1", True),
        ("v1.37.0-migdra-local", True),
        ("v2.0.0", True),
        ("v1.36.1", False),
        ("v1.36.0", False),
        ("v1.35.4+k3s1", False),
        ("v1.34.9-gke.100", False),
        ("not-a-version", True),  # a distribution's own numbering: not turned off on a guess
    ],
)
def test_which_versions_get_shared_devices(version: str, allowed: bool) -> None:
    problem = shared_devices_problem(version)
    assert (problem is None) is allowed
    if problem is not None:
        assert version in problem
        assert "kubernetes/kubernetes#139040" in problem
        assert "sharedDevices: false" in problem


class _Server:
    """The API client as publishing asks it: the server's version, or an outage."""

    def __init__(self, version: str | None) -> None:
        self.version = version
        self.asked = 0

    def server_version(self) -> str:
        self.asked += 1
        if self.version is None:
            raise ConnectionRefusedError("connection refused")
        return self.version


def _shared_names(publishing: Publishing) -> set[str]:
    config = publishing._effective_config()
    pool = build_pool(example_inventory(["H100"]), config)
    return {device.name for device in pool.devices if "-shared-" in device.name}


@pytest.fixture
def publishing(tmp_path: Any) -> Publishing:
    """A plugin whose device configuration asks for shared devices (they are off by default)."""
    config_file = tmp_path / "devices.yaml"
    config_file.write_text("sharedDevices: true\n")
    settings = PluginSettings(node_name="node-1", device_config=config_file)
    return Publishing(settings, CollectorRegistry(), threading.Event())


def test_an_old_control_plane_gets_no_shared_devices_and_is_asked_once(publishing: Publishing) -> None:
    server = _Server("v1.36.1")
    publishing._client = server  # type: ignore[assignment]
    assert _shared_names(publishing) == set()
    assert _shared_names(publishing) == set()
    assert server.asked == 1


def test_a_new_control_plane_gets_them(publishing: Publishing) -> None:
    publishing._client = _Server("v1.36.5")  # type: ignore[assignment]
    assert _shared_names(publishing), "an H100 of the example inventory has shareable profiles"


def test_an_outage_fails_the_round_until_the_version_is_known(publishing: Publishing) -> None:
    """An unanswered version fails the round (the publish loop retries it after its backoff) instead of
    publishing a pool without shared devices that only the next rescan would correct."""
    server = _Server(None)
    publishing._client = server  # type: ignore[assignment]
    with pytest.raises(ConnectionRefusedError):
        _shared_names(publishing)
    assert classify_round_failure(ConnectionRefusedError("refused")) is RoundFailure.API_UNAVAILABLE
    server.version = "v1.37.2"
    assert _shared_names(publishing)
    assert server.asked == 2


def test_live_shares_keep_shared_devices_published_whatever_the_setting_or_version(tmp_path: Any) -> None:
    """kube-scheduler counts an allocated device's counters only while the device is published: while
    a share lives on the node its shared device stays in the slices, so no overlapping exclusive
    device becomes allocatable; sharedDevices: false takes effect once the last share is gone."""
    config_file = tmp_path / "devices.yaml"
    config_file.write_text("sharedDevices: false\n")
    off = Publishing(
        PluginSettings(node_name="node-1", device_config=config_file), CollectorRegistry(), threading.Event()
    )
    assert not off._effective_config(live_shares=0).shared_devices
    assert off._effective_config(live_shares=2).shared_devices
    wanted = tmp_path / "shared.yaml"
    wanted.write_text("sharedDevices: true\n")
    old = Publishing(PluginSettings(node_name="node-1", device_config=wanted), CollectorRegistry(), threading.Event())
    server = _Server("v1.36.1")
    old._client = server  # type: ignore[assignment]
    assert old._effective_config(live_shares=1).shared_devices
    assert not old._effective_config(live_shares=0).shared_devices


class _Shares:
    """The prepare service as publishing asks it: nothing owned, ``count`` live shares."""

    def __init__(self, count: int) -> None:
        self.count = count

    def owned(self) -> OwnedInstances:
        return OwnedInstances()

    def live_shares(self) -> int:
        return self.count

    def share_compute_instances(self) -> dict[Any, Any]:
        return {}


def test_a_round_asks_the_checkpoint_for_live_shares(tmp_path: Any, simulated_node: Any) -> None:
    config_file = tmp_path / "devices.yaml"
    config_file.write_text("sharedDevices: false\n")
    publishing = Publishing(
        PluginSettings(node_name="node-1", device_config=config_file), CollectorRegistry(), threading.Event()
    )
    with simulated_node("H100-SXM5-80GB:1") as nvml:
        quiet = publishing.compute_pool(nvml, _Shares(0))
        assert not [d for d in quiet.devices if "-shared-" in d.name]
        live = publishing.compute_pool(nvml, _Shares(1))
        assert [d for d in live.devices if "-shared-" in d.name]


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
