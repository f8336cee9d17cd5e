"""The reservation controller's pure parts: which placement each claim holds, conflicts, gone devices,
and what its part of status.devices says."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dra_driver import claimstatus
from dra_driver.controller.leader import LeaseTiming
from dra_driver.controller.ratelimit import TokenBucket
from dra_driver.controller.reservation_metrics import ReservationMetrics
from dra_driver.controller.reservations import Verdict, compute_reservations
from dra_driver.controller.status import build_reserved_message, compute_claim_entries
from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.mig.catalog import Placement
from tests.sim_objects import DRIVER, H100, allocated_claim, claim_view, claim_views, node_slices

NOW = "2026-12-01T00:00:00Z"
LATER = "2026-12-01T01:00:00Z"


SLICES = node_slices("node-1", [H100, H100])
SHARED_SLICES = render_slices(
    build_pool(example_inventory([H100, H100]), DeviceModelConfig(driver_name=DRIVER, shared_devices=True)),
    "node-1",
    generation=1,
)
"""What node-1 publishes with ``sharedDevices: true`` (off by default): its shared devices too."""
THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"
FOUR_G_AT_0 = "gpu-0-mig-4g40gb-5-0"
ONE_G_AT_6 = "gpu-0-mig-1g10gb-19-6"
ONE_G_AT_0_GPU1 = "gpu-1-mig-1g10gb-19-0"
SHARED_4G_AT_0 = "gpu-0-shared-4g40gb-5-0"
SHARE_A = "0b7c4a52-5b1c-4c41-9c55-3e1f2d4b6a70"
SHARE_B = "5b0f6b1e-3c1a-4d47-9a57-0c7e2a1d9f11"


def _verdicts(*claims: dict[str, Any], slices: list[dict[str, Any]] = SLICES) -> dict[tuple[str, str], Verdict]:
    return {(r.claim_name, r.device_name): r.verdict for r in compute_reservations(claim_views(claims), slices, DRIVER)}


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4)], {("a", THREE_G_AT_4): Verdict.RESERVED}, id="one claim is reserved"
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4), allocated_claim("b", ONE_G_AT_6)],
            {("a", THREE_G_AT_4): Verdict.CONFLICT, ("b", ONE_G_AT_6): Verdict.CONFLICT},
            id="3g at 4-7 and 1g at 6 overlap: both flagged",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4), allocated_claim("b", FOUR_G_AT_0)],
            {("a", THREE_G_AT_4): Verdict.RESERVED, ("b", FOUR_G_AT_0): Verdict.RESERVED},
            id="adjacent placements do not conflict",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4), allocated_claim("b", ONE_G_AT_0_GPU1)],
            {("a", THREE_G_AT_4): Verdict.RESERVED, ("b", ONE_G_AT_0_GPU1): Verdict.RESERVED},
            id="same slices on another GPU do not conflict",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4), allocated_claim("b", THREE_G_AT_4)],
            {("a", THREE_G_AT_4): Verdict.CONFLICT, ("b", THREE_G_AT_4): Verdict.CONFLICT},
            id="the same device in two claims",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4), allocated_claim("b", ONE_G_AT_6, admin=True)],
            {("a", THREE_G_AT_4): Verdict.RESERVED},
            id="admin access holds nothing",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4, ONE_G_AT_6)],
            {("a", THREE_G_AT_4): Verdict.RESERVED, ("a", ONE_G_AT_6): Verdict.RESERVED},
            id="a claim's own devices are not a conflict between claims",
        ),
        pytest.param(
            [allocated_claim("a", "gpu-0-mig-3g40gb-9-99")],
            {("a", "gpu-0-mig-3g40gb-9-99"): Verdict.GONE},
            id="a device the complete pool no longer publishes is gone",
        ),
        pytest.param(
            [allocated_claim("a", THREE_G_AT_4, pool="node-9")],
            {("a", THREE_G_AT_4): Verdict.GONE},
            id="a pool that publishes nothing while every other pool is whole",
        ),
    ],
)
def test_reservation_verdicts(claims: list[dict[str, Any]], expected: dict[tuple[str, str], Verdict]) -> None:
    assert _verdicts(*claims) == expected


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param(
            [allocated_claim("a", SHARED_4G_AT_0, share=SHARE_A), allocated_claim("b", SHARED_4G_AT_0, share=SHARE_B)],
            {("a", SHARED_4G_AT_0): Verdict.RESERVED, ("b", SHARED_4G_AT_0): Verdict.RESERVED},
            id="two shares of one shared GPU instance do not conflict",
        ),
        pytest.param(
            [allocated_claim("a", SHARED_4G_AT_0, share=SHARE_A), allocated_claim("b", FOUR_G_AT_0)],
            {("a", SHARED_4G_AT_0): Verdict.CONFLICT, ("b", FOUR_G_AT_0): Verdict.CONFLICT},
            id="a share and the exclusive device of its placement conflict",
        ),
        pytest.param(
            [allocated_claim("a", SHARED_4G_AT_0, share=SHARE_A), allocated_claim("b", SHARED_4G_AT_0)],
            {("a", SHARED_4G_AT_0): Verdict.CONFLICT, ("b", SHARED_4G_AT_0): Verdict.CONFLICT},
            id="a share and a whole allocation of the shared device (no shareID) conflict",
        ),
    ],
)
def test_reservation_verdicts_of_shares(claims: list[dict[str, Any]], expected: dict[tuple[str, str], Verdict]) -> None:
    """On a node that publishes shared devices (``sharedDevices: true``)."""
    assert _verdicts(*claims, slices=SHARED_SLICES) == expected


def test_a_pool_in_the_middle_of_a_republish_says_nothing_about_gone_devices() -> None:
    half = copy.deepcopy(SLICES)
    for resource_slice in half:
        resource_slice["spec"]["pool"]["resourceSliceCount"] = len(SLICES) + 1  # one slice not listed yet
    verdicts = _verdicts(allocated_claim("a", "gpu-0-mig-3g40gb-9-99"), allocated_claim("b", THREE_G_AT_4), slices=half)
    assert verdicts == {("a", "gpu-0-mig-3g40gb-9-99"): Verdict.UNKNOWN, ("b", THREE_G_AT_4): Verdict.RESERVED}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = copy.deepcopy(SLICES)
    new = copy.deepcopy(SLICES)
    for resource_slice in new:
        resource_slice["metadata"]["name"] += "-new"
        resource_slice["spec"]["pool"]["generation"] = 2
        for device in resource_slice["spec"].get("devices") or []:
            if device["name"] == THREE_G_AT_4:
                resource_slice["spec"]["devices"].remove(device)
    assert _verdicts(allocated_claim("a", THREE_G_AT_4), slices=old + new) == {("a", THREE_G_AT_4): Verdict.GONE}


@pytest.mark.parametrize("size", [0, -1, "4"], ids=["zero", "negative", "a-string"])
def test_a_device_whose_placement_is_no_placement_is_not_reserved_and_fails_nothing(size: object) -> None:
    broken = copy.deepcopy(SLICES)
    for resource_slice in broken:
        for device in resource_slice["spec"].get("devices") or []:
            if device["name"] == THREE_G_AT_4:
                device["attributes"]["placementSize"] = {"string" if isinstance(size, str) else "int": size}
    verdicts = _verdicts(allocated_claim("a", THREE_G_AT_4), allocated_claim("b", ONE_G_AT_6), slices=broken)
    assert verdicts == {("a", THREE_G_AT_4): Verdict.GONE, ("b", ONE_G_AT_6): Verdict.RESERVED}


def test_a_reservation_carries_the_device_as_published() -> None:
    (reservation,) = compute_reservations(claim_views([allocated_claim("a", THREE_G_AT_4)]), SLICES, DRIVER)
    device = reservation.device
    assert device is not None
    assert (device.node, device.gpu_minor, device.profile, device.placement) == (
        "node-1",
        0,
        "3g.40gb",
        Placement(start=4, size=4),
    )
    assert device.gpu_uuid.startswith("GPU-")
    assert device.multiprocessors == 60


CONTROLLER = claimstatus.controller_field_manager(DRIVER)
PLUGIN = claimstatus.plugin_field_manager(DRIVER, "node-1")


def _with_status(claim: dict[str, Any], devices: list[dict[str, Any]], *managed: dict[str, Any]) -> dict[str, Any]:
    """``claim`` as read after writes: its status.devices and who holds which field (managedFields)."""
    read = copy.deepcopy(claim)
    read["status"]["devices"] = devices
    read["metadata"]["managedFields"] = list(managed)
    return read


def _holding(manager: str, device: str, conditions: list[str], data: bool) -> dict[str, Any]:
    key = "k:" + json.dumps(
        {"device": device, "driver": DRIVER, "pool": "node-1"}, sort_keys=True, separators=(",", ":")
    )
    fields: dict[str, Any] = {".": {}, "f:conditions": {"k:" + json.dumps({"type": t}): {} for t in conditions}}
    if data:
        fields["f:data"] = {}
    return {
        "manager": manager,
        "operation": "Apply",
        "subresource": "status",
        "fieldsV1": {"f:status": {"f:devices": {key: fields}}},
    }


def test_the_controllers_entry_reserved_then_conflict_leaves_data_to_the_plugin_once_it_holds_it() -> None:
    claim = allocated_claim("a", THREE_G_AT_4)
    (reserved,) = compute_reservations(claim_views([claim]), SLICES, DRIVER)
    entries, transitions = compute_claim_entries(claim_view(claim), DRIVER, CONTROLLER, [reserved], 1, NOW)
    assert entries is not None
    (entry,) = entries
    assert entry.data is not None
    assert entry.data["placement"] == {"start": 4, "size": 4}
    assert entry.data["profile"] == "3g.40gb"
    assert entry.data["schemaVersion"] == claimstatus.SCHEMA_VERSION
    assert entry.data["multiprocessors"] == 60
    assert "migUUID" not in entry.data
    (condition,) = entry.conditions
    assert (condition["type"], condition["status"], condition["reason"]) == ("Reserved", "True", "Allocated")
    assert [(t.event_type, t.reason) for t in transitions] == [("Normal", "Reserved")]
    assert transitions[0].message.startswith("Reserved 3g.40gb at memory slices 4\u20137 of GPU-")
    assert transitions[0].message.endswith(" on node-1")

    # The plugin took data over (its identity and Ready): the controller's next pass applies its
    # condition alone, changes nothing and says nothing.
    body = {"driver": DRIVER, "pool": "node-1", "device": THREE_G_AT_4}
    plugin_data = {**entry.data, "migUUID": "MIG-1", "gpuInstanceID": 2, "computeInstanceID": 0}
    ready = {"type": "Ready", "status": "True", "reason": "MigInstanceReady", "message": "", "lastTransitionTime": NOW}
    read = _with_status(
        claim,
        [{**body, "conditions": [dict(condition), ready], "data": plugin_data}],
        _holding(CONTROLLER, THREE_G_AT_4, ["Reserved"], data=False),
        _holding(PLUGIN, THREE_G_AT_4, ["Ready"], data=True),
    )
    again, quiet = compute_claim_entries(claim_view(read), DRIVER, CONTROLLER, [reserved], 1, LATER)
    assert again is not None
    (entry_again,) = again
    assert entry_again.data is None, "data is the plugin's now: the controller does not send it"
    assert claimstatus.is_applied(claim_view(read), CONTROLLER, DRIVER, again)
    assert quiet == []

    other = allocated_claim("b", ONE_G_AT_6)
    conflicted = next(
        r for r in compute_reservations(claim_views([claim, other]), SLICES, DRIVER) if r.claim_name == "a"
    )
    flagged, warned = compute_claim_entries(claim_view(read), DRIVER, CONTROLLER, [conflicted], 1, LATER)
    assert flagged is not None
    (flagged_entry,) = flagged
    assert flagged_entry.data is None
    (reserved_condition,) = flagged_entry.conditions
    assert (reserved_condition["status"], reserved_condition["reason"]) == ("False", "PlacementConflict")
    assert reserved_condition["lastTransitionTime"] == LATER
    assert "default/b" in reserved_condition["message"]
    assert [(t.event_type, t.reason) for t in warned] == [("Warning", "PlacementConflict")]


def test_a_claim_with_a_device_of_a_pool_not_completely_listed_is_not_written() -> None:
    claim = allocated_claim("a", THREE_G_AT_4)
    entries, transitions = compute_claim_entries(claim_view(claim), DRIVER, CONTROLLER, [], 1, NOW)
    assert entries == []
    assert transitions == []
    (reserved,) = compute_reservations(claim_views([claim]), SLICES, DRIVER)
    unknown = dataclasses.replace(reserved, verdict=Verdict.UNKNOWN, device=None)
    assert compute_claim_entries(claim_view(claim), DRIVER, CONTROLLER, [reserved, unknown], 1, NOW) == (None, [])


def test_the_write_rate_allows_a_burst_then_one_write_per_interval() -> None:
    now = [100.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)  # none left: the next token comes in 1/rate s
    now[0] += 0.5
    assert bucket.take() == 0.0
    now[0] += 100.0  # a long pause saves up no more than the burst
    assert [bucket.take() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.5)]


@pytest.mark.parametrize(
    ("lease_duration", "renew_deadline", "retry_period"),
    [
        pytest.param(5, 10, 2, id="deadline past the lease"),
        pytest.param(15, 10, 10, id="retry not before the deadline"),
    ],
)
def test_lease_timings_that_would_allow_two_leaders_are_refused(
    lease_duration: float, renew_deadline: float, retry_period: float
) -> None:
    with pytest.raises(ValueError, match="retry period"):
        LeaseTiming(lease_duration, renew_deadline, retry_period)


# --- shares of a shared GPU-instance device (docs/sharing.md) ---

SHARED_4G_AT_0 = "gpu-0-shared-4g40gb-5-0"


def _share(name: str, device: str, slices: int, share_id: str, *, qualified: bool = False) -> dict[str, Any]:
    claim = allocated_claim(name, device)
    key = f"{DRIVER}/computeSlices" if qualified else "computeSlices"
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result["shareID"] = share_id
    result["consumedCapacity"] = {key: str(slices), "memory": "0"}
    return claim


def test_shares_of_one_device_are_reserved_together() -> None:
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claims = [
        _share("a", SHARED_4G_AT_0, 1, "11111111-1111-4111-8111-111111111111"),
        _share("b", SHARED_4G_AT_0, 1, "22222222-2222-4222-8222-222222222222", qualified=True),
        _share("c", SHARED_4G_AT_0, 2, "33333333-3333-4333-8333-333333333333"),
    ]
    reservations = compute_reservations(claim_views(claims), slices, DRIVER)
    assert [(r.claim_name, r.verdict, r.share_slices) for r in reservations] == [
        ("a", Verdict.RESERVED, 1),
        ("b", Verdict.RESERVED, 1),
        ("c", Verdict.RESERVED, 2),
    ]
    assert {r.share_id for r in reservations} == {
        "11111111-1111-4111-8111-111111111111",
        "22222222-2222-4222-8222-222222222222",
        "33333333-3333-4333-8333-333333333333",
    }
    assert all(r.device is not None and r.device.shared and r.device.compute_slices == 4 for r in reservations)
    assert reservations[0].device is not None
    assert reservations[0].device.placement == Placement(start=0, size=4)


def test_shares_over_the_compute_slices_conflict_with_each_other() -> None:
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claims = [
        _share("a", SHARED_4G_AT_0, 2, "11111111-1111-4111-8111-111111111111"),
        _share("b", SHARED_4G_AT_0, 2, "22222222-2222-4222-8222-222222222222"),
        _share("c", SHARED_4G_AT_0, 1, "33333333-3333-4333-8333-333333333333"),
    ]
    reservations = {r.claim_name: r for r in compute_reservations(claim_views(claims), slices, DRIVER)}
    assert {name: r.verdict for name, r in reservations.items()} == dict.fromkeys("abc", Verdict.CONFLICT)
    assert reservations["a"].conflicts_with == ("default/b", "default/c")


@pytest.mark.parametrize("exclusive", [FOUR_G_AT_0, "gpu-0-mig-1g10gb-19-3", "gpu-0-mig-3g40gb-9-4"])
def test_a_share_conflicts_with_an_overlapping_exclusive_device(exclusive: str) -> None:
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claims = [_share("a", SHARED_4G_AT_0, 1, "11111111-1111-4111-8111-111111111111"), allocated_claim("x", exclusive)]
    verdicts = _verdicts(*claims, slices=slices)
    overlaps = exclusive != "gpu-0-mig-3g40gb-9-4"  # 3g.40gb at 4 is beside 4g.40gb at 0
    expected = Verdict.CONFLICT if overlaps else Verdict.RESERVED
    assert verdicts == {("a", SHARED_4G_AT_0): expected, ("x", exclusive): expected}


def test_one_claim_with_two_shares_of_one_device_conflicts_with_itself_as_the_node_refuses_it() -> None:
    """kube-scheduler may give two requests of one claim the same shared device; the node prepares one
    share of a device per claim, so the controller says conflict, naming the other share."""
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claim = _share("a", SHARED_4G_AT_0, 1, "11111111-1111-4111-8111-111111111111")
    second = dict(claim["status"]["allocation"]["devices"]["results"][0], request="r1")
    second["shareID"] = "22222222-2222-4222-8222-222222222222"
    claim["status"]["allocation"]["devices"]["results"].append(second)
    reservations = compute_reservations(claim_views([claim]), slices, DRIVER)
    assert [(r.share_id, r.verdict, r.conflicts_with) for r in reservations] == [
        ("11111111-1111-4111-8111-111111111111", Verdict.CONFLICT, ("default/a",)),
        ("22222222-2222-4222-8222-222222222222", Verdict.CONFLICT, ("default/a",)),
    ]
    message = build_reserved_message(reservations[0])
    assert message.startswith(
        f"this claim holds two shares of device {SHARED_4G_AT_0} (4g.40gb at memory slices 0\u20133 of "
    )
    assert message.endswith(
        "migdra prepares one share of a device per claim, so the node refuses the claim: ask for each share in a "
        "claim of its own (nothing was deallocated)"
    )
    # ... and an exclusive claim overlapping it is named as well
    both = compute_reservations(claim_views([claim, allocated_claim("x", FOUR_G_AT_0)]), slices, DRIVER)
    assert build_reserved_message(both[0]).endswith(
        "; also, 4g.40gb at memory slices 0\u20133 of "
        + str(both[0].device.gpu_uuid if both[0].device else "")
        + " on node-1 overlaps what default/x holds on the same GPU; at most one of them can be prepared "
        "(nothing was deallocated)"
    )
    # Two claims each with one share of the device stay reserved (shares of one GI by design).
    other = _share("b", SHARED_4G_AT_0, 1, "33333333-3333-4333-8333-333333333333")
    single = _share("c", SHARED_4G_AT_0, 1, "44444444-4444-4444-8444-444444444444")
    assert {r.verdict for r in compute_reservations(claim_views([other, single]), slices, DRIVER)} == {Verdict.RESERVED}


def test_share_metrics_count_shares_and_slices_per_device_and_drop_to_zero() -> None:
    registry = CollectorRegistry()
    metrics = ReservationMetrics(registry)
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claims = [
        _share("a", SHARED_4G_AT_0, 1, "11111111-1111-4111-8111-111111111111"),
        _share("b", SHARED_4G_AT_0, 2, "22222222-2222-4222-8222-222222222222"),
        allocated_claim("x", ONE_G_AT_6),
    ]
    labels = {"node": "node-1", "device": SHARED_4G_AT_0}
    metrics.observe(compute_reservations(claim_views(claims), slices, DRIVER))
    assert registry.get_sample_value("migdra_gpu_instance_shares", labels) == 2
    assert registry.get_sample_value("migdra_gpu_instance_share_compute_slices", labels) == 3
    assert registry.get_sample_value("migdra_gpu_instance_shares", {"node": "node-1", "device": ONE_G_AT_6}) is None
    metrics.observe(compute_reservations(claim_views(claims[2:]), slices, DRIVER))
    assert registry.get_sample_value("migdra_gpu_instance_shares", labels) == 0
    assert registry.get_sample_value("migdra_gpu_instance_share_compute_slices", labels) == 0


class _ConflictingClient:
    """A stand-in API client: every status write answers 409, and reading the claim again fails
    ``read_failures`` times (a timeout) before it answers."""

    def __init__(self, claim: dict[str, Any], read_failures: int) -> None:
        self.claim = claim
        self.read_failures = read_failures
        self.writes = 0

    def fork(self) -> _ConflictingClient:
        return self

    def apply_status(self, kind: object, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        self.writes += 1
        raise ApiException(status=409, reason="Conflict")

    def get(self, kind: object, namespace: str, name: str) -> dict[str, Any]:
        if self.read_failures > 0:
            self.read_failures -= 1
            raise TimeoutError("read timed out")
        return copy.deepcopy(self.claim)


def _controller(client: _ConflictingClient) -> Any:
    from dra_driver.controller.controller import ReservationController
    from dra_driver.kube.events import EventRecorder

    recorder = EventRecorder(client, "migdra-controller")  # type: ignore[arg-type]
    return ReservationController(
        client,  # type: ignore[arg-type]
        DRIVER,
        recorder,
        ReservationMetrics(CollectorRegistry()),
        is_leader=lambda: True,
    )


@pytest.mark.parametrize(("read_failures", "writes"), [(1, 1), (0, 5)], ids=["re-read fails", "five conflicts"])
def test_a_claim_whose_status_write_keeps_failing_is_backed_off_alone(read_failures: int, writes: int) -> None:
    claim = allocated_claim("a", THREE_G_AT_4)
    client = _ConflictingClient(claim, read_failures)
    controller = _controller(client)
    held = compute_reservations(claim_views([claim]), SLICES, DRIVER)
    controller._converge(claim_view(claim), held, controller._desired(claim_view(claim), held))  # raises nothing
    assert client.writes == writes
    assert "uid-a" in controller._backoffs, "the claim is backed off, to be tried again later"
    assert controller.metrics.writes.labels(result="conflict")._value.get() == writes
    assert controller.metrics.writes.labels(result="error")._value.get() == 1


def test_the_controller_writes_each_share_its_own_entry_keyed_by_share_id() -> None:
    slices = SHARED_SLICES  # with sharedDevices: true the shared device is published beside the exclusive one
    claim = _share("a", SHARED_4G_AT_0, 2, "11111111-1111-4111-8111-111111111111")
    other_share = {
        "driver": DRIVER,
        "pool": "node-1",
        "device": SHARED_4G_AT_0,
        "shareID": "22222222-2222-4222-8222-222222222222",
        "data": {"migUUID": "MIG-other"},
    }
    held = compute_reservations(claim_views([claim]), slices, DRIVER)
    read = _with_status(claim, [other_share])
    entries, transitions = compute_claim_entries(claim_view(read), DRIVER, CONTROLLER, held, 1, NOW)
    assert entries is not None
    (ours,) = entries
    assert (ours.device, ours.share_id) == (SHARED_4G_AT_0, "11111111-1111-4111-8111-111111111111")
    assert ours.data is not None
    assert ours.data["computeSlices"] == 2
    assert "multiprocessors" not in ours.data, "the GPU instance's SMs are not the share's"
    assert ours.data["placement"] == {"start": 0, "size": 4}
    assert [c["type"] for c in ours.conditions] == [claimstatus.RESERVED]
    assert [t.reason for t in transitions] == [claimstatus.RESERVED]
    body = claimstatus.build_apply_body("default", "a", "uid-a", DRIVER, entries)
    assert [d.get("shareID") for d in body["status"]["devices"]] == ["11111111-1111-4111-8111-111111111111"]
