"""The cluster view from API objects alone: which memory slices hold which claim, which a foreign instance
occupies, what is realized, what still fits the published counters, the largest profile and the
fragmentation index -- and the ``migdra status`` table and JSON built from it."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from dra_driver.cli.status_command import render_status, status_document
from dra_driver.clusterview import compute_cluster_occupancy
from dra_driver.devicemodel import example_inventory, example_slices
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.occupancy import GpuOccupancy, render_occupancy
from dra_driver.devicemodel.pool import build_pool
from dra_driver.mig import Placement, load_catalog
from dra_driver.nvml.types import GpuInstanceInfo
from tests.sim_objects import claim_views

DRIVER = "gpu.migdra.io"
NODE = "n1"
H100 = load_catalog().model("H100-SXM5-80GB")


def slices_with_foreign(profile: str, start: int, size: int, gpus: int = 1) -> list[dict[str, Any]]:
    """H100s on NODE, GPU 0 carrying a GPU instance migdra did not create at ``start``."""
    inventory = example_inventory(["H100-SXM5-80GB"] * gpus)
    entry = inventory.gpus[0]
    foreign = GpuInstanceInfo(
        entry.gpu.uuid, 7, H100.profile_by_name(profile).profile_id, Placement(start=start, size=size)
    )
    carved = dataclasses.replace(entry, gpu_instances=(foreign,))
    inventory = dataclasses.replace(inventory, gpus=(carved, *inventory.gpus[1:]))
    return render_slices(build_pool(inventory, DeviceModelConfig()), NODE, generation=1)


def slices_with_shared_devices(node_name: str, gpus: list[str]) -> list[dict[str, Any]]:
    """What a node with ``sharedDevices: true`` publishes (off by default): its shared devices too."""
    config = DeviceModelConfig(driver_name=DRIVER, shared_devices=True)
    return render_slices(build_pool(example_inventory(gpus), config), node_name, generation=1)


def claim(name: str, *devices: str, status: list[dict[str, Any]] | None = None, **result: Any) -> dict[str, Any]:
    results = [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d, **result} for d in devices]
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    if status is not None:
        body["status"]["devices"] = status
    return body


def entry(device: str, *conditions: tuple[str, str, str], **data: Any) -> dict[str, Any]:
    """A status.devices[] entry as the plugin and the controller write it."""
    return {
        "driver": DRIVER,
        "pool": NODE,
        "device": device,
        "data": {"schemaVersion": "v1", **data},
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": "2025-01-01T00:00:00Z"}
            for t, s, r in conditions
        ],
    }


def fits(gpu: GpuOccupancy) -> set[tuple[str, int]]:
    return {(a.profile, a.placement_start) for a in gpu.allocatable}


THREE_G_AT_4 = "gpu-0-mig-3g40gb-9-4"


def test_foreign_slices_claims_and_what_still_fits_on_one_gpu() -> None:
    """A foreign 1g at 0 and a claim on 3g at 4 leave slices 1-3: 2g at 2 is the largest that fits (3g
    at 0 overlaps the foreign instance, so it is not even published), fragmentation 1 - 2/3."""
    gpus = compute_cluster_occupancy(
        slices_with_foreign("1g.10gb", 0, 1), claim_views([claim("c", THREE_G_AT_4)]), DRIVER
    )
    (gpu,) = gpus
    assert (gpu.node, gpu.name, gpu.product) == (NODE, "gpu-0", "NVIDIA H100 80GB HBM3")
    assert gpu.slices == [None, None, None, None, "ns/c", "ns/c", "ns/c", "ns/c"]
    assert gpu.foreign_slices == [0]
    assert gpu.free_slices == 3
    assert fits(gpu) == {
        ("1g.10gb", 1),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("1g.10gb+me", 1),
        ("1g.10gb+me", 2),
        ("1g.10gb+me", 3),
        ("1g.20gb", 2),
        ("2g.20gb", 2),
    }
    largest = gpu.largest_allocatable
    assert largest is not None
    assert (largest.profile, largest.placement_start, largest.placement_size, largest.multiprocessors) == (
        "2g.20gb",
        2,
        2,
        32,
    )
    assert gpu.fragmentation == pytest.approx(1 - 2 / 3)
    assert render_occupancy(gpus) == (
        "n1         gpu-0    [x . . . A A A A]  3/8 free\n"
        "\n"
        "memory slices held by:\n"
        "  A = ns/c\n"
        "  x = an instance migdra did not create (foreign)\n"
    )


def _with_counter(slices: list[dict[str, Any]], counter: str, value: str) -> list[dict[str, Any]]:
    return _with_counters(slices, [counter], value)


def _with_counters(slices: list[dict[str, Any]], counters: list[str], value: str) -> list[dict[str, Any]]:
    changed = copy.deepcopy(slices)
    for resource_slice in changed:
        for counter_set in resource_slice["spec"].get("sharedCounters") or []:
            for counter in counters:
                counter_set["counters"][counter] = {"value": value}
    return changed


@pytest.mark.parametrize(
    ("slices", "claims", "largest", "placements", "fragmentation", "absent"),
    [
        pytest.param(example_slices(["H100"], node_name=NODE), [], "7g.80gb", [0], 0.0, set(), id="empty-gpu"),
        pytest.param(
            example_slices(["H100"], node_name=NODE),
            [claim("c", THREE_G_AT_4)],
            "4g.40gb",
            [0],
            0.0,
            set(),
            id="3g-at-4",
        ),
        pytest.param(
            slices_with_foreign("3g.40gb", 0, 4),
            [claim("c", THREE_G_AT_4)],
            None,
            [],
            0.0,
            set(),
            id="full-foreign-and-claim",
        ),
        pytest.param(
            example_slices(["H100"], node_name=NODE),
            [claim("a", "gpu-0-mig-1g10gb-19-1"), claim("b", "gpu-0-mig-1g10gb-19-5")],
            "2g.20gb",
            [2],
            1 - 2 / 6,
            {("3g.40gb", 0), ("4g.40gb", 0)},
            id="scattered-1g",
        ),
        pytest.param(  # the OFA is the foreign instance's: no +me anywhere, though the slices are free
            slices_with_foreign("1g.10gb+me", 6, 1),
            [],
            "4g.40gb",
            [0],
            1 - 4 / 7,
            {("1g.10gb+me", 0), ("7g.80gb", 0)},
            id="foreign-takes-the-ofa",
        ),
        pytest.param(  # counter values are read from the slice: no OFA left rules out +me and 7g
            _with_counter(example_slices(["H100"], node_name=NODE), "ofa-engines", "0"),
            [],
            "4g.40gb",
            [0],
            1 - 4 / 8,
            {("1g.10gb+me", 0), ("7g.80gb", 0)},
            id="published-counters-not-the-catalog",
        ),
        pytest.param(  # a value that is not an integer never makes a device look allocatable
            _with_counters(example_slices(["H100"], node_name=NODE), [f"memory-slice-{i}" for i in range(8)], "one"),
            [],
            None,
            [],
            1.0,
            {("1g.10gb", 0)},
            id="unreadable-counter-is-exhausted",
        ),
        pytest.param(  # an admin-access allocation holds nothing, as in kube's allocator
            example_slices(["H100"], node_name=NODE),
            [claim("admin", "gpu-0-mig-7g80gb-0-0", adminAccess=True)],
            "7g.80gb",
            [0],
            0.0,
            set(),
            id="admin-access-holds-nothing",
        ),
    ],
)
def test_largest_profile_and_fragmentation(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    largest: str | None,
    placements: list[int],
    fragmentation: float,
    absent: set[tuple[str, int]],
) -> None:
    (gpu, *_) = compute_cluster_occupancy(slices, claim_views(claims), DRIVER)
    found = gpu.largest_allocatable
    assert (found.profile if found else None) == largest
    assert gpu.largest_placements == placements
    assert gpu.fragmentation == pytest.approx(fragmentation)
    assert not fits(gpu) & absent


def test_reserved_realized_and_conflicting_instances_come_from_the_claim_status() -> None:
    slices = example_slices(["H100"], node_name=NODE)
    realized = claim(
        "done",
        "gpu-0-mig-1g10gb-19-6",
        status=[entry("gpu-0-mig-1g10gb-19-6", ("Ready", "True", "Prepared"), migUUID="MIG-1", gpuInstanceID=13)],
    )
    realized["status"]["devices"][0]["data"]["computeInstanceID"] = 0
    pending = claim("waiting", "gpu-0-mig-1g10gb-19-5", status=[entry("gpu-0-mig-1g10gb-19-5")])
    ready_without_uuid = claim(
        "odd", "gpu-0-mig-1g10gb-19-4", status=[entry("gpu-0-mig-1g10gb-19-4", ("Ready", "True", "Prepared"))]
    )
    three_g_at_0 = "gpu-0-mig-3g40gb-9-0"
    conflict = claim("clash", three_g_at_0, status=[entry(three_g_at_0, ("Reserved", "False", "PlacementConflict"))])
    other_driver = claim(
        "other",
        "gpu-0-mig-1g10gb-19-3",
        status=[{**entry("gpu-0-mig-1g10gb-19-3", ("Ready", "True", "x")), "driver": "x.io"}],
    )
    other_driver["status"]["allocation"]["devices"]["results"][0]["driver"] = "x.io"
    (gpu,) = compute_cluster_occupancy(
        slices, claim_views([realized, pending, ready_without_uuid, conflict, other_driver]), DRIVER
    )
    by_claim = {i.claim: i for i in gpu.instances}
    assert set(by_claim) == {"ns/done", "ns/waiting", "ns/odd", "ns/clash"}
    done = by_claim["ns/done"]
    assert (done.realized, done.mig_uuid, done.gpu_instance_id, done.compute_instance_id) == (True, "MIG-1", 13, 0)
    assert not by_claim["ns/waiting"].realized
    assert not by_claim["ns/odd"].realized  # Ready without a MIG UUID is not an instance one can use
    assert by_claim["ns/clash"].conflict == "PlacementConflict: Reserved PlacementConflict"
    assert gpu.instances_by_profile(realized=False) == {"1g.10gb": 3, "3g.40gb": 1}
    assert gpu.instances_by_profile(realized=True) == {"1g.10gb": 1}
    text = render_status([gpu], DRIVER)
    assert "1 node(s), 1 GPU(s) of gpu.migdra.io: 4 instance(s) reserved, 1 realized, 1 in conflict" in text
    assert "    memory slices  [A A A A B C D .]  1/8 free" in text  # letters per GPU, by first slice
    assert "    A! ns/clash  3g.40gb at 0  gpu-0-mig-3g40gb-9-0  CONFLICT (Reserved=False): PlacementConflict" in text
    assert "    D  ns/done  1g.10gb at 6  gpu-0-mig-1g10gb-19-6  realized MIG-1 (GI 13, CI 0)" in text
    assert "    C  ns/waiting  1g.10gb at 5  gpu-0-mig-1g10gb-19-5  reserved, not realized yet" in text


def test_a_whole_gpu_is_one_cell_and_one_allocatable_device() -> None:
    slices = example_slices(["H100", "H100"], mig_enabled=False, node_name=NODE)
    held = claim("whole", "gpu-1", status=[entry("gpu-1", ("Ready", "True", "Prepared"))])
    free, taken = compute_cluster_occupancy(slices, claim_views([held]), DRIVER)
    assert (free.name, free.whole_gpu, free.slices, free.free_slices) == ("gpu-0", True, [None], 1)
    assert [(a.device, a.profile) for a in free.allocatable] == [("gpu-0", "gpu")]
    assert free.uuid.startswith("GPU-")
    assert (taken.slices, taken.free_slices, taken.allocatable, taken.fragmentation) == (["ns/whole"], 0, [], 0.0)
    assert [(i.profile, i.realized) for i in taken.instances] == [("gpu", True)]
    assert "    whole GPU      [A]  0/1 free" in render_status([free, taken], DRIVER)


def test_only_each_pools_newest_generation_counts() -> None:
    """During a republish the older generation's slices linger; the allocator ignores them, and so does the map."""
    current = slices_with_foreign("3g.40gb", 4, 4)
    stale = copy.deepcopy(example_slices(["H100"], node_name=NODE))
    for resource_slice in stale:
        resource_slice["spec"]["pool"]["generation"] = 0
        resource_slice["metadata"]["name"] += "-old"
    (gpu,) = compute_cluster_occupancy([*stale, *current], [], DRIVER)
    assert gpu.foreign_slices == [4, 5, 6, 7]
    assert ("7g.80gb", 0) not in fits(gpu)


def test_status_json_document_schema() -> None:
    slices = slices_with_foreign("1g.10gb", 0, 1, gpus=2)
    done = claim(
        "c", THREE_G_AT_4, status=[entry(THREE_G_AT_4, ("Ready", "True", "Prepared"), migUUID="MIG-9", gpuInstanceID=2)]
    )
    document = status_document(compute_cluster_occupancy(slices, claim_views([done]), DRIVER), DRIVER)
    assert (document["schemaVersion"], document["driver"]) == ("v1", DRIVER)
    (node,) = document["nodes"]
    assert node["name"] == NODE
    gpu0, gpu1 = node["gpus"]
    assert set(gpu0) == {
        "name",
        "type",
        "pool",
        "counterSet",
        "product",
        "uuid",
        "memorySlices",
        "freeMemorySlices",
        "slices",
        "foreign",
        "instances",
        "reserved",
        "realized",
        "allocatable",
        "largestProfile",
        "fragmentation",
    }
    assert (gpu0["name"], gpu0["type"], gpu0["counterSet"], gpu0["memorySlices"]) == (
        "gpu-0",
        "mig",
        "gpu-0-counter-set",
        8,
    )
    assert gpu0["slices"][:2] == [{"state": "foreign"}, {"state": "free"}]
    assert gpu0["slices"][4] == {"state": "claim", "claim": "ns/c"}
    assert gpu0["foreign"] == [0]
    assert gpu0["instances"] == [
        {
            "claim": "ns/c",
            "device": THREE_G_AT_4,
            "profile": "3g.40gb",
            "placementStart": 4,
            "placementSize": 4,
            "realized": True,
            "migUUID": "MIG-9",
            "gpuInstanceID": 2,
            "computeInstanceID": None,
            "conflict": None,
            "shareID": None,
            "computeSlices": None,
        }
    ]
    assert (gpu0["reserved"], gpu0["realized"]) == ({"3g.40gb": 1}, {"3g.40gb": 1})
    assert gpu0["largestProfile"] == {
        "profile": "2g.20gb",
        "placementSize": 2,
        "multiprocessors": 32,
        "placementStarts": [2],
    }
    assert gpu0["fragmentation"] == 0.3333
    assert {
        "device": "gpu-0-mig-2g20gb-14-2",
        "profile": "2g.20gb",
        "placementStart": 2,
        "placementSize": 2,
        "computeSlicesFree": None,
    } in gpu0["allocatable"]
    assert (gpu1["freeMemorySlices"], gpu1["largestProfile"]["profile"], gpu1["fragmentation"]) == (8, "7g.80gb", 0.0)


def test_shares_of_one_gpu_instance_hold_its_slices_together_and_each_is_listed() -> None:
    """Three claims sharing one 4g.40gb GI: one holder of its four memory slices, three instances with
    their own compute slices, share IDs and (from each share's own status entry) their own CI."""
    shared = "gpu-0-shared-4g40gb-5-0"
    claims = []
    for number, size in enumerate((1, 1, 2)):
        share_id = f"{number + 1}" * 8 + "-1111-4111-8111-111111111111"
        claims.append(
            {
                "metadata": {"namespace": "default", "name": f"infer-{number}", "uid": f"uid-{number}"},
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {
                                    "request": "share",
                                    "driver": DRIVER,
                                    "pool": "node-1",
                                    "device": shared,
                                    "shareID": share_id,
                                    "consumedCapacity": {"computeSlices": str(size)},
                                }
                            ]
                        }
                    },
                    "devices": [
                        {
                            "driver": DRIVER,
                            "pool": "node-1",
                            "device": shared,
                            "shareID": share_id,
                            "data": {"migUUID": f"MIG-{number}", "gpuInstanceID": 1, "computeInstanceID": number},
                            "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "message": ""}],
                        }
                    ],
                },
            }
        )
    gpus = compute_cluster_occupancy(slices_with_shared_devices("node-1", ["H100"]), claim_views(claims), DRIVER)
    gpu = gpus[0]
    assert gpu.slices[:4] == [f"shared {shared}"] * 4
    assert [(i.claim, i.share_slices, i.compute_instance_id, i.realized) for i in gpu.instances] == [
        ("default/infer-0", 1, 0, True),
        ("default/infer-1", 1, 1, True),
        ("default/infer-2", 2, 2, True),
    ]
    text = render_status(gpus, DRIVER)
    assert "default/infer-2  4g.40gb at 0, share of 2 compute slices" in text
    assert text.count("A  default/infer-") == 3, "one letter for the shared GPU instance"
    document = status_document(gpus, DRIVER)["nodes"][0]["gpus"][0]
    assert [i["computeSlices"] for i in document["instances"]] == [1, 1, 2]
    assert document["instances"][0]["shareID"] == "11111111-1111-4111-8111-111111111111"


def test_a_shared_gpu_instance_with_room_for_more_shares_is_allocatable_but_not_a_free_placement() -> None:
    """One 1-slice share of a 4g.40gb GI: three compute slices are still free for more shares (a node
    whose free capacity is only that once said "allocatable nothing"); its memory slices stay held."""
    shared = "gpu-0-shared-4g40gb-5-0"
    share = {
        "request": "share",
        "driver": DRIVER,
        "pool": "node-1",
        "device": shared,
        "shareID": "11111111-1111-4111-8111-111111111111",
        "consumedCapacity": {"computeSlices": "1"},
    }
    one_share = {
        "metadata": {"namespace": "default", "name": "infer", "uid": "uid-infer"},
        "status": {"allocation": {"devices": {"results": [share]}}},
    }
    (gpu,) = compute_cluster_occupancy(slices_with_shared_devices("node-1", ["H100"]), claim_views([one_share]), DRIVER)
    (room,) = [a for a in gpu.allocatable if a.is_share]
    assert (room.device, room.profile, room.placement_start, room.compute_slices_free) == (shared, "4g.40gb", 0, 3)
    assert gpu.largest_allocatable is not None
    assert gpu.largest_allocatable.placement_start >= 4, "the shared GI's slices are not a free placement"
    assert "a share of 4g.40gb (3 compute slices free) x1" in render_status([gpu], DRIVER)
    (entry,) = [
        a for a in status_document([gpu], DRIVER)["nodes"][0]["gpus"][0]["allocatable"] if a["device"] == shared
    ]
    assert entry["computeSlicesFree"] == 3
