"""The tiers of the suite, and the fixtures every tier shares: a simulated NVML node in a temporary state file,
opened through the real backend.

A test's tier follows from the folder it lives in (docs/testing.md), never from a hand-placed marker: the
nearest enclosing folder named in ``TIERS``, at any depth (``tests/unit`` and ``tests/<area>/unit`` are
both the check tier), gives the test that tier's marker, so ``pytest -m check`` or ``-m "not kube"`` select
by tier.  A test in no tier folder stops the run: it would belong to no ``-m`` selection.

The check tier is what ``make check`` runs in under 90 seconds, so it is enforced: a test there (or its
fixtures) that starts a process fails with one line saying where it belongs, instead of silently slowing
every ``make check`` down.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pynvml
import pytest
from hypothesis import HealthCheck, settings

from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from tests.kube_apiserver import KubeApiServer, SharedKubeApiServer, kube_apiserver, require_kube_binaries

TESTS = Path(__file__).resolve().parent

TIERS = {
    "unit": ("check", "tests that start no process: pure code, table-driven (make check)"),
    "integration": ("integration", "one component at a time over real sockets, servers and processes"),
    "e2e": ("e2e", "whole flows on simulated clusters (migdra sim up), on every Kubernetes version built"),
    "kube": ("kube", "migdra judged against upstream: kube-scheduler's allocation, the chart's access"),
    "perf": ("perf", "pinned NVML call counts and file writes"),
    "node": ("node", "a real node: the upstream kubelet, containerd with CDI and runc (root, make node)"),
}
"""Folder name -> (tier marker, what the tier holds).  ``make check`` runs the ``check`` tier."""

OpenSimulatedNode = Callable[..., AbstractContextManager[Nvml]]
Boot = Callable[..., Any]

# Hypothesis' per-example deadline and its too-slow health check are timings: on a loaded machine they
# fail properties that hold.  A property is judged by its assertions alone.
settings.register_profile("migdra", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("migdra")


# -- tiers ------------------------------------------------------------------------------------------


def tier_of(path: Path) -> str | None:
    """The tier of a test file: that of the nearest enclosing folder named in ``TIERS``, if any."""
    for folder in reversed(path.relative_to(TESTS).parts[:-1]):
        if folder in TIERS:
            return TIERS[folder][0]
    return None


def pytest_configure(config: pytest.Config) -> None:
    for tier, holds in TIERS.values():
        config.addinivalue_line("markers", f"{tier}: the {tier} tier, {holds} (given by the folder)")
    config.pluginmanager.register(XdistGroupCheck(), "migdra-xdist-group-check")
    if not hasattr(config, "workerinput"):  # the run's controller (or a run without workers) only
        config.pluginmanager.register(HostPathCheck(), "migdra-host-path-check")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    untiered: set[str] = set()
    for item in items:
        tier = tier_of(item.path) if item.path.is_relative_to(TESTS) else None
        if tier is None:
            untiered.add(str(item.path.relative_to(config.rootpath)))
        else:
            item.add_marker(tier)
    if untiered:
        folders = ", ".join(TIERS)
        raise pytest.UsageError(f"in no tier folder ({folders}; docs/testing.md): {', '.join(sorted(untiered))}")


class HostPathCheck:
    """Fails a run after which a host path the product writes by default exists that did not before: a
    test that leaves a setting at its production default writes into the host's kubelet directories
    (it happened: a crash-test child wrote KEP-5304 metadata under /var/lib/kubelet/plugins).  The real
    node's own host paths are restored by its stop and checked by the node tier."""

    PATHS = (Path("/var/lib/kubelet"), Path("/var/run/cdi"), Path("/etc/cdi"))

    def __init__(self) -> None:
        self.before = {path for path in self.PATHS if path.exists()}

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        left = sorted(str(path) for path in self.PATHS if path.exists() and path not in self.before)
        if left:
            print(f"\nthe tests left on the host what did not exist before the run: {', '.join(left)}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


class XdistGroupCheck:
    """Under ``--dist loadgroup`` every test marked ``xdist_group`` must carry its group in its id, which is
    how pytest-xdist keeps a group on one worker; with a pytest it cannot do that with (9.2) one group would
    silently run on two workers -- two real nodes on one host.  Registered by :func:`pytest_configure`."""

    @pytest.hookimpl(trylast=True)  # after pytest-xdist's worker added each test's group to its id
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):
            return
        ungrouped = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"pytest-xdist did not group {ungrouped[0]} (and {len(ungrouped) - 1} more)")


def _refuse(started: list[str], what: str) -> NoReturn:
    started.append(what)
    pytest.fail(
        f"the check tier starts no process, this test started {what}: move it to tests/integration "
        "(or the tier it belongs to, docs/testing.md)",
        pytrace=False,
    )


@contextmanager
def _no_process_started() -> Iterator[list[str]]:
    """Every way a test can start a process, refused while the block runs; yields what was refused.

    ``subprocess.Popen`` (so ``subprocess.run``, ``os.popen`` and asyncio's subprocesses), ``os.fork``
    (so ``os.spawn*`` and ``pty.fork``), ``os.forkpty``, ``os.posix_spawn[p]``, ``os.system`` and
    ``multiprocessing`` (whose forkserver would otherwise start processes without a fork in this one).
    """
    started: list[str] = []

    def popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> NoReturn:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        _refuse(started, f"subprocess.Popen({os.fspath(argv[0]) if argv else ''!s})")

    def start(self: multiprocessing.process.BaseProcess) -> NoReturn:
        _refuse(started, f"multiprocessing.Process({self.name})")

    def call(name: str) -> Callable[..., NoReturn]:
        return lambda *args, **kwargs: _refuse(started, f"os.{name}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", popen)
        patch.setattr(multiprocessing.process.BaseProcess, "start", start)
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            patch.setattr(os, name, call(name))
        yield started


def _guarded(item: pytest.Item) -> Generator[None, object, object]:
    """Run one phase of ``item`` (setup, call, teardown); in the check tier, with processes refused."""
    if item.get_closest_marker("check") is None:
        return (yield)
    with _no_process_started() as started:
        result = yield
    if started:  # refused in a thread, or the refusal was caught: the test still fails
        _refuse([], started[0])
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded(item))


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "state.json"


@pytest.fixture
def boot(state_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Boot]:
    """``boot(gpus, mig_enabled=True, **install_kwargs)``: install the simulator into a fresh state file,
    ``nvmlInit``, and return GPU 0's raw pynvml handle; always shut down and uninstall afterwards."""
    monkeypatch.delenv(sim.FAULTS_ENV, raising=False)
    installs = 0

    def _boot(gpus: list[str] | None = None, mig_enabled: bool = True, **kwargs: Any) -> Any:
        nonlocal installs
        sim.install(state_path, gpus=gpus or ["H100-SXM5-80GB"], mig_enabled=mig_enabled, **kwargs)
        installs += 1
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)

    yield _boot
    for _ in range(installs):
        with contextlib.suppress(pynvml.NVMLError):  # a test may have shut NVML down itself
            pynvml.nvmlShutdown()
        sim.uninstall()


@pytest.fixture
def simulated_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OpenSimulatedNode:
    """``with simulated_node("H100-SXM5-80GB:2", mig_enabled=True) as nvml: ...`` on a fresh state file."""
    monkeypatch.delenv("MIGDRA_SIM_FAULTS", raising=False)

    @contextmanager
    def open_node(gpus: str, *, mig_enabled: bool = True, state: Path | None = None) -> Iterator[Nvml]:
        settings = build_nvml_settings(
            nvml="simulated", sim_state=state or tmp_path / "nvml-sim.json", sim_gpus=gpus, sim_mig_enabled=mig_enabled
        )
        with open_nvml(settings) as nvml:
            yield nvml

    return open_node


SESSION_THREADS: set[threading.Thread] = set()
"""Threads of session-scoped fixtures: started during some test's set-up, rightly alive after it."""


@pytest.fixture(scope="session")
def shared_kube_api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedKubeApiServer]:
    """One kube-apiserver (on its own etcd) for every test of this pytest worker that asks for ``api_server``:
    started on first use, reset after each test (:mod:`tests.kube_reset`)."""
    require_kube_binaries()
    before = set(threading.enumerate())
    with kube_apiserver(tmp_path_factory.mktemp("shared-kube-apiserver")) as server:
        SESSION_THREADS.update(t for t in threading.enumerate() if t not in before)  # its output readers
        yield SharedKubeApiServer.prepare(server)


@pytest.fixture
def api_server(request: pytest.FixtureRequest) -> Iterator[KubeApiServer]:
    """The real kube-apiserver, shared with the other tests of this worker and holding none of their objects:
    whatever this test writes is deleted after it (a test that stops or restarts the server takes
    ``kube_api_server``, its own).  Skipped without ``make kube``'s binaries unless ``MIGDRA_REQUIRE_KUBE=1``."""
    require_kube_binaries()
    shared: SharedKubeApiServer = request.getfixturevalue("shared_kube_api_server")
    yield shared.server
    shared.reset()


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """A test must stop every thread it started (servers, loops, executors): leaks fail the test."""
    before = set(threading.enumerate())
    yield
    # A thread told to stop may still be returning: join it (bounded) rather than judge it mid-exit.
    deadline = time.monotonic() + 5.0
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaked = [t for t in started if t.is_alive() and t not in SESSION_THREADS]
    assert not leaked, f"threads left running: {sorted(t.name for t in leaked)}"


@pytest.fixture
def kube_api_server(tmp_path: Path) -> Iterator[KubeApiServer]:
    """The real kube-apiserver on its own etcd for one test (:mod:`tests.kube_apiserver`); skipped without
    ``make kube``'s binaries unless ``MIGDRA_REQUIRE_KUBE=1``."""
    require_kube_binaries()
    with kube_apiserver(tmp_path / "kube-apiserver") as server:
        yield server
