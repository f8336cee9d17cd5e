"""The pure parts of the simulated cluster: node GPUs and directories, and the occupancy map (the
DeviceClasses it installs: tests/unit/test_deviceclasses.py)."""

from __future__ import annotations

from pathlib import Path

from dra_driver.devicemodel import example_slices
from dra_driver.devicemodel.occupancy import occupancy, render_occupancy
from dra_driver.resourceclaim import ResourceClaimView
from migdra_devcluster.cluster import ClusterSpec, PluginProcess

REPO = Path(__file__).resolve().parents[3]


def test_node_names_and_directories() -> None:
    spec = ClusterSpec(Path("/tmp/w"), 3, "A30:1")
    assert spec.node_names() == ["node-1", "node-2", "node-3"]
    assert spec.node_dir("node-2") == Path("/tmp/w/nodes/node-2")


def test_a_node_given_its_own_gpus_gets_them_and_the_others_get_the_common_ones() -> None:
    spec = ClusterSpec(Path("/tmp/w"), 3, "H100-SXM5-80GB:2", node_gpus=(("node-3", "A100-SXM4-40GB:1,A30:1"),))
    assert [spec.gpus_of(node) for node in spec.node_names()] == [
        "H100-SXM5-80GB:2",
        "H100-SXM5-80GB:2",
        "A100-SXM4-40GB:1,A30:1",
    ]
    argv = PluginProcess(spec, "node-3", Path("/tmp/w/kubeconfig"), print).argv()
    assert argv[argv.index("--sim-gpus") + 1] == "A100-SXM4-40GB:1,A30:1"


def test_the_occupancy_map_shows_which_memory_slices_hold_which_claim() -> None:
    slices = example_slices(["H100-SXM5-80GB", "H100-SXM5-80GB"], True, "gpu.migdra.io", "n1")
    claim = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "gpu.migdra.io", "pool": "n1", "device": "gpu-1-mig-3g40gb-9-4", "request": "r"},
                        {"driver": "other.io", "pool": "n1", "device": "gpu-0-mig-3g40gb-9-4", "request": "s"},
                    ]
                }
            }
        },
    }
    gpus = occupancy(slices, [ResourceClaimView.model_validate(claim)], "gpu.migdra.io")
    assert [(g.node, g.counter_set, g.free_slices) for g in gpus] == [
        ("n1", "gpu-0-counter-set", 8),
        ("n1", "gpu-1-counter-set", 4),
    ]
    assert gpus[1].slices == [None, None, None, None, "ns/c", "ns/c", "ns/c", "ns/c"]
    assert [(i.claim, i.profile, i.placement_start, i.placement_size) for i in gpus[1].instances] == [
        ("ns/c", "3g.40gb", 4, 4)
    ]
    assert gpus[0].product == "NVIDIA H100 80GB HBM3"
    assert render_occupancy(gpus) == (
        "n1         gpu-0    [. . . . . . . .]  8/8 free\n"
        "n1         gpu-1    [. . . . A A A A]  4/8 free\n"
        "\n"
        "memory slices held by:\n"
        "  A = ns/c\n"
    )
