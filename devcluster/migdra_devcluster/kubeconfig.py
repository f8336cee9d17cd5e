"""The kubeconfigs of the development cluster: how kubectl, the client and each component reach kube-apiserver."""

from __future__ import annotations

import base64
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTEXT_NAME = "migdra-local"


@dataclass(frozen=True)
class ClientCertificate:
    """A user's X.509 client certificate and key (PEM): how kube-apiserver's components and admins log in."""

    cert_pem: bytes
    key_pem: bytes


def build_kubeconfig(
    url: str,
    token: str | None,
    ca_pem: bytes | None,
    namespace: str = "default",
    certificate: ClientCertificate | None = None,
    token_file: str | None = None,
) -> dict[str, Any]:
    """A one-cluster, one-user, one-context kubeconfig for ``url``; ``ca_pem`` is the CA for HTTPS.  The
    user logs in with ``token``, else the token in ``token_file`` (relative to the kubeconfig's
    directory, read again whenever it changes: a rotating token), else with ``certificate``, else
    anonymously."""
    user: dict[str, Any] = {"username": "anonymous"}
    if token:
        user = {"token": token}
    elif token_file:
        user = {"tokenFile": token_file}
    elif certificate is not None:
        user = {
            "client-certificate-data": base64.b64encode(certificate.cert_pem).decode(),
            "client-key-data": base64.b64encode(certificate.key_pem).decode(),
        }
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": cluster}],
        "users": [{"name": CONTEXT_NAME, "user": user}],
        "contexts": [
            {"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace}}
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    url: str,
    token: str | None,
    ca_pem: bytes | None = None,
    certificate: ClientCertificate | None = None,
    token_file: str | None = None,
) -> Path:
    """Write the kubeconfig atomically with mode 0600 (it may hold a token or a client key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".kubeconfig-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            kubeconfig = build_kubeconfig(url, token, ca_pem, certificate=certificate, token_file=token_file)
            yaml.safe_dump(kubeconfig, handle, sort_keys=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
