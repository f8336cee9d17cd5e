"""The embedded control plane of ``migdra sim up`` (``--control-plane local``, the default): migdra's own
API server, resourceclaim controller and scheduler, as threads of the ``sim up`` process.

Why it stays beside the upstream one (:mod:`migdra_devcluster.upstream`): it needs no Go toolchain
and starts in a second, so ``make demo`` works on a fresh machine; how faithfully it answers is judged by
the differential tests against the real kube-apiserver and kube-scheduler (docs/local-control-plane.md).
Every component uses the one admin kubeconfig: the local API server authorizes nobody by default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from dra_driver.kube.client import Client
from migdra_devcluster.apiserver import LocalAPIServer
from migdra_devcluster.claimcontroller import ClaimController
from migdra_devcluster.scheduler.scheduler import Scheduler

LEASE_NAMESPACE = "kube-system"


class EmbeddedControlPlane:
    """Local API server + claim controller + scheduler; the admin kubeconfig at ``<workdir>/kubeconfig``."""

    lease_namespace = LEASE_NAMESPACE

    def __init__(self, workdir: Path, seed: int, progress: Callable[[str], None]) -> None:
        self.kubeconfig = workdir / "kubeconfig"
        self.seed = seed
        self.progress = progress
        self.api: LocalAPIServer | None = None
        self.client: Client | None = None
        self.controller: ClaimController | None = None
        self.scheduler: Scheduler | None = None

    def start(self, interrupt: threading.Event) -> Path | None:
        self.progress("starting the API server")
        self.api = LocalAPIServer()
        self.api.start()
        self.api.write_kubeconfig(self.kubeconfig)
        self.client = Client(self.kubeconfig)
        self.controller = ClaimController(self.client)
        self.controller.start()
        self.scheduler = Scheduler(self.client, seed=self.seed)
        self.scheduler.start()
        return self.kubeconfig

    def grant(self, client: Client, nodes: list[str]) -> None:
        """Nothing to grant: every component uses the admin kubeconfig."""

    def plugin_kubeconfig(self, node: str) -> Path:
        return self.kubeconfig

    def controller_kubeconfig(self) -> Path:
        return self.kubeconfig

    def stop(self) -> None:
        for component in (self.scheduler, self.controller):
            if component is not None:
                component.stop()
        if self.client is not None:
            self.client.close()
        if self.api is not None:
            self.api.stop()
        self.scheduler = self.controller = self.client = self.api = None
