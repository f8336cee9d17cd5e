"""Shares of a shared GPU instance (docs/prepare.md, "Shares"): one GI, several claims, a CI each.

The real PrepareService on the simulated NVML and the local API server.  Claims are built with
allocation results naming the shared device directly (with ``shareID`` and ``consumedCapacity``), as
kube-scheduler writes them for a device with ``allowMultipleAllocations``.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel.vocabulary import COMPUTE_SLICES_CAPACITY
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.mig.catalog import Placement
from dra_driver.nvml import sim
from kubeletplugin.grpc.convert import prepare_response
from kubeletplugin.prepare import claim_path as claim_path_module
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.kinds import PrepareContext
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord
from kubeletplugin.prepare.service import PrepareService, mig_instances_of
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, NODE, HeldAfter, Node, read_claim_json, result, simulated_node

H100 = "H100-SXM5-80GB"
SHARED = "gpu-0-shared-4g40gb-5-0"  # H100 4g.40gb (profile 5) at 0:4; shares of 1, 2 or 4 compute slices
EXCLUSIVE = "gpu-0-mig-4g40gb-5-0"  # the exclusive device of the same placement
GI_ID = 1  # NVML's ID of a 4g GI at 0 on H100


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100], api=api_server) as simulated:
        yield simulated


def share(slices: int | str, *, device: str = SHARED, key: str = "computeSlices", **extra: Any) -> dict[str, Any]:
    """An allocation result for a share of ``slices`` compute slices, with a fresh share ID."""
    fields: dict[str, Any] = {"shareID": str(uuid.uuid4()), "consumedCapacity": {key: str(slices)}, **extra}
    return result(device, **fields)


def cis(node: Node) -> dict[str, tuple[int, int]]:
    """MIG UUID -> (CI ID, CI start) of every CI in the shared GI; {} when the GI is gone."""
    return {
        ci.uuid: (ci.compute_instance_id, ci.placement.start)
        for gpu in sim.snapshot(node.state_path).gpus
        for gi in gpu.gpu_instances
        if gi.gpu_instance_id == GI_ID
        for ci in gi.compute_instances
    }


def gi_ids(node: Node) -> list[int]:
    return [gi[1] for gi in node.instances()]


def spec_mig_uuids(node: Node, ref: ClaimRef) -> list[str]:
    spec = json.loads(spec_path(node.cdi_dir, DRIVER, ref.uid).read_text())
    return [
        env.split("=", 1)[1]
        for d in spec["devices"]
        for env in d["containerEdits"]["env"]
        if env.startswith("MIGDRA_MIG_UUID=")
    ]


def prepare_ok(node: Node, service: Any, ref: ClaimRef) -> str:
    """Prepare ``ref``, expecting success; its MIG UUID (from the checkpoint record)."""
    outcome = service.prepare([ref])[ref.uid]
    assert outcome.error == ""
    (device,) = service.checkpoint.get(ref.uid).devices
    assert device.mig_uuid is not None
    return str(device.mig_uuid)


def test_three_shares_of_one_gi_each_get_their_own_compute_instance(node: Node) -> None:
    service = node.service()
    refs = [node.claim(f"share-{i}", [share(size)]) for i, size in enumerate((1, 1, 2))]
    uuids = [prepare_ok(node, service, ref) for ref in refs]

    assert gi_ids(node) == [GI_ID]  # one GI for the three claims
    metrics = {
        i.mig_uuid: (i.gpu_instance_id, i.share_id, i.compute_slices)
        for i in mig_instances_of(service.checkpoint.records())
    }
    assert metrics == {
        mig: (GI_ID, service.checkpoint.get(ref.uid).devices[0].intent.share_id, size)  # type: ignore[union-attr]
        for ref, mig, size in zip(refs, uuids, (1, 1, 2), strict=True)
    }
    placements = {mig: start for mig, (_, start) in cis(node).items()}
    assert placements == {uuids[0]: 0, uuids[1]: 1, uuids[2]: 2}  # 1c, 1c, then 2c at 2:2 (kept free)
    assert len(set(uuids)) == 3
    for ref, mig in zip(refs, uuids, strict=True):
        assert spec_mig_uuids(node, ref) == [mig]  # its CDI spec exposes its own MIG device only
        record = service.checkpoint.get(ref.uid)
        assert record is not None
        (device,) = record.devices
        assert device.created_gpu_instance == (ref is refs[0])
        result_device = service.prepare([ref])[ref.uid].devices[0]  # prepared again: same answer
        assert result_device.share_id == device.intent.share_id
    assert service.flush_reports()
    for ref, mig in zip(refs, uuids, strict=True):
        claim = read_claim_json(node.api_client, ref)
        (entry,) = claim["status"]["devices"]
        allocated = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
        assert (entry["device"], entry["shareID"], entry["data"]["migUUID"]) == (SHARED, allocated, mig)
        assert entry["data"]["gpuInstanceID"] == GI_ID
        assert [c["type"] for c in entry["conditions"]] == ["Ready"]
    # kubelet gets share_id on the wire
    response = prepare_response(service.prepare(refs))
    for ref in refs:
        assert (
            response.claims[ref.uid].devices[0].share_id
            == read_claim_json(node.api_client, ref)["status"]["allocation"]["devices"]["results"][0]["shareID"]
        )


def test_two_shares_in_one_call_race_their_gi_s_creation_and_both_join_it(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas' claims in one NodePrepareResources call (the worker pool): the second share checks its
    placement, unlocked, while the first stands between NVML creating the shared GI and recording its ID.
    That GI is the one it joins, not a conflict; the locked join decides."""
    service = node.service()
    first, second = node.claim("first", [share(1)]), node.claim("second", [share(1)])
    seen: list[DeviceRecord] = []
    check = claim_path_module.check_placements_free

    with HeldAfter(node.nvml, "create_gpu_instance") as created:

        def checked_during_the_creation(
            context: PrepareContext, claim_uid: str, intents: Sequence[DeviceIntent]
        ) -> None:
            if claim_uid == second.uid:  # the second waits until the first's GI exists, unrecorded
                created.wait_returned()
                record = service.checkpoint.get(first.uid)
                assert record is not None
                seen.extend(record.devices)
            try:
                check(context, claim_uid, intents)
            finally:
                if claim_uid == second.uid:
                    created.release()

        monkeypatch.setattr(claim_path_module, "check_placements_free", checked_during_the_creation)
        outcome = service.prepare([first, second])

    assert [d.creation_in_flight for d in seen] == [True]  # the race happened: checked against an unrecorded GI
    assert (outcome[first.uid].error, outcome[second.uid].error) == ("", "")
    assert gi_ids(node) == [GI_ID]  # one GI, two CIs
    migs = [prepare_ok(node, service, ref) for ref in (first, second)]  # prepared: the records' MIG UUIDs
    assert set(cis(node)) == set(migs)
    assert len(set(migs)) == 2


def test_the_qualified_capacity_name_is_accepted(node: Node) -> None:
    service = node.service()
    ref = node.claim("qualified", [share(2, key=f"{DRIVER}/computeSlices")])
    mig = prepare_ok(node, service, ref)
    assert cis(node) == {mig: (0, 0)}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=lambda o: "-".join(map(str, o)))
def test_release_in_any_order_never_destroys_the_gi_early_and_leaves_nothing(
    node: Node, order: tuple[int, ...]
) -> None:
    service = node.service()
    refs = [node.claim(f"share-{i}", [share(size)]) for i, size in enumerate((1, 1, 2))]
    uuids = [prepare_ok(node, service, ref) for ref in refs]
    remaining = set(range(3))
    for index in order:
        assert service.unprepare([refs[index]])[refs[index].uid].error == ""
        remaining.discard(index)
        assert set(cis(node)) == {uuids[i] for i in remaining}  # the others' CIs untouched
        assert gi_ids(node) == ([GI_ID] if remaining else [])  # the GI goes with the last share only
        assert not spec_path(node.cdi_dir, DRIVER, refs[index].uid).exists()
    assert node.instances() == []
    assert service.checkpoint.records() == ()


def admitted_sizes(node: Node, service: PrepareService) -> list[int]:
    """The share sizes the shared device admits in the pool a publish round builds now (with ``service``
    as what migdra owns): its ``computeSlices`` request policy's valid values.  The node's device
    configuration says ``sharedDevices: true`` (off by default)."""
    device_config = node.root / "device-config.yaml"
    device_config.write_text("sharedDevices: true\n")
    settings = PluginSettings(node_name=NODE, device_config=device_config)
    publishing = Publishing(settings, CollectorRegistry(), threading.Event())
    (device,) = [d for d in publishing.compute_pool(node.nvml, service.checkpoint).devices if d.name == SHARED]
    return list(device.request_policies[COMPUTE_SLICES_CAPACITY].valid_values)


class ShareChanges:
    """The ``on_shares_changed`` callback: what the checkpoint says about shares each time it is called."""

    def __init__(self) -> None:
        self.seen: list[dict[Any, Any]] = []
        self.service: PrepareService | None = None

    def __call__(self) -> None:
        assert self.service is not None
        self.seen.append(self.service.checkpoint.share_compute_instances())

    def told_the_last(self) -> bool:
        """Whether the last call saw the checkpoint as it is now (publishing would publish the truth)."""
        assert self.service is not None
        return bool(self.seen) and self.seen[-1] == self.service.checkpoint.share_compute_instances()


def test_a_fragmented_gi_refuses_a_share_that_its_free_slices_would_hold(node: Node) -> None:
    changes = ShareChanges()
    service = changes.service = node.service(on_shares_changed=changes)
    assert admitted_sizes(node, service) == [1, 2, 4]
    refs = [node.claim(f"one-{i}", [share(1)]) for i in range(4)]
    uuids = []
    for ref in refs:
        told = len(changes.seen)
        uuids.append(prepare_ok(node, service, ref))
        assert len(changes.seen) > told
        assert changes.told_the_last()
    assert sorted(start for _, start in cis(node).values()) == [0, 1, 2, 3]
    assert admitted_sizes(node, service) == [4]  # full: the whole GI's size alone (fits nowhere while CIs stand)
    for index in (0, 2):  # free slices 0 and 2: two free slices, no free 2-slice placement
        told = len(changes.seen)
        assert service.unprepare([refs[index]])[refs[index].uid].error == ""
        assert len(changes.seen) > told
        assert changes.told_the_last()
    before = node.instances()
    # What kube-scheduler is offered follows: a 2-slice share would not fit, so it is not admitted here
    # (and goes to another GI), though 2 of the 4 compute slices are free.
    assert admitted_sizes(node, service) == [1]

    two = node.claim("two", [share(2)])
    error = service.prepare([two])[two.uid].error
    assert error == (
        f"claim default/two: device {SHARED}: no free placement for a share of 2 compute slice(s) in GI {GI_ID} on "
        f"GPU {node.gpu_uuid()} (CIs at 1:1, 3:1): the free compute slices are not contiguous at a legal placement "
        "of a 2-slice CI (0:2, 2:2): the GPU instance is fragmented"
    )
    assert node.instances() == before  # nothing created, nothing destroyed
    assert service.checkpoint.get(two.uid) is None
    assert set(cis(node)) == {uuids[1], uuids[3]}


def test_a_share_undone_because_a_later_device_failed_tells_publishing(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's second device fails at its GI creation, so the undo destroys the share's CI and GI and
    drops the record: publishing is told after that, not only when the CI came."""
    changes = ShareChanges()
    service = changes.service = node.service(on_shares_changed=changes)
    create = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement
    calls: list[int] = []

    def second_refused(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return create(*args)

    monkeypatch.setattr(pynvml, "nvmlDeviceCreateGpuInstanceWithPlacement", second_refused)
    ref = node.claim("pair", [share(1), result("gpu-0-mig-3g40gb-9-4")])
    assert service.prepare([ref])[ref.uid].error != ""
    assert len(calls) == 2
    assert node.instances() == []
    assert changes.seen  # the share's CI came, then went with the undo
    assert changes.seen[-1] == {}
    assert changes.told_the_last()


def test_a_share_the_gi_cannot_hold_names_the_free_slices(node: Node) -> None:
    service = node.service()
    prepare_ok(node, service, node.claim("big", [share(2)]))
    prepare_ok(node, service, node.claim("one", [share(1)]))
    third = node.claim("third", [share(2)])
    assert service.prepare([third])[third.uid].error.endswith("only 1 of its 4 compute slices are free")


def test_an_exclusive_claim_on_a_shared_placement_is_refused_and_changes_nothing(node: Node) -> None:
    service = node.service()
    shared = node.claim("shared", [share(1)])
    mig = prepare_ok(node, service, shared)
    before = node.instances()
    exclusive = node.claim("exclusive", [result(EXCLUSIVE)])
    error = service.prepare([exclusive])[exclusive.uid].error
    assert error.startswith(f"claim default/exclusive: device {EXCLUSIVE}: ")
    assert "prepared for claim default/shared" in error
    assert node.instances() == before
    assert set(cis(node)) == {mig}


def test_a_share_never_joins_a_gi_migdra_did_not_create_for_shares(node: Node) -> None:
    service = node.service()
    exclusive = node.claim("exclusive", [result(EXCLUSIVE)])
    assert service.prepare([exclusive])[exclusive.uid].error == ""
    shared = node.claim("shared", [share(1)])
    error = service.prepare([shared])[shared.uid].error
    assert "prepared for claim default/exclusive" in error
    assert service.unprepare([exclusive])[exclusive.uid].error == ""

    foreign = node.nvml.create_gpu_instance(node.gpu_uuid(), 5, Placement(start=0, size=4)).gpu_instance_id
    error = service.prepare([shared])[shared.uid].error
    assert error == (
        f"claim default/shared: device {SHARED}: placement 0:4 on GPU {node.gpu_uuid()} is occupied by GPU "
        f"instance {foreign} (profile 5 at 0:4) that migdra did not create; a share joins only a GPU instance migdra "
        "created for shares of this device"
    )
    assert cis(node) == {}  # no CI put into the operator's GI


def test_a_shared_device_allocated_without_share_id_is_the_whole_gi(node: Node) -> None:
    service = node.service()
    ref = node.claim("whole", [result(SHARED)])
    mig = prepare_ok(node, service, ref)
    (ci_profile,) = [c[1] for gi in node.instances() for c in gi[4]]
    assert ci_profile == 3  # 4g.40gb's full CI
    assert cis(node) == {mig: (0, 0)}
    other = node.claim("share-after", [share(1)])
    assert "prepared for claim default/whole" in service.prepare([other])[other.uid].error


@pytest.mark.parametrize(
    ("results", "message"),
    [
        pytest.param(
            [share(3)],
            f"device {SHARED}: a share of 3 compute slice(s) was allocated, but a share of 4g.40gb can have 1, 2, 4",
            id="size-not-offered",
        ),
        pytest.param(
            [result(SHARED, shareID=str(uuid.uuid4()), consumedCapacity={"memory": "0"})],
            "status.allocation.devices.results[0].consumedCapacity: a share (shareID ",
            id="no-compute-slices",
        ),
        pytest.param(
            [share("1500m")],
            "status.allocation.devices.results[0].consumedCapacity.computeSlices: computeSlices='1500m' is not one "
            "positive whole number",
            id="fractional-slices",
        ),
        pytest.param(
            [share(1, device=EXCLUSIVE)],
            f"device {EXCLUSIVE}: a shareID was allocated, but it is not a shared device",
            id="share-of-an-exclusive-device",
        ),
    ],
)
def test_bad_share_input_fails_that_claim_alone_naming_the_field(
    node: Node, results: list[dict[str, Any]], message: str
) -> None:
    service = node.service()
    bad = node.claim("bad", results)
    good = node.claim("good", [share(1)])
    outcome = service.prepare([bad, good])
    assert message in outcome[bad.uid].error
    assert outcome[bad.uid].error.startswith("claim default/bad: ")
    assert "\n" not in outcome[bad.uid].error
    assert outcome[good.uid].error == ""
    assert len(cis(node)) == 1  # the good claim's share alone
    assert service.checkpoint.get(bad.uid) is None


def test_a_malformed_share_id_never_reaches_kubelet(node: Node) -> None:
    """The gRPC layer's guard: a device whose share_id is not a normalized UUID fails its claim alone."""
    from dra_driver.kubelet.calls import PreparedDevice, PrepareResult

    good = PrepareResult(devices=(PreparedDevice(NODE, SHARED, share_id=str(uuid.uuid4())),))
    bad = PrepareResult(devices=(PreparedDevice(NODE, SHARED, share_id="0xdeadbeef"),))
    response = prepare_response({"a": good, "b": bad})
    assert response.claims["a"].error == ""
    assert response.claims["b"].error == (
        f"claim b: devices[0].share_id: '0xdeadbeef' of device {SHARED} is not a UUID in normalized form "
        "(lower-case 8-4-4-4-12 hex digits)"
    )
    assert list(response.claims["b"].devices) == []


def test_admin_access_to_a_shared_device_keeps_its_share_id_and_creates_nothing(node: Node) -> None:
    """kube-scheduler gives an admin-access result on a multi-allocatable device a shareID too: the
    status entry and kubelet's answer must carry it (the API server keys entries by it), and admin
    access creates no compute instance."""
    service = node.service()
    live = node.claim("live", [share(1)])
    mig = prepare_ok(node, service, live)
    admin_share = str(uuid.uuid4())
    admin = node.claim(
        "monitor", [result(SHARED, adminAccess=True, shareID=admin_share, consumedCapacity={"computeSlices": "1"})]
    )
    outcome = service.prepare([admin])[admin.uid]
    assert outcome.error == ""
    assert outcome.devices[0].share_id == admin_share
    assert list(cis(node)) == [mig], "admin access creates no compute instance"
    assert service.flush_reports()
    (entry,) = read_claim_json(node.api_client, admin)["status"]["devices"]
    assert (entry["device"], entry["shareID"]) == (SHARED, admin_share)
    assert service.unprepare([admin])[admin.uid].error == ""
    assert list(cis(node)) == [mig], "its unprepare destroys nothing"


def test_a_stale_record_of_another_device_naming_the_reused_gi_id_does_not_keep_the_last_shares_gi(
    node: Node,
) -> None:
    """GI IDs are reused: an exclusive claim's record left naming ID 1 (its GI destroyed, the record not
    yet dropped) is no sharer of this GI, so the last share's unprepare still destroys it."""
    service = node.service()
    last = node.claim("last", [share(2)])
    prepare_ok(node, service, last)
    (device,) = service.checkpoint.get(last.uid).devices
    stale_intent = DeviceIntent(
        device_name="gpu-0-mig-1g10gb-19-6",
        request_names=("gpu",),
        gpu_uuid=device.intent.gpu_uuid,
        gpu_minor=device.intent.gpu_minor,
        profile_id=19,
        profile_name="1g.10gb",
        placement=Placement(start=6, size=1),
    )
    stale = ClaimRecord(
        claim_uid="uid-stale",
        namespace="default",
        name="stale",
        state=ClaimState.PREPARE_STARTED,
        devices=(DeviceRecord(intent=stale_intent, gpu_instance_id=GI_ID),),
    )
    service.checkpoint.put(stale)
    assert service.unprepare([last])[last.uid].error == ""
    assert GI_ID not in gi_ids(node), "the shared GI went with its last share"


def test_the_compute_instance_goes_where_nvml_says_it_may(
    node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """NVML is asked where a CI may sit in the GI, and its answer wins over the catalog's (logged once)."""
    service = node.service()
    asked: list[int] = []
    real = service.nvml.compute_instance_possible_placements

    def only_the_upper_half(gpu_uuid: str, gpu_instance_id: int, ci_profile_index: int) -> tuple[Placement, ...]:
        asked.append(ci_profile_index)
        return tuple(p for p in real(gpu_uuid, gpu_instance_id, ci_profile_index) if p.start >= 2)

    monkeypatch.setattr(service.nvml, "compute_instance_possible_placements", only_the_upper_half)
    ref = node.claim("upper", [share(1)])
    mig = prepare_ok(node, service, ref)
    assert asked
    assert cis(node)[mig][1] >= 2, "placed among NVML's placements, not the catalog's first"
    second = node.claim("upper-too", [share(1)])
    mig_too = prepare_ok(node, service, second)
    assert cis(node)[mig_too][1] >= 2
    said = [r.getMessage() for r in caplog.records if "NVML places" in r.getMessage()]
    assert said == [
        f"device {SHARED}: NVML places MIG 1c.4g.40gb at 2:1, 3:1, the catalog at 0:1, 1:1, 2:1, 3:1; NVML's are used"
    ]


class CiCreationGoesWrong:
    """NVML misbehaving at the share's CI creation, monkeypatched under the real backend: ``misplace_to`` puts
    the CI at another start than asked (as ``nvmlGpuInstanceCreateComputeInstanceWithPlacement`` must not, but
    the backend checks); ``read_back`` fails the read-back of the created CI (``nvmlComputeInstanceGetInfo``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, misplace_to: int | None, read_back: bool) -> None:
        self.created = 0
        create = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement
        get_info = pynvml.nvmlComputeInstanceGetInfo
        armed: list[bool] = []

        def create_elsewhere(gi_handle: Any, profile_id: int, placement: Any) -> Any:
            if misplace_to is not None:
                placement._obj.start = misplace_to  # the c_nvmlComputeInstancePlacement_t behind byref()
            handle = create(gi_handle, profile_id, placement)
            self.created += 1
            armed.append(read_back)
            return handle

        def read_back_failing(ci_handle: Any) -> Any:
            if armed and armed.pop():
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            return get_info(ci_handle)

        monkeypatch.setattr(pynvml, "nvmlGpuInstanceCreateComputeInstanceWithPlacement", create_elsewhere)
        monkeypatch.setattr(pynvml, "nvmlComputeInstanceGetInfo", read_back_failing)


def refuse_ci_destroys(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """``nvmlComputeInstanceDestroy`` answers IN_USE ``times`` times (a process holds the CI); the refusals."""
    destroy = pynvml.nvmlComputeInstanceDestroy
    refused: list[int] = []

    def in_use(ci_handle: Any) -> Any:
        if len(refused) < times:
            refused.append(1)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        return destroy(ci_handle)

    monkeypatch.setattr(pynvml, "nvmlComputeInstanceDestroy", in_use)
    return refused


@pytest.mark.parametrize(
    ("misplace_to", "read_back", "said"),
    [
        pytest.param(3, False, "NVML created CI 0 of GI 1 at 3:1; it was destroyed again", id="misplaced"),
        pytest.param(None, True, "reading the created CI of GI 1 back failed (", id="read-back-failed"),
        pytest.param(3, True, "reading the created CI of GI 1 back failed (", id="misplaced-and-read-back-failed"),
    ],
)
def test_a_ci_nvml_creates_wrong_is_destroyed_and_so_is_the_gi_the_share_created(
    node: Node, monkeypatch: pytest.MonkeyPatch, misplace_to: int | None, read_back: bool, said: str
) -> None:
    """The CI exists, but the backend hands back no ID (it raises): it must destroy the CI itself, else the
    rollback could not destroy the GI either (a CI inside) and both would leak as foreign instances."""
    service = node.service()
    ref = node.claim("first", [share(1)])
    with monkeypatch.context() as patched:
        wrong = CiCreationGoesWrong(patched, misplace_to=misplace_to, read_back=read_back)
        error = service.prepare([ref])[ref.uid].error
    assert wrong.created == 1
    assert error.startswith(
        f"claim default/first: device {SHARED}: GPU {node.gpu_uuid()}: creating the share's compute instance failed: "
    )
    assert said in error
    assert node.instances() == []  # neither the CI nor the GI this share created
    assert service.checkpoint.get(ref.uid) is None
    mig = prepare_ok(node, service, ref)  # kubelet's retry starts clean
    assert cis(node) == {mig: (0, 0)}


def prepare_with_a_misplaced_ci(
    service: PrepareService, ref: ClaimRef, monkeypatch: pytest.MonkeyPatch, *, refusals: int
) -> tuple[str, list[int]]:
    """Prepare ``ref`` while NVML creates its CI at 3:1 instead (no read-back) and refuses the first
    ``refusals`` destroys of a CI: the claim's error and the refused destroys."""
    with monkeypatch.context() as patched:
        CiCreationGoesWrong(patched, misplace_to=3, read_back=False)
        refused = refuse_ci_destroys(patched, refusals)
        error = service.prepare([ref])[ref.uid].error
    return error, refused


def test_a_misplaced_ci_nvml_will_not_destroy_is_recorded_and_released_later_with_its_gi(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML puts the CI elsewhere and refuses to destroy it (three times: the backend's try, the roll-back's,
    the claim's undo): the share's record names that CI, so the next release finds it and then the GI,
    instead of leaving both as instances no record names."""
    service = node.service()
    ref = node.claim("first", [share(1)])
    error, refused = prepare_with_a_misplaced_ci(service, ref, monkeypatch, refusals=3)
    assert len(refused) == 3
    assert "NVML created CI 0 of GI 1 at 3:1; destroying it again failed" in error
    ((_, stray),) = cis(node).values()
    assert stray == 3
    record = service.checkpoint.get(ref.uid)
    assert record is not None
    assert record.state is ClaimState.PREPARE_STARTED
    (device,) = record.devices
    assert (device.gpu_instance_id, device.compute_instance_placement) == (GI_ID, Placement(start=3, size=1))
    assert device.mig_uuid == next(iter(cis(node)))
    assert service.unprepare([ref])[ref.uid].error == ""  # NVML lets go now
    assert node.instances() == []
    assert service.checkpoint.get(ref.uid) is None


def test_a_misplaced_ci_the_roll_back_destroys_on_a_second_try_leaves_nothing_and_says_so(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = node.service()
    ref = node.claim("first", [share(1)])
    error, refused = prepare_with_a_misplaced_ci(service, ref, monkeypatch, refusals=1)
    assert len(refused) == 1
    assert "destroying it again failed" in error
    assert error.endswith("; the roll-back destroyed it on a second try")
    assert node.instances() == []
    assert service.checkpoint.get(ref.uid) is None


@pytest.mark.parametrize(("misplace_to", "read_back"), [(3, False), (None, True)], ids=["misplaced", "read-back"])
def test_a_ci_nvml_creates_wrong_for_a_joining_share_is_destroyed_and_the_gi_stays(
    node: Node, monkeypatch: pytest.MonkeyPatch, misplace_to: int | None, read_back: bool
) -> None:
    service = node.service()
    mig = prepare_ok(node, service, node.claim("first", [share(1)]))
    joining = node.claim("joining", [share(1)])
    wrong = CiCreationGoesWrong(monkeypatch, misplace_to=misplace_to, read_back=read_back)
    error = service.prepare([joining])[joining.uid].error
    assert wrong.created == 1
    assert "creating the share's compute instance failed" in error
    assert gi_ids(node) == [GI_ID]
    assert cis(node) == {mig: (0, 0)}  # the first share's CI alone: the joiner's is gone
    assert service.checkpoint.get(joining.uid) is None
