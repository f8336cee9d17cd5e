"""The Kubernetes API server, the one package migdra reaches it through (kubelet's plugin API is
:mod:`dra_driver.kubelet`): where the server is (:mod:`~dra_driver.kube.config`), a JSON client
(:mod:`~dra_driver.kube.client`), what a failed request means and how it is retried
(:mod:`~dra_driver.kube.failures`), list-then-watch caches, an Event recorder and a control loop (the
roles client-go's rest config, REST client, informers, recorder and controller loop play for Go
components).

Used by the node plugin, the reservation controller (:mod:`dra_driver.controller`), the CLI's cluster
reads and the development cluster's components (package ``migdra-devcluster``), which it never imports.
"""
