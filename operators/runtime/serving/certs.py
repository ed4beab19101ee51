"""X.509 certificates made with `cryptography`: a CA, and leaf certificates signed by it.

The one place certificates are made: the operator's admission webhook server in local mode
(kopfwiring) and the local control plane (operators.cluster.pki) both use it. Kopf's own
self-signed path needs `kopf[dev]` (oscrypto), which fails with OpenSSL 3.0.1x.

Keys are P-256: small and fast to generate, accepted by Go's TLS, kubectl and Python's ssl. A CA
may sign leaf certificates only (path length 0); leaves never outlive their CA.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALID_DAYS: Final = 3650
LEAF_VALID_DAYS: Final = 825
"""The CA/Browser Forum's old ceiling, which macOS and some clients still enforce."""
CLOCK_SKEW: Final = datetime.timedelta(minutes=5)
"""Certificates are valid from a little before their making, for peers whose clocks lag."""

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
"""The key types a CA may sign with (leaves and CAs made here are always EC)."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded (the key as unencrypted PKCS#8)."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> PrivateKey:
        """The key, which must be EC or RSA (ValueError otherwise, or when it does not parse)."""
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, PrivateKey):
            raise ValueError(f"unsupported key type {type(key).__name__}")
        return key

    def matches(self) -> bool:
        """True when the key is the certificate's (a pair written half-way is not)."""
        try:
            return _public_der(self.private_key().public_key()) == _public_der(self.certificate.public_key())
        except (ValueError, TypeError):
            return False


def _public_der(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def private_key_pem(key: PrivateKey) -> bytes:
    """The key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_usage(*, digital_signature: bool, key_cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign, encipher_only=False, decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_ca(common_name: str, days: int = CA_VALID_DAYS) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only."""
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), private_key_pem(key))


def make_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    hosts: Iterable[str] = (),
    organizations: Iterable[str] = (),
    server: bool = True,
    client: bool = False,
    days: int = LEAF_VALID_DAYS,
) -> KeyPair:
    """A certificate signed by `ca`, for serving and/or client authentication.

    `hosts` (IP addresses and DNS names) become the subject alternative names a TLS client checks;
    a serving certificate needs at least one. Kubernetes reads a client certificate's user from
    the common name and its groups from `organizations`. The validity ends after `days`, or with
    the CA's if that comes first.
    """
    names = list(dict.fromkeys(hosts))
    if server and not names:
        raise ValueError("a serving certificate needs at least one host")
    if not (server or client):
        raise ValueError("a leaf certificate must be for serving, client authentication or both")
    ca_cert = ca.certificate
    ca_key = ca.private_key()
    key = _new_key()
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(host) for host in names]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), private_key_pem(key))
