"""What a publish round takes as migdra's own GPU instances while prepares change the records
(kubeletplugin/publishing.py ``compute_pool``): the node's instances are read between two reads of the
records, and an instance named by either read is migdra's."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel.pool import OwnedInstances
from dra_driver.mig.catalog import Placement
from kubeletplugin.publishing import Publishing
from kubeletplugin.settings import PluginSettings

H100 = "H100-SXM5-80GB"
DEVICE = "gpu-0-mig-1g20gb-15-4"  # GPU 0, 1g.20gb at 4:2
PLACEMENT = Placement(start=4, size=2)


class _ScriptedOwnership:
    """The prepare service as a publish round asks it, answering each read of its records in turn."""

    def __init__(self, *reads: OwnedInstances) -> None:
        self.reads = list(reads)

    def owned(self) -> OwnedInstances:
        return self.reads.pop(0)

    def live_shares(self) -> int:
        return 0

    def share_compute_instances(self) -> dict[tuple[str, int, Placement], tuple[Placement, ...]]:
        return {}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # NVML was being asked when the round began; the ID was recorded while the round read the node.
        ("placement", "id"),
        # Created, then released and its record dropped, while the round read the node.
        ("placement", "nothing"),
        # Created and its ID recorded while the round read the node.
        ("nothing", "id"),
    ],
)
def test_a_publish_round_never_calls_migdras_own_instance_foreign_whenever_its_record_changes(
    simulated_node: Any, before: str, after: str
) -> None:
    """A round reads what migdra owns before and after the node's instances and keeps both reads'
    IDs and placements: a record that swaps a placement for its ID (or is dropped) while the round
    runs leaves the instance named by one of them (a round that read IDs and placements apart once
    withheld the placement for a whole rescan interval)."""
    publishing = Publishing(PluginSettings(node_name="node-1"), CollectorRegistry(), threading.Event())
    with simulated_node(f"{H100}:1") as nvml:
        gpu = nvml.list_gpus()[0].uuid
        gi = nvml.create_gpu_instance(gpu, 15, PLACEMENT)
        reads = {
            "placement": OwnedInstances(placements=frozenset({(gpu, 15, PLACEMENT)})),
            "id": OwnedInstances(instances=frozenset({(gpu, gi.gpu_instance_id)})),
            "nothing": OwnedInstances(),
        }
        pool = publishing.compute_pool(nvml, _ScriptedOwnership(reads[before], reads[after]))

    assert pool.foreign_instances == ()
    assert DEVICE in {device.name for device in pool.devices}
