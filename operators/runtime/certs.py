"""X.509 certificates made with `cryptography`: a CA and serving certificates signed by it.

Used for the admission webhook server in local mode and by the local control plane. Kopf's
own self-signed path needs `kopf[dev]` (oscrypto), which fails with OpenSSL 3.0.1x.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str, days: int = 3650) -> KeyPair:
    """A self-signed CA certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    hosts: Iterable[str] = (),
    organizations: Iterable[str] = (),
    server: bool = True,
    client: bool = False,
    days: int = 825,
) -> KeyPair:
    """A certificate signed by `ca`, for serving (SANs from `hosts`) and/or client authentication."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
