"""The suite's tiers follow from folders (tests/conftest.py, docs/testing.md), and the check tier refuses to
start processes: a test in the wrong folder fails instead of slowing every ``make check`` down."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import TESTS, _no_process_started, tier_of


@pytest.mark.parametrize(
    ("path", "tier"),
    [
        ("unit/test_x.py", "check"),
        ("unit/allocation/test_x.py", "check"),
        ("devcluster/unit/test_x.py", "check"),
        ("devcluster/integration/test_x.py", "integration"),
        ("integration/helm/test_x.py", "integration"),
        ("e2e/test_x.py", "e2e"),
        ("kube/test_x.py", "kube"),
        ("perf/test_x.py", "perf"),
        ("test_x.py", None),
        ("devcluster/test_x.py", None),
    ],
)
def test_a_test_has_the_tier_of_its_nearest_tier_folder(path: str, tier: str | None) -> None:
    assert tier_of(TESTS / path) == tier


def test_a_test_here_carries_the_check_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("check") is not None
    assert request.node.get_closest_marker("integration") is None


@pytest.mark.parametrize(
    ("start", "named"),
    [
        (lambda: subprocess.run([sys.executable, "-c", "pass"], check=False), "subprocess.Popen("),
        (lambda: os.system("true"), "os.system"),
        (lambda: os.fork(), "os.fork"),  # noqa: PLW0108 -- looked up when called: the guard patches os.fork
        (lambda: os.posix_spawn(sys.executable, [sys.executable], {}), "os.posix_spawn"),
        (lambda: multiprocessing.Process(target=print).start(), "multiprocessing.Process("),
    ],
    ids=["subprocess", "system", "fork", "posix_spawn", "multiprocessing"],
)
def test_the_check_tier_refuses_every_way_to_start_a_process(start: Callable[[], object], named: str) -> None:
    with _no_process_started() as started, pytest.raises(pytest.fail.Exception) as refused:
        start()
    assert str(refused.value).startswith(f"the check tier starts no process, this test started {named}")
    assert "move it to tests/integration" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert len(started) == 1
