"""The node plugin's scrape-time series: ``migdra_mig_instance_info`` follows the instances it is given
at every scrape (none left behind), and ``migdra_kubelet_registered`` follows kubelet's last verdict."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from dra_driver.kubelet.protos import pluginregistration_v1_pb2 as registration_pb2
from kubeletplugin.grpc.registration import RegistrationServicer
from kubeletplugin.metrics import MIG_INSTANCE_INFO, MigInstance, register_mig_instances

ONE = MigInstance(
    gpu_uuid="GPU-1",
    mig_uuid="MIG-a",
    profile="3g.40gb",
    gpu_instance_id=2,
    compute_instance_id=0,
    placement_start=4,
    placement_size=4,
    namespace="team-a",
    claim="train",
    claim_uid="uid-a",
)
TWO = MigInstance("GPU-1", "MIG-b", "1g.10gb", 9, 0, 0, 1, "team-a", "eval", "uid-b")
SHARE = MigInstance(
    "GPU-1",
    "MIG-c",
    "4g.40gb",
    5,
    1,
    0,
    4,
    "team-b",
    "infer",
    "uid-c",
    share_id="11111111-1111-4111-8111-111111111111",
    compute_slices=2,
)


def test_the_info_series_is_computed_at_every_scrape() -> None:
    registry = CollectorRegistry()
    instances = [ONE, TWO]
    register_mig_instances(registry, "node-1", lambda: list(instances))
    labels = {
        "node": "node-1",
        "gpu_uuid": "GPU-1",
        "mig_uuid": "MIG-a",
        "profile": "3g.40gb",
        "gpu_instance_id": "2",
        "compute_instance_id": "0",
        "placement_start": "4",
        "placement_size": "4",
        "namespace": "team-a",
        "claim": "train",
        "claim_uid": "uid-a",
        "share_id": "",
        "compute_slices": "",
    }
    assert registry.get_sample_value(MIG_INSTANCE_INFO, labels) == 1
    assert registry.get_sample_value(MIG_INSTANCE_INFO, {**labels, "mig_uuid": "MIG-b"}) is None
    instances.remove(ONE)  # unprepared
    assert registry.get_sample_value(MIG_INSTANCE_INFO, labels) is None
    (family,) = (f for f in registry.collect() if f.name == MIG_INSTANCE_INFO)
    assert [s.labels["mig_uuid"] for s in family.samples] == ["MIG-b"]


def test_a_share_says_its_share_id_and_compute_slices() -> None:
    registry = CollectorRegistry()
    register_mig_instances(registry, "node-1", lambda: [SHARE])
    (family,) = (f for f in registry.collect() if f.name == MIG_INSTANCE_INFO)
    (sample,) = family.samples
    assert sample.labels["share_id"] == "11111111-1111-4111-8111-111111111111"
    assert sample.labels["compute_slices"] == "2"
    assert sample.labels["profile"] == "4g.40gb"  # the shared GI's profile; its CI is compute_slices of it


def test_registering_does_not_read_the_instances() -> None:
    def not_yet() -> list[MigInstance]:
        raise AssertionError("read at registration")

    register_mig_instances(CollectorRegistry(), "node-1", not_yet)


def test_kubelet_registered_follows_the_last_notification() -> None:
    registry = CollectorRegistry()
    servicer = RegistrationServicer("gpu.migdra.io", Path("/plugins/dra.sock"), ["v1.DRAPlugin"], registry)
    assert registry.get_sample_value("migdra_kubelet_registered") == 0
    servicer.NotifyRegistrationStatus(registration_pb2.RegistrationStatus(plugin_registered=True), None)  # type: ignore[arg-type]
    assert registry.get_sample_value("migdra_kubelet_registered") == 1
    rejected = registration_pb2.RegistrationStatus(plugin_registered=False, error="version")
    servicer.NotifyRegistrationStatus(rejected, None)  # type: ignore[arg-type]
    assert registry.get_sample_value("migdra_kubelet_registered") == 0
