"""Graceful pod deletion and pod defaults, through the real ``kubectl`` and the official client.

kube-apiserver only marks a bound pod on delete (``deletionTimestamp`` = now + grace) and the kubelet
removes it with a zero-grace delete once its containers stopped.  kubectl's ``delete`` waits for the
pod to be gone, so these tests check that it does finish when such a component exists, that
``--wait=false`` leaves the pod ``Terminating``, that ``--grace-period=0 --force`` removes it at once,
and that both the query-parameter and the body form of ``gracePeriodSeconds`` are read.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from migdra_devcluster.apiserver import LocalAPIServer
from tests.devcluster.integration.test_apiserver_kubectl import kubectl_binary

pytestmark = pytest.mark.api_server(gc_interval=0.1)

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
MIG = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def core(api_server: LocalAPIServer) -> Iterator[client.CoreV1Api]:
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        yield client.CoreV1Api(c)


@pytest.fixture
def kubectl(api_server: LocalAPIServer, tmp_path: Path) -> Kubectl:
    kubeconfig = api_server.write_kubeconfig(tmp_path / "kubeconfig")
    binary = kubectl_binary()

    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
        return result

    return run


def pod_body(name: str, node: str | None = "node-1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}
    if node:
        body["spec"]["nodeName"] = node
    return body


def read_or_none(core: client.CoreV1Api, name: str) -> Any:
    try:
        return core.read_namespaced_pod(name, "default")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_kubectl_delete_without_wait_leaves_a_bound_pod_terminating(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    core.create_namespaced_pod("default", pod_body("bound"))
    deleted = kubectl("delete", "pod", "bound", "--wait=false")
    assert deleted.stdout.startswith('pod "bound" deleted')
    pod = core.read_namespaced_pod("bound", "default")
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 30
    # kubectl itself sees it (its table's STATUS column, `tables.py`, still shows the phase).
    grace = kubectl("get", "pod", "bound", "-o", "jsonpath={.metadata.deletionGracePeriodSeconds}").stdout
    assert grace == "30"
    core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    assert read_or_none(core, "bound") is None


def test_kubectl_force_delete_removes_a_bound_pod_at_once(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    core.create_namespaced_pod("default", pod_body("forced"))
    result = kubectl("delete", "pod", "forced", "--grace-period=0", "--force")
    assert 'pod "forced" force deleted' in result.stdout
    assert read_or_none(core, "forced") is None


def test_kubectl_delete_of_an_unbound_pod_finishes_at_once(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    core.create_namespaced_pod("default", pod_body("pending", node=None))
    result = kubectl("delete", "pod", "pending", "--timeout=20s")
    assert result.stdout.startswith('pod "pending" deleted')
    assert read_or_none(core, "pending") is None


def test_kubectl_delete_waits_until_a_kubelet_finishes_the_deletion(
    api_server: LocalAPIServer, core: client.CoreV1Api, kubectl: Kubectl
) -> None:
    core.create_namespaced_pod("default", pod_body("served"))
    marked_seen = threading.Event()

    def kubelet() -> None:
        # What a kubelet does: see the deletionTimestamp, stop the containers, delete with grace 0.
        with client.ApiClient(client.Configuration(host=api_server.url)) as c:
            pods = client.CoreV1Api(c)
            stream = watch.Watch()
            for event in stream.stream(pods.list_namespaced_pod, "default", timeout_seconds=30):
                pod = event["object"]
                if pod.metadata.name == "served" and pod.metadata.deletion_timestamp and event["type"] == "MODIFIED":
                    marked_seen.set()
                    pods.delete_namespaced_pod("served", "default", grace_period_seconds=0)
                    stream.stop()

    worker = threading.Thread(target=kubelet, daemon=True)
    worker.start()
    result = kubectl("delete", "pod", "served", "--timeout=30s", check=False, timeout=45)
    worker.join(35)
    assert marked_seen.is_set(), "the pod was never marked for deletion"
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('pod "served" deleted')
    assert read_or_none(core, "served") is None


def test_kubectl_delete_times_out_when_nobody_finishes_the_deletion(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    core.create_namespaced_pod("default", pod_body("stuck"))
    result = kubectl("delete", "pod", "stuck", "--timeout=2s", check=False)
    assert result.returncode != 0
    assert "timed out waiting" in result.stderr
    assert core.read_namespaced_pod("stuck", "default").metadata.deletion_timestamp is not None


def test_grace_period_from_the_query_and_from_the_body(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("query", terminationGracePeriodSeconds=300))
    core.create_namespaced_pod("default", pod_body("body", terminationGracePeriodSeconds=300))
    by_query = core.delete_namespaced_pod("query", "default", grace_period_seconds=20)
    by_body = core.delete_namespaced_pod("body", "default", body=client.V1DeleteOptions(grace_period_seconds=25))
    assert by_query.metadata.deletion_grace_period_seconds == 20
    assert by_body.metadata.deletion_grace_period_seconds == 25
    shorter = core.delete_namespaced_pod("body", "default", body=client.V1DeleteOptions(grace_period_seconds=5))
    assert shorter.metadata.deletion_grace_period_seconds == 5
    delta = by_body.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp
    assert delta.total_seconds() == 20
    longer = core.delete_namespaced_pod("body", "default", grace_period_seconds=60)
    assert longer.metadata.deletion_grace_period_seconds == 5
    assert longer.metadata.resource_version == shorter.metadata.resource_version, "nothing was written"


def test_watch_shows_the_mark_then_the_removal(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod_body("events"))
    core.delete_namespaced_pod("events", "default")
    core.delete_namespaced_pod("events", "default", grace_period_seconds=0)
    seen: list[tuple[str, Any]] = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod, "default", resource_version=created.metadata.resource_version, timeout_seconds=5
    ):
        seen.append((event["type"], event["object"].metadata.deletion_grace_period_seconds))
        if len(seen) == 3:
            stream.stop()
    assert seen == [("MODIFIED", 30), ("MODIFIED", 0), ("DELETED", 0)]


def test_a_finished_pod_goes_at_once(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("done"))
    core.patch_namespaced_pod_status("done", "default", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("done", "default")
    assert read_or_none(core, "done") is None


def test_pod_defaults_and_requests_from_limits_as_kubectl_sees_them(core: client.CoreV1Api, kubectl: Kubectl) -> None:
    body = pod_body("gpu", node=None)
    body["spec"]["containers"][0]["resources"] = {"limits": {MIG: "1"}}
    core.create_namespaced_pod("default", body)
    pod = yaml.safe_load(kubectl("get", "pod", "gpu", "-o", "yaml").stdout)
    spec = pod["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {MIG: "1"}, "requests": {MIG: "1"}}
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["schedulerName"]) == (
        "Always",
        30,
        "default-scheduler",
    )
    assert (spec["dnsPolicy"], spec["enableServiceLinks"]) == ("ClusterFirst", True)
