"""The cluster's PKI: one CA, kube-apiserver's serving certificate, a client certificate per component
user, and the key pair that signs ServiceAccount tokens.  Written once per ``sim up`` under
``<workdir>/kube/pki``.

Who is who comes from the certificate, as in any kubeadm cluster: the common name is the user, the
organisations are the groups.  ``system:masters`` is the admin group; ``system:kube-controller-manager``
and ``system:kube-scheduler`` are the users the default RBAC roles (bootstrap policy) already grant what
those components need.  Why ECDSA P-256: small, fast to generate on a busy machine, and accepted by
kube-apiserver for serving, client and ServiceAccount-signing keys (ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migdra_devcluster.kubeconfig import ClientCertificate

VALIDITY = datetime.timedelta(days=365)
SERVICE_CLUSTER_IP = "10.96.0.1"
"""The first address of the service range: the ``kubernetes`` Service, which must be in the serving SANs."""


@dataclass(frozen=True)
class ClusterPki:
    """The files of one cluster's PKI (every key 0600)."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def service_account_key(self) -> Path:
        """Signs ServiceAccount tokens (kube-apiserver) and the token controller's tokens."""
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.directory / "sa.pub"

    @property
    def kubelet_client_cert(self) -> Path:
        """kube-apiserver's client certificate towards kubelets (``kubectl logs``/``exec`` on a real node)."""
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.directory / "apiserver-kubelet-client.key"

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> ClientCertificate:
        """A new client certificate for ``user`` in ``groups``, signed by the cluster CA."""
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{self.ca_key}: not the ECDSA key this PKI writes")
        ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        cert = (
            _builder(x509.Name(subject), ca_cert.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return ClientCertificate(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
"""Who kube-apiserver is to a kubelet: a real node's kubelet accepts any certificate of the cluster CA."""


def write_cluster_pki(directory: Path) -> ClusterPki:
    """Create the CA, the serving certificate (loopback, ``localhost`` and the in-cluster names) and the
    ServiceAccount signing key pair in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = ClusterPki(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "migdra-sim-kubernetes-ca")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    serving_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName(name) for name in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    ]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_CLUSTER_IP)]
    serving_cert = (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]), ca_name, serving_key)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write(pki.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.ca_key, _private_pem(ca_key), private=True)
    _write(pki.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
    _write(pki.serving_key, _private_pem(serving_key), private=True)
    _write(pki.service_account_key, _private_pem(sa_key), private=True)
    kubelet_client = pki.client_certificate(KUBELET_CLIENT_USER)
    _write(pki.kubelet_client_cert, kubelet_client.cert_pem)
    _write(pki.kubelet_client_key, kubelet_client.key_pem, private=True)
    _write(
        pki.service_account_public_key,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return pki


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.unlink(missing_ok=True)
    path.touch(mode=0o600 if private else 0o644)
    path.write_bytes(data)
