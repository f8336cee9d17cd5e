"""The kubelet-facing gRPC layer of the node plugin: registration, DRAPlugin v1/v1beta1, health.

The only part of migdra that speaks gRPC (``grpc`` may be imported only under ``kubeletplugin``).
It converts kubelet's messages to the plain types of :mod:`dra_driver.kubelet.calls` and back and
calls a :class:`~dra_driver.kubelet.calls.DraService`; it never prepares anything itself.

Modules: ``sockets`` (socket files), ``convert`` (message conversion), ``dra`` / ``registration`` /
``health`` (one service each), ``servers`` (lifecycle, concurrency model, message sizes), ``gen``
(generated from ``protos/`` by ``hack/gen_protos.py``; do not edit).
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
