"""Crash recovery of shares: kill -9 at every step of a share's prepare and unprepare, then restart.

A child plugin process (tests/prepare_harness.py) prepares or unprepares a share and is SIGKILLed at
a crash point of the service (``MIGDRA_TEST_CRASH_AT``) or inside an NVML call (the simulator's
``kill_before`` / ``kill_after``).  A new service on the same files must converge: no GI or CI of the
crashed share left, the other share's GI and CI untouched (never destroyed while it lives), and the
crashed claim prepared and released cleanly afterwards.
"""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kubelet.calls import ClaimRef
from dra_driver.nvml import sim
from kubeletplugin.prepare.cdi import spec_path
from tests.integration.test_prepare_recovery import run_child
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
SHARED = "gpu-0-shared-4g40gb-5-0"


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100], api=api_server) as simulated:
        yield simulated


def share_claim(node: Node, name: str, slices: int) -> ClaimRef:
    return node.claim(
        name, [result(SHARED, shareID=str(uuid.uuid4()), consumedCapacity={"computeSlices": str(slices)})]
    )


def layout(node: Node) -> list[tuple[int, list[tuple[int, str]]]]:
    """Every GI as (GI ID, [(CI start, MIG UUID)])."""
    return [
        (gi.gpu_instance_id, sorted((ci.placement.start, ci.uuid) for ci in gi.compute_instances))
        for gpu in sim.snapshot(node.state_path).gpus
        for gi in gpu.gpu_instances
    ]


def prepared_in_process(node: Node, *refs: ClaimRef) -> list[tuple[int, list[tuple[int, str]]]]:
    """Prepare ``refs`` with a plugin of this process, then stop it (as a plugin restart would); the layout."""
    service = node.service()
    for ref in refs:
        assert service.prepare([ref])[ref.uid].error == ""
    service.close()
    node.services.remove(service)
    return layout(node)


def kill_rule(symbol: str, action: str) -> dict[str, Any]:
    return {"rules": [{"symbol": symbol, "nth": 1, "action": action}]}


CI_CREATE = "nvmlGpuInstanceCreateComputeInstanceWithPlacement"
GI_CREATE = "nvmlDeviceCreateGpuInstanceWithPlacement"
GI_STEPS = [  # a share that creates the shared GI passes these; a share joining one does not
    ("before-gi-create", None, kill_rule(GI_CREATE, "kill_before")),
    ("gi-requested", "after-checkpoint-requested", None),
    ("after-gi-create-before-recording", "after-gpu-instance", None),
    ("nvml-kill-after-gi-create", None, kill_rule(GI_CREATE, "kill_after")),
]
SHARE_STEPS = [
    ("after-checkpoint-started", "after-checkpoint-started", None),
    ("after-recording-gi", "after-checkpoint-gpu-instance", None),
    ("ci-requested", "after-checkpoint-compute-instance-requested", None),
    ("before-ci-create", None, kill_rule(CI_CREATE, "kill_before")),
    ("after-ci-create-before-recording", "after-compute-instance", None),
    ("nvml-kill-after-ci-create", None, kill_rule(CI_CREATE, "kill_after")),
    ("after-recording-ci", "after-checkpoint-compute-instance", None),
    ("after-cdi", "after-cdi", None),
]
PREPARE_STEPS = [
    pytest.param(crash_at, faults, joins, id=f"{'joining' if joins else 'first'}-share-{name}")
    for joins in (False, True)
    for name, crash_at, faults in (SHARE_STEPS if joins else GI_STEPS + SHARE_STEPS)
]


@pytest.mark.parametrize(("crash_at", "faults", "joins"), PREPARE_STEPS)
def test_a_share_prepare_killed_at_any_step_converges(
    node: Node, crash_at: str | None, faults: Any, joins: bool, caplog: pytest.LogCaptureFixture
) -> None:
    other = share_claim(node, "other", 2)
    before = prepared_in_process(node, other) if joins else []
    crashy = share_claim(node, "crashy", 1)

    child = run_child(node, [crashy], crash_at=crash_at, faults=faults)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]

    caplog.set_level(logging.INFO)
    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.rolled_back] == [crashy.uid]
    assert [r.claim_uid for r in report.adopted] == ([other.uid] if joins else [])
    assert layout(node) == before  # the crashed share left nothing; the other share's GI and CI untouched
    # ... and the roll-back never calls the shares' GI someone else's
    assert not [r.getMessage() for r in caplog.records if "NOT DESTROYED" in r.getMessage()]
    assert not spec_path(node.cdi_dir, DRIVER, crashy.uid).exists()

    assert service.prepare([crashy])[crashy.uid].error == ""  # kubelet's retry
    (gi,) = layout(node)
    assert len(gi[1]) == (2 if joins else 1)
    for ref in (crashy, other):
        assert service.unprepare([ref])[ref.uid].error == ""
    assert layout(node) == []
    assert service.checkpoint.records() == ()


def test_a_completed_share_is_adopted_after_a_crash(node: Node) -> None:
    other = share_claim(node, "other", 2)
    prepared_in_process(node, other)
    crashy = share_claim(node, "crashy", 1)
    child = run_child(node, [crashy], crash_at="after-checkpoint-completed")
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]
    service = node.service(start=False)
    report = service.start()
    assert sorted(r.claim_uid for r in report.adopted) == sorted([other.uid, crashy.uid])
    ((_, cis),) = layout(node)
    assert [start for start, _ in cis] == [0, 2]  # the 2-slice share at 0:2... and the 1-slice one at 2
    for ref in (other, crashy):
        assert service.unprepare([ref])[ref.uid].error == ""
    assert layout(node) == []


CI_DESTROY = "nvmlComputeInstanceDestroy"
GI_DESTROY = "nvmlGpuInstanceDestroy"


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param(kill_rule(CI_DESTROY, "kill_before"), id="before-ci-destroy"),
        pytest.param(kill_rule(CI_DESTROY, "kill_after"), id="after-ci-destroy"),
    ],
)
@pytest.mark.parametrize("killed", ["joiner", "creator"])
def test_unprepare_of_a_share_killed_at_its_ci_destroy_never_touches_the_other_share(
    node: Node, faults: Any, killed: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Either share's unprepare killed -- the one that joined the GI, or the one that created it: the GI
    belongs to the shares, not to its creator, so it stays for the other one."""
    creator = share_claim(node, "creator", 2)
    joiner = share_claim(node, "joiner", 1)
    both = prepared_in_process(node, creator, joiner)
    ((gi_id, cis),) = both
    crashy, other = (joiner, creator) if killed == "joiner" else (creator, joiner)
    other_ci = cis[0] if killed == "joiner" else cis[1]

    child = run_child(node, [crashy], faults=faults, unprepare=True)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]

    caplog.set_level(logging.INFO)
    service = node.service(start=False)
    report = service.start()
    assert [r.claim_uid for r in report.adopted] == [other.uid]
    assert layout(node) == [(gi_id, [other_ci])]  # the GI another share uses stays, with its CI
    assert service.unprepare([crashy])[crashy.uid].error == ""  # kubelet's retry: done already
    assert layout(node) == [(gi_id, [other_ci])]
    assert service.unprepare([other])[other.uid].error == ""
    assert layout(node) == []
    assert not [r.getMessage() for r in caplog.records if "NOT DESTROYED" in r.getMessage()]


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param(kill_rule(CI_DESTROY, "kill_before"), id="before-ci-destroy"),
        pytest.param(kill_rule(CI_DESTROY, "kill_after"), id="after-ci-destroy"),
        pytest.param(kill_rule(GI_DESTROY, "kill_before"), id="before-gi-destroy"),
        pytest.param(kill_rule(GI_DESTROY, "kill_after"), id="after-gi-destroy"),
    ],
)
def test_unprepare_of_the_last_share_killed_at_any_step_leaves_nothing(node: Node, faults: Any) -> None:
    last = share_claim(node, "last", 1)
    prepared_in_process(node, last)
    child = run_child(node, [last], faults=faults, unprepare=True)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr[-3000:]

    service = node.service(start=False)
    service.start()
    assert layout(node) == []
    assert service.checkpoint.records() == ()
    assert service.unprepare([last])[last.uid].error == ""
