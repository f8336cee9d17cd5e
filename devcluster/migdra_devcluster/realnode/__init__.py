"""A real node of the development cluster: the upstream kubelet, containerd with CDI and runc running pods
on devices ``migdra kubelet-plugin`` prepares on simulated GPUs (docs/real-node.md)."""
