"""migdra's development cluster: what a cluster would provide, for development, tests and the demo.

A distribution of its own (``migdra-devcluster``, the folder ``devcluster/``), never in migdra's wheel or
image: the product never imports it (an import-linter contract says so), and ``migdra sim`` reaches its
commands (:mod:`migdra_devcluster.cli`) through the ``migdra.commands`` entry point.  It imports migdra's
library and runs migdra's own processes (``migdra kubelet-plugin``, ``migdra controller``) as a cluster
would.

Parts: ``apiserver`` (the local Kubernetes API server), ``claimcontroller``, ``scheduler``, ``kubelet``,
``embedded`` (those three in one process), ``upstream`` (etcd and the kube-* binaries instead),
``cluster`` (a whole cluster: ``migdra sim up``) and ``supervision`` (the processes it starts).
"""
