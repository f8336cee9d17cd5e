"""The upstream control plane of ``migdra sim up``: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from their Go modules (``make kube``), run as processes
on loopback with their own PKI, and migdra's components given exactly the Helm chart's credentials.

It owns starting and stopping those processes and the credentials they and migdra's components use.  It
never re-implements any of them: what runs here is what runs in a cluster.  Development tooling, like the
rest of :mod:`migdra_devcluster`; production code never imports it.
"""
