"""tests/e2e/test_realize_before_bind.py on the upstream control plane: kube-scheduler's own
DynamicResources plugin waits for migdra's binding condition, and on ``realization-failed`` unreserves
the claim and places the pod again, on another device.

The test bodies are imported; only the ``cluster`` fixture differs (the same fault plans).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.test_realize_before_bind import (
    FAIL_FIRST_CREATION,
    SLOW_CREATION,
    test_a_failed_realization_sends_the_pod_to_another_placement_and_leaves_no_instance,
    test_the_pod_binds_only_once_realized_and_kubelet_creates_nothing_new,
)
from tests.kube.cluster import kube_cluster
from tests.sim_cluster import SimCluster

pytestmark = pytest.mark.xdist_group("kube-realize-before-bind")

__all__ = [
    "test_a_failed_realization_sends_the_pod_to_another_placement_and_leaves_no_instance",
    "test_the_pod_binds_only_once_realized_and_kubelet_creates_nothing_new",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with kube_cluster(
        "--nodes",
        "2",
        "--gpus",
        "H100-SXM5-80GB:1",
        "--realize-before-bind",
        "--plugin-env",
        f"node-1:MIGDRA_SIM_FAULTS={json.dumps(FAIL_FIRST_CREATION)}",
        "--plugin-env",
        f"node-2:MIGDRA_SIM_FAULTS={json.dumps(SLOW_CREATION)}",
    ) as sim:
        yield sim
