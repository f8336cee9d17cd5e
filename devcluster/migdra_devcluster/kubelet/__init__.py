"""The simulated cluster's kubelet: one :class:`Kubelet` per node, in-process threads, talking to the node's
DRA plugin only through its unix sockets with gRPC, and to the API server through
:mod:`dra_driver.kube`.  See :mod:`.kubelet` for what it does and what it leaves out."""

from dra_driver.kubelet.calls import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from migdra_devcluster.kubelet.kubelet import CDI_ANNOTATION, FAILED_PREPARE, FAILED_UNPREPARE, Kubelet
from migdra_devcluster.kubelet.pluginclient import PluginClient, PluginInfo, RegistrationRejected
from migdra_devcluster.kubelet.pluginwatcher import PluginWatcher

__all__ = [
    "CDI_ANNOTATION",
    "FAILED_PREPARE",
    "FAILED_UNPREPARE",
    "ClaimRef",
    "Kubelet",
    "PluginClient",
    "PluginInfo",
    "PluginWatcher",
    "PrepareResult",
    "PreparedDevice",
    "RegistrationRejected",
    "UnprepareResult",
]
