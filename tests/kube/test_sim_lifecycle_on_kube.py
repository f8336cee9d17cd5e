"""``sim up --control-plane kube`` and ``sim down`` leave nothing running: a supervisor killed with SIGKILL
leaves etcd, the Kubernetes components, the plugin and the controller running (each in its own session);
``sim down`` finds them by their pid files and stops them all; a new ``sim up`` in the same directory
starts afresh (etcd's data too: the node's simulated GPUs are new)."""

from __future__ import annotations

import pytest

from migdra_devcluster.supervision import process_alive
from tests.e2e.test_sim_cluster import _processes_under
from tests.kube.cluster import READY_TIMEOUT, kube_args
from tests.kubelet_client import short_socket_dir
from tests.sim_cluster import DEMO, sim_down, start_cluster, stop_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.xdist_group("kube-lifecycle")

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def test_a_killed_supervisor_leaves_nothing_after_sim_down_and_a_new_run_starts_afresh() -> None:
    with short_socket_dir() as root:
        workdir = root / "sim"
        args = ("--gpus", "H100-SXM5-80GB:1", *kube_args())
        first = start_cluster(workdir, *args, ready_timeout=READY_TIMEOUT)
        first.apply("default", (DEMO / "01-mig-1g.yaml").read_text())
        wait_for("the pod to run", lambda: first.running("default", {"inference-1g"}))
        upstream = {c: int((workdir / "kube" / f"{c}.pid").read_text().split()[0]) for c in COMPONENTS}
        first.client.close()
        first.process.kill()
        first.process.wait(timeout=30)
        assert first.process.stdout is not None
        first.process.stdout.close()
        assert all(process_alive(pid) for pid in upstream.values()), "each runs in its own session"

        down = sim_down(workdir)
        assert down.returncode == 0, down.stderr
        for component, pid in upstream.items():
            assert str(pid) in down.stderr, component
        wait_for("every process of the cluster to stop", lambda: not _processes_under(workdir))

        second = start_cluster(workdir, *args, ready_timeout=READY_TIMEOUT)
        try:
            assert second.pods("default") == {}, "etcd's data of the first run is gone"
            assert second.mig_instances() == {"node-1": 0}
        finally:
            stop_cluster(second)
        assert not _processes_under(workdir)
