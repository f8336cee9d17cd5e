"""What the node plugin's liveness check asks (kubeletplugin/app.py): kubelet's sockets, the publish
loop, and every other background loop it started -- a dead claim status reporter, realizer, fault
watcher or occupancy loop makes the process not alive, so kubelet restarts it instead of leaving claim
status, realization or taints silently stopped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kubeletplugin import app
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings


class _Loop:
    """A started background loop whose liveness is what the test says."""

    def __init__(self, problem: str | None) -> None:
        self.problem = problem

    def liveness_problem(self) -> str | None:
        return self.problem


class _Served:
    paths = Path("/nonexistent")


@pytest.fixture
def publishing() -> Publishing:
    return Publishing(PluginSettings(node_name="node-1"), CollectorRegistry(), threading.Event())


@pytest.fixture(autouse=True)
def sockets_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "probe_sockets", lambda paths: None)


def _problem(publishing: Publishing, loops: list[Any], served: bool = True) -> str | None:
    plugin = PluginSettings(node_name="node-1")
    return app._liveness_problem(plugin, publishing, [_Served()] if served else [], loops)  # type: ignore[list-item]


def test_alive_when_every_loop_is(publishing: Publishing) -> None:
    assert _problem(publishing, [_Loop(None), _Loop(None)]) is None


def test_a_dead_loop_makes_the_process_not_alive(publishing: Publishing) -> None:
    loops = [_Loop(None), _Loop("migdra-claim-reporter: its thread is not running"), _Loop("later")]
    assert _problem(publishing, loops) == "migdra-claim-reporter: its thread is not running"


def test_not_alive_before_kubelets_sockets_are_served(publishing: Publishing) -> None:
    assert _problem(publishing, [], served=False) == "starting: kubelet's sockets are not served yet"


def test_publishings_occupancy_loop_counts(publishing: Publishing, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _Loop("migdra-placement-occupancy: no pass has finished for 200 s (stuck after 180 s)")
    monkeypatch.setattr(publishing, "loops", lambda: (dead,))
    assert _problem(publishing, [_Loop(None)]) == dead.problem
    assert app._publishing_problem(PluginSettings(node_name="node-1"), publishing) == dead.problem
