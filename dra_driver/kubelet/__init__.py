"""Kubelet's plugin API, the other API migdra talks to (the Kubernetes API server's is
:mod:`dra_driver.kube`): what kubelet and a DRA plugin say to each other over the plugin's sockets.

- :mod:`dra_driver.kubelet.protos`: the gRPC code protoc generates from ``protos/*.proto``
  (DRAPlugin v1 and v1beta1, plugin registration, device health); generated, never edited;
- :mod:`dra_driver.kubelet.calls`: the DRAPlugin calls in plain Python types and the
  :class:`~dra_driver.kubelet.calls.DraService` a plugin implements, the same for every API version.

Both ends use it: the node plugin (``kubeletplugin.grpc`` serves it) and the development cluster's
kubelet (which calls plugins).  Importing this package imports neither gRPC nor protobuf.
"""
