"""The plugin's claim occupancy against the real kube-apiserver: synced means computed from the first list."""

from __future__ import annotations

from dra_driver.kube.client import CLAIMS, Client
from dra_driver.kube.informer import Changes, Informer
from kubeletplugin.occupancy import ClaimOccupancy
from tests.kube_apiserver import KubeApiServer
from tests.unit.test_placement_occupancy import DRIVER, NODE, claim, result


def test_once_synced_the_allocated_set_is_the_listed_one(api_server: KubeApiServer) -> None:
    """wait_synced means the set was computed from the first complete list, not only that the informer
    listed: the first publish reads the claims already allocated, never the empty set before them."""
    kube = Client(configuration=api_server.configuration(), timeout=5.0)
    allocated = claim(result("gpu-0-mig-1g10gb-19-6"), name="a")
    allocated["metadata"] = {"namespace": "default", "name": "a"}
    allocated["apiVersion"], allocated["kind"] = "resource.k8s.io/v1", "ResourceClaim"
    allocated["spec"] = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.migdra.io"}}]}}
    status = allocated.pop("status")
    created = kube.create(CLAIMS, allocated)
    created["status"] = status
    kube.update(CLAIMS, created, subresource="status")
    claims = Informer(kube, CLAIMS, Changes())
    source = ClaimOccupancy(claims, DRIVER, NODE, lambda: None, debounce=0.2, min_interval=1.0)
    claims.start()
    source.start()
    try:
        assert source.wait_synced(30)
        assert source.allocated() == frozenset({"gpu-0-mig-1g10gb-19-6"})
    finally:
        source.stop()
        claims.stop()
