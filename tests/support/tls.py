"""A test certificate authority made in the test: a server certificate for 127.0.0.1 and
localhost, and a client certificate, all signed by it (PEM files in a folder)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TestPki:
    __test__ = False  # not a test class, though its name starts with "Test"
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self) -> ssl.SSLContext:
        """A client's TLS context: trusts the test CA and presents the client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def make_pki(folder: Path) -> TestPki:
    """Write a CA, a server and a client certificate with their keys into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test CA", ca_key, ca_key.public_key(), issuer=None, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = certificate(
        "127.0.0.1",
        ca_key,
        server_key.public_key(),
        issuer=ca,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = certificate(
        "test client",
        ca_key,
        client_key.public_key(),
        issuer=ca,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    pki = TestPki(
        *(
            folder / name
            for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")
        )
    )
    for path, cert in ((pki.ca_cert, ca), (pki.server_cert, server), (pki.client_cert, client)):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for path, key in ((pki.server_key, server_key), (pki.client_key, client_key)):
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return pki


def certificate(
    name: str,
    signing_key: ec.EllipticCurvePrivateKey,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Certificate | None,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer is not None else subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signing_key, hashes.SHA256())
