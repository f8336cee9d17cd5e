"""The kubelet-facing gRPC layer of the node plugin: registration, DRAPlugin v1/v1beta1, health.

The only part of the product that serves gRPC (``grpc`` is imported only here and by the generated
message modules in :mod:`dra_driver.kubelet.protos`, which ``hack/gen_protos.py`` makes from
``protos/``).  It converts kubelet's messages to the plain types of :mod:`dra_driver.kubelet.calls`
and back and calls a :class:`~dra_driver.kubelet.calls.DraService`; it never prepares anything itself.

Modules: ``sockets`` (socket files), ``convert`` (message conversion), ``dra`` / ``registration`` /
``health`` (one service each), ``servers`` (lifecycle, concurrency model, message sizes),
``liveness`` (the process's own gRPC health check on TCP, for a livenessProbe).
"""

from kubeletplugin.grpc.health import DeviceHealthSource
from kubeletplugin.grpc.registration import RegistrationStatus
from kubeletplugin.grpc.servers import PluginServers
from kubeletplugin.grpc.sockets import NotASocketError, SocketInUseError, SocketPathError

__all__ = [
    "DeviceHealthSource",
    "NotASocketError",
    "PluginServers",
    "RegistrationStatus",
    "SocketInUseError",
    "SocketPathError",
]
