"""RBAC authorization of the local API server over HTTPS with bearer tokens, through the official client:
bindings by user, group and ServiceAccount, RoleBindings confined to their namespace, resourceNames,
subresources, watch versus list, and kube's 403 wording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from migdra_devcluster.apiserver import LocalAPIServer

SA = "system:serviceaccount:team-a:reader"
pytestmark = pytest.mark.api_server(
    tokens=[
        "admin-token,admin,uid-0,system:masters",
        f"sa-token,{SA},uid-1",
        'dev-token,dave,uid-2,"developers"',
        "nobody-token,nobody,uid-3",
    ],
    authorization="RBAC",
)


@dataclass
class Cluster:
    server: LocalAPIServer

    def api(self, token: str) -> client.ApiClient:
        configuration = client.Configuration(
            host=self.server.url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.ssl_ca_cert = str(self.server.ca_cert_path)
        return client.ApiClient(configuration)


@pytest.fixture
def cluster(api_server: LocalAPIServer) -> Cluster:
    cluster = Cluster(api_server)
    with cluster.api("admin-token") as admin:
        core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
        for namespace in ("team-a", "team-b"):
            core.create_namespace({"metadata": {"name": namespace}})
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "one"}, "data": {"k": "v"}})
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "two"}, "data": {"k": "v"}})
        rbac.create_cluster_role(
            {
                "metadata": {"name": "config-reader"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["one"]},
                ],
            }
        )
        rbac.create_namespaced_role_binding(
            "team-a",
            {
                "metadata": {"name": "reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "config-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team-a"}],
            },
        )
        rbac.create_cluster_role(
            {
                "metadata": {"name": "node-status"},
                "rules": [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["update", "get"]}],
            }
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "developers"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-status"},
                "subjects": [{"kind": "Group", "name": "developers"}],
            }
        )
        core.create_node({"metadata": {"name": "node-1"}})
    return cluster


def _refusal(call: Any, *args: Any) -> str:
    with pytest.raises(ApiException) as info:
        call(*args)
    assert info.value.status == 403
    return str(info.value.body)


def test_a_service_account_gets_what_its_role_binding_grants_in_that_namespace_only(cluster: Cluster) -> None:
    with cluster.api("sa-token") as api:
        core = client.CoreV1Api(api)
        assert {m.metadata.name for m in core.list_namespaced_config_map("team-a").items} == {"one", "two"}
        assert core.read_namespaced_config_map("one", "team-a").data == {"k": "v"}
        message = _refusal(core.list_namespaced_config_map, "team-b")
        assert (
            f'configmaps is forbidden: User \\"{SA}\\" cannot list resource \\"configmaps\\" in API group \\"\\" '
            'in the namespace \\"team-b\\"'
        ) in message


def test_resource_names_limit_a_rule_to_those_objects(cluster: Cluster) -> None:
    with cluster.api("sa-token") as api:
        core = client.CoreV1Api(api)
        assert 'configmaps \\"two\\" is forbidden' in _refusal(core.read_namespaced_config_map, "two", "team-a")
        _refusal(core.create_namespaced_config_map, "team-a", {"metadata": {"name": "three"}})
        _refusal(core.delete_namespaced_config_map, "one", "team-a")


def test_a_group_binding_grants_a_subresource_and_not_the_resource(cluster: Cluster) -> None:
    with cluster.api("dev-token") as api:
        core = client.CoreV1Api(api)
        node = core.read_node_status("node-1")
        node.status = client.V1NodeStatus(capacity={"cpu": "4"})
        assert core.replace_node_status("node-1", node).status.capacity == {"cpu": "4"}
        message = _refusal(core.read_node, "node-1")
        assert 'cannot get resource \\"nodes\\" in API group \\"\\" at the cluster scope' in message


def test_a_user_without_bindings_may_read_discovery_and_nothing_else(cluster: Cluster) -> None:
    with cluster.api("nobody-token") as api:
        assert client.CoreApi(api).get_api_versions().versions == ["v1"]
        _refusal(client.CoreV1Api(api).list_namespace)
        _refusal(client.RbacAuthorizationV1Api(api).list_cluster_role)


def test_watch_is_its_own_verb(cluster: Cluster) -> None:
    with cluster.api("admin-token") as admin:
        client.RbacAuthorizationV1Api(admin).create_cluster_role_binding(
            {
                "metadata": {"name": "nobody-lists"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "list-only"},
                "subjects": [{"kind": "User", "name": "nobody"}],
            }
        )
        client.RbacAuthorizationV1Api(admin).create_cluster_role(
            {
                "metadata": {"name": "list-only"},
                "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}],
            }
        )
    with cluster.api("nobody-token") as api:
        core = client.CoreV1Api(api)
        assert len(core.list_namespace().items) >= 2  # bindings apply at once, roles created after them too
        watching = _refusal(lambda: core.list_namespace(watch=True, timeout_seconds=1, _preload_content=False))
        assert 'cannot watch resource \\"namespaces\\"' in watching


def test_rbac_needs_a_token_file() -> None:
    with pytest.raises(ValidationError, match="authorization RBAC needs a token file"):
        LocalAPIServer(authorization="RBAC")
