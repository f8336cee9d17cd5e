"""Serving certificates for the local API server: a throw-away CA and a loopback server certificate.

TLS is needed for one reason: client-go (so kubectl) never sends a bearer token over plain HTTP, so a
server that authenticates tokens must speak HTTPS.  Each start makes a fresh CA (kept only in memory
and in the server's temporary directory) and a certificate for ``127.0.0.1``/``localhost`` signed by
it; the kubeconfig carries the CA so clients verify the server normally.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import ConfigurationError


@dataclass(frozen=True)
class ServingCertificate:
    """PEM files of one server start: the CA (for clients) and the server's certificate and key."""

    ca_path: Path
    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        """A server-side TLS context (TLS 1.2+) with the serving certificate loaded."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_path, self.key_path)
        return context


def write_serving_certificate(directory: Path, host: str) -> ServingCertificate:
    """Create a CA and a server certificate for ``host`` (plus 127.0.0.1 and localhost) in ``directory``."""
    try:
        from cryptography import x509  # noqa: PLC0415 -- only servers with TLS need it
        from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
        from cryptography.x509.oid import NameOID  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigurationError("TLS for the local API server needs the 'cryptography' package") from exc

    now = datetime.datetime.now(datetime.UTC)
    valid_from, valid_to = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=365)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "migdra-local-apiserver-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "migdra-local-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.SubjectAlternativeName(list(dict.fromkeys(names))), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    certificate = ServingCertificate(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    certificate.ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certificate.cert_path.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    certificate.key_path.touch(mode=0o600)
    certificate.key_path.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return certificate
