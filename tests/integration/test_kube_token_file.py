"""A kubeconfig whose user logs in with a ``tokenFile``: migdra sends the token the file holds now, so a
rotated token (a projected ServiceAccount token, or one issued again after a pod was recreated) is used
without a restart -- on the real kube-apiserver, which refuses the old one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import Client, Kind
from tests.kube_apiserver import KubeApiServer

SERVICE_ACCOUNTS = Kind("", "v1", "serviceaccounts", namespaced=True, kind="ServiceAccount")
SELF_SUBJECT_REVIEWS = Kind(
    "authentication.k8s.io", "v1", "selfsubjectreviews", namespaced=False, kind="SelfSubjectReview"
)


def who_am_i(client: Client) -> str:
    review = client.create(
        SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    return str(review["status"]["userInfo"]["username"])


def test_a_rotated_token_file_is_used_at_once_without_a_new_client(
    kube_api_server: KubeApiServer, tmp_path: Path
) -> None:
    admin = Client(kube_api_server.kubeconfig_path)
    admin.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "rotating", "namespace": "default"}},
    )

    def new_token() -> str:
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }
        return str(
            admin.create_subresource(SERVICE_ACCOUNTS, "default", "rotating", "token", request)["status"]["token"]
        )

    admin_config = yaml.safe_load(kube_api_server.kubeconfig_path.read_text())
    token_file = tmp_path / "token"
    token_file.write_text(new_token())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                **admin_config,
                "users": [{"name": admin_config["users"][0]["name"], "user": {"tokenFile": "token"}}],  # relative
            }
        )
    )
    client = Client(kubeconfig)
    try:
        assert who_am_i(client) == "system:serviceaccount:default:rotating"
        token_file.write_text("not-a-token")
        with pytest.raises(ApiException) as refused:
            who_am_i(client)
        assert refused.value.status == 401  # the file's token now, not the one read at start
        token_file.write_text(new_token())
        assert who_am_i(client) == "system:serviceaccount:default:rotating"
    finally:
        client.close()
        admin.close()
