"""Prepare while something else works on the same node: another claim on the same GPU, another plugin.

Two services on one state directory stand in for the two plugin processes of a rolling update: each
has its own in-process locks, its own NVML handle and its own view of the checkpoint, so only what
works across processes -- the lock files of the state directory and the checkpoint file itself --
keeps them apart (flocks belong to open file descriptions, so two services of one process conflict
exactly as two processes do).  The whole flow with real processes is in
tests/e2e/test_rolling_update.py.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from kubeletplugin.prepare import claim_path as claim_path_module
from kubeletplugin.prepare.kinds import PrepareContext
from kubeletplugin.prepare.locks import LOCKS_DIR, lock_file_name, release_flock, try_flock
from kubeletplugin.prepare.records import DeviceIntent
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import Background, HeldAfter, HeldCall, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
SHARED = "gpu-0-shared-4g40gb-5-0"  # shares of an H100 4g.40gb GI at 0:4
EXCLUSIVE = "gpu-0-mig-4g40gb-5-0"  # the exclusive device of the same placement


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as simulated:
        yield simulated


@pytest.fixture
def other_nvml(node: Node) -> Iterator[Nvml]:
    """A second NVML handle on the same simulated node: the other plugin process's."""
    nvml = Nvml()
    nvml.init()
    try:
        yield nvml
    finally:
        nvml.shutdown()


def gpu_lock(node: Node, gpu: int) -> Path:
    return node.state_dir / LOCKS_DIR / lock_file_name("gpu-", node.gpu_uuid(gpu))


def test_a_prepare_is_not_failed_by_an_unprepare_destroying_an_instance_on_the_same_gpu(node: Node) -> None:
    """The placement check lists the GPU's instances; a GI destroyed in the middle of that listing (another
    claim being unprepared) made NVML fail the read with INVALID_ARGUMENT, and the prepare with it."""
    service = node.service()
    leaving = node.claim("leaving", [result("gpu-0-mig-1g10gb-19-0")])
    arriving = node.claim("arriving", [result("gpu-0-mig-1g10gb-19-6")])
    assert service.prepare([leaving])[leaving.uid].error == ""

    with HeldCall(node.nvml, "_gpu_instance_info", first_only=True) as held:
        prepare = Background(service, [arriving])
        held.wait_entered()  # the arriving claim's check has the GPU's GI handles and reads the first: leaving's
        assert service.unprepare([leaving])[leaving.uid].error == ""  # that GI is destroyed under the read
    assert prepare.join()[arriving.uid].error == ""
    assert [(gpu, start) for gpu, _, _, start, _ in node.instances()] == [(0, 6)]


def test_a_second_plugin_starts_beside_a_running_one_and_shares_its_claims(node: Node, other_nvml: Nvml) -> None:
    old = node.service()
    first = node.claim("first", [result("gpu-0-mig-1g20gb-15-4")])
    assert old.prepare([first])[first.uid].error == ""
    gi = node.instances()[0][1]

    new = node.service(nvml=other_nvml)  # no wait for the running one: locks are per operation
    assert new.checkpoint.owned().instances == {(node.gpu_uuid(0), gi)}  # the publisher of the new pod: not foreign
    again = new.prepare([first])[first.uid]
    assert again == old.prepare([first])[first.uid]  # the old pod's record, verified, nothing created
    assert len(node.instances()) == 1

    second = node.claim("second", [result("gpu-0-mig-1g20gb-15-6")])
    assert new.prepare([second])[second.uid].error == ""
    assert len(old.checkpoint.owned().instances) == 2  # the old pod sees the new pod's record too

    assert old.unprepare([second])[second.uid].error == ""  # prepared by the new pod, released by the old
    assert new.unprepare([first])[first.uid].error == ""
    assert node.instances() == []
    assert old.checkpoint.owned().instances == new.checkpoint.owned().instances == set()


def test_a_placement_prepared_by_one_plugin_is_refused_to_a_claim_on_the_other(node: Node, other_nvml: Nvml) -> None:
    old, new = node.service(), node.service(nvml=other_nvml)
    first = node.claim("first", [result("gpu-1-mig-3g40gb-9-4")])
    double = node.claim("double", [result("gpu-1-mig-3g40gb-9-4")])
    assert old.prepare([first])[first.uid].error == ""
    error = new.prepare([double])[double.uid].error
    assert "prepared for claim default/first" in error
    assert len(node.instances()) == 1


def test_the_gpu_lock_is_held_across_processes_while_nvml_creates(node: Node, other_nvml: Nvml) -> None:
    service = node.service(nvml=other_nvml)
    ref = node.claim("creating", [result("gpu-0-mig-1g10gb-19-2")])
    with HeldCall(other_nvml, "create_gpu_instance") as held:
        prepare = Background(service, [ref])
        held.wait_entered()
        fd = try_flock(gpu_lock(node, 0), None)  # what the other plugin process would try
        if fd is not None:
            release_flock(gpu_lock(node, 0), fd, remove=False)
        other_gpu = try_flock(gpu_lock(node, 1), None)
        assert other_gpu is not None  # only the GPU being changed is locked
        release_flock(gpu_lock(node, 1), other_gpu, remove=False)
    assert prepare.join()[ref.uid].error == ""
    assert fd is None, "another process could have changed GPU 0 while NVML created an instance on it"


def test_recovery_leaves_alone_a_claim_the_running_plugin_is_preparing(node: Node, other_nvml: Nvml) -> None:
    """The new pod starts while the old one is between creating a GI and its compute instance: the
    record says PrepareStarted, as after a crash -- but its claim's lock is held by a live process."""
    old = node.service(nvml=other_nvml)
    ref = node.claim("in-flight", [result("gpu-1-mig-1g20gb-15-4")])
    with HeldCall(other_nvml, "create_compute_instance") as held:
        prepare = Background(old, [ref])
        held.wait_entered()
        new = node.service(start=False)
        report = new.start()
        gi_during_start = [gi for _, gi, _, _, _ in node.instances()]
    assert prepare.join()[ref.uid].error == ""
    assert [r.claim_uid for r in report.in_flight] == [ref.uid]
    assert report.rolled_back == ()
    assert len(gi_during_start) == 1, "the new plugin destroyed the GI the old one was preparing"
    (instance,) = node.instances()
    assert instance[1] == gi_during_start[0]
    assert len(instance[4]) == 1  # its compute instance was created: the prepare finished
    assert new.prepare([ref])[ref.uid] == old.prepare([ref])[ref.uid]


def test_a_claim_lock_file_is_removed_after_use(node: Node) -> None:
    service = node.service()
    ref = node.claim("tidy", [result("gpu-0-mig-1g10gb-19-1")])
    assert service.prepare([ref])[ref.uid].error == ""
    assert service.unprepare([ref])[ref.uid].error == ""
    leftover = sorted(p.name for p in (node.state_dir / LOCKS_DIR).iterdir() if p.name.startswith("claim-"))
    assert leftover == []
    assert os.listdir(node.state_dir / LOCKS_DIR)  # GPU lock files stay: one per GPU, reused


def test_owned_placements_include_a_creation_in_flight_in_the_other_plugin(node: Node, other_nvml: Nvml) -> None:
    old, new = node.service(nvml=other_nvml), node.service()
    ref = node.claim("asking", [result("gpu-0-mig-1g20gb-15-2")])
    with HeldCall(other_nvml, "create_gpu_instance") as held:
        prepare = Background(old, [ref])
        held.wait_entered()
        pending = new.checkpoint.owned().placements
    assert prepare.join()[ref.uid].error == ""
    assert pending == {(node.gpu_uuid(0), 15, Placement(start=2, size=2))}


def test_close_waits_for_a_one_claim_call_running_in_the_callers_thread(node: Node) -> None:
    """A one-claim call runs in kubelet's gRPC thread, not the worker pool: close() must still wait for it,
    or it would close the checkpoint and NVML under a prepare between its GI and its CI."""
    service = node.service()
    ref = node.claim("closing", [result("gpu-1-mig-1g10gb-19-0")])
    closed = threading.Event()
    with HeldCall(node.nvml, "create_compute_instance") as held:
        prepare = Background(service, [ref])
        held.wait_entered()
        closer = threading.Thread(target=lambda: (service.close(), closed.set()), daemon=True)
        closer.start()
        assert not closed.wait(0.5)  # the call is still running: close waits
    assert closed.wait(30)
    assert prepare.join()[ref.uid].error == ""
    (gpu, _gi, profile, start, cis) = node.instances()[0]
    assert (gpu, profile, start, len(cis)) == (1, 19, 0, 1)


def share(slices: int) -> dict[str, object]:
    return result(SHARED, shareID=str(uuid.uuid4()), consumedCapacity={"computeSlices": str(slices)})


def test_two_plugins_preparing_shares_of_one_device_at_once_both_join_one_gi(
    node: Node, other_nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling update: the old plugin creates the shared GI for one replica's share while the new plugin
    checks another replica's -- unlocked, between NVML's answer and the recorded GI ID.  Both shares join
    that GI, each with a CI of its own."""
    old, new = node.service(nvml=other_nvml), node.service()
    first, second = node.claim("first", [share(1)]), node.claim("second", [share(2)])
    check = claim_path_module.check_placements_free
    with HeldAfter(other_nvml, "create_gpu_instance") as created:

        def check_then_let_the_creator_go(
            context: PrepareContext, claim_uid: str, intents: Sequence[DeviceIntent]
        ) -> None:
            try:
                check(context, claim_uid, intents)
            finally:
                if claim_uid == second.uid:  # the new plugin's check: the second share waits for the GPU's lock next
                    created.release()

        monkeypatch.setattr(claim_path_module, "check_placements_free", check_then_let_the_creator_go)
        creating = Background(old, [first])
        created.wait_returned()  # the GI exists; the first claim's record says its creation is in flight
        in_flight = old.checkpoint.get(first.uid)
        assert in_flight is not None
        assert [d.creation_in_flight for d in in_flight.devices] == [True]
        joined = new.prepare([second])[second.uid]
    assert creating.join()[first.uid].error == ""
    assert joined.error == ""
    ((_, _, profile, start, cis),) = node.instances()
    assert (profile, start) == (5, 0)
    assert len(cis) == 2  # a CI each, in one GI
    for service, ref in ((new, first), (old, second)):  # either plugin releases either share
        assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == []


@pytest.mark.parametrize("share_on", ["old", "new"])
def test_a_share_and_an_exclusive_claim_of_one_placement_in_two_plugins_one_wins(
    node: Node, other_nvml: Nvml, monkeypatch: pytest.MonkeyPatch, share_on: str
) -> None:
    """Both pass the unlocked check before either has a record (nothing stands yet); the checkpoint's begin,
    one flock-held check and write, lets exactly one through.  Nothing is created for the other."""
    old, new = node.service(nvml=other_nvml), node.service()
    shared, exclusive = node.claim("shared", [share(1)]), node.claim("exclusive", [result(EXCLUSIVE)])
    plugin_of = {shared.uid: old if share_on == "old" else new, exclusive.uid: new if share_on == "old" else old}
    both_checked = threading.Barrier(2, timeout=30)

    check = claim_path_module.check_placements_free

    def wait_for_the_other(context: PrepareContext, claim_uid: str, intents: Sequence[DeviceIntent]) -> None:
        check(context, claim_uid, intents)
        both_checked.wait()

    monkeypatch.setattr(claim_path_module, "check_placements_free", wait_for_the_other)  # both plugins' checks
    calls = [Background(plugin_of[ref.uid], [ref]) for ref in (shared, exclusive)]
    errors = {ref.uid: call.join()[ref.uid].error for ref, call in zip((shared, exclusive), calls, strict=True)}

    winners = [uid for uid, error in errors.items() if error == ""]
    assert len(winners) == 1, errors
    (loser,) = set(errors) - set(winners)
    assert "refusing a double allocation" in errors[loser]
    assert old.checkpoint.get(loser) is None
    ((_, _, profile, start, cis),) = node.instances()
    assert (profile, start) == (5, 0)
    ((_, ci_profile, _),) = cis
    winner_record = old.checkpoint.get(winners[0])
    assert winner_record is not None
    (device,) = winner_record.devices
    assert ci_profile == device.compute_instance_profile_id  # the winner's CI only: 1c for the share, 4c whole
    assert device.intent.is_share == (winners[0] == shared.uid)
    winner = shared if winners[0] == shared.uid else exclusive
    assert new.unprepare([winner])[winner.uid].error == ""
    assert node.instances() == []
