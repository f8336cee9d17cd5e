"""tests/e2e/test_sim_cluster.py's cluster tests on the upstream control plane: the demo's workloads, a
claim's reservation and readiness, a restarted plugin, a shared claim and three shares of one GPU
instance (consumable capacity), a fragmented GPU instance that kube-scheduler is not offered a share
it cannot place in -- now allocated by the real
kube-scheduler, owned by the real resourceclaim controller, validated by the real kube-apiserver.

The test bodies are imported (pytest collects them here), so one assertion serves both control planes;
only the ``cluster`` fixture differs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_shared_gpu_instance import (
    test_a_fragmented_gpu_instance_is_not_offered_a_share_it_cannot_place,
    test_three_shares_run_on_one_gpu_instance_each_on_its_own_compute_instance,
)
from tests.e2e.test_sim_cluster import (
    test_a_claim_with_opaque_configuration_shows_reserved_ready_and_its_mig_uuid,
    test_a_pods_claim_is_reserved_then_ready_with_the_instance_the_simulated_nvml_holds,
    test_a_restarted_plugin_leaves_running_pods_alone_and_serves_later_ones,
    test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod,
    test_simulated_nodes_report_a_kubelet_of_the_control_planes_release,
    test_the_demo_workloads_run_on_mig_devices_and_go_away_without_a_trace,
)
from tests.kube.cluster import kube_cluster
from tests.sim_cluster import SimCluster

pytestmark = pytest.mark.xdist_group("kube-sim-cluster")

__all__ = [
    "test_a_claim_with_opaque_configuration_shows_reserved_ready_and_its_mig_uuid",
    "test_a_fragmented_gpu_instance_is_not_offered_a_share_it_cannot_place",
    "test_a_pods_claim_is_reserved_then_ready_with_the_instance_the_simulated_nvml_holds",
    "test_a_restarted_plugin_leaves_running_pods_alone_and_serves_later_ones",
    "test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod",
    "test_simulated_nodes_report_a_kubelet_of_the_control_planes_release",
    "test_the_demo_workloads_run_on_mig_devices_and_go_away_without_a_trace",
    "test_three_shares_run_on_one_gpu_instance_each_on_its_own_compute_instance",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with kube_cluster("--nodes", "2", "--gpus", "H100-SXM5-80GB:4") as sim:
        yield sim
