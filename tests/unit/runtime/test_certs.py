"""The operator's certificate helpers: CAs, leaves signed by them, names and usages."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from operators.runtime.serving import certs


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(names.get_values_for_type(x509.DNSName)), {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _public_der(key: object) -> bytes:
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def ca() -> certs.KeyPair:
    return certs.make_ca("test-ca")


def test_a_ca_is_self_signed_and_may_sign_leaves_only(ca: certs.KeyPair) -> None:
    cert = ca.certificate

    cert.verify_directly_issued_by(cert)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert constraints.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "test-ca"
    assert ca.matches()


def test_a_leaf_verifies_against_its_ca_and_carries_its_own_key(ca: certs.KeyPair) -> None:
    leaf = certs.make_leaf(ca, "server", hosts=["127.0.0.1"])
    cert = leaf.certificate

    cert.verify_directly_issued_by(ca.certificate)
    assert cert.issuer == ca.certificate.subject
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = serialization.load_pem_private_key(leaf.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert _public_der(key.public_key()) == _public_der(cert.public_key())
    assert leaf.matches()


def test_a_leaf_of_another_ca_does_not_verify(ca: certs.KeyPair) -> None:
    other = certs.make_ca("test-ca")  # even under the same name
    leaf = certs.make_leaf(other, "server", hosts=["localhost"])

    with pytest.raises(InvalidSignature):
        leaf.certificate.verify_directly_issued_by(ca.certificate)


def test_hosts_become_ip_and_dns_subject_alternative_names(ca: certs.KeyPair) -> None:
    hosts = ["127.0.0.1", "::1", "localhost", "kubernetes.default.svc", "localhost"]
    cert = certs.make_leaf(ca, "server", hosts=hosts).certificate

    assert _sans(cert) == ({"localhost", "kubernetes.default.svc"}, {"127.0.0.1", "::1"})
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert len(list(names)) == 4, "duplicate hosts appear once"


def test_a_leaf_is_for_serving_by_default(ca: certs.KeyPair) -> None:
    cert = certs.make_leaf(ca, "server", hosts=["localhost"]).certificate

    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature
    assert not usage.key_cert_sign


def test_a_client_leaf_names_the_user_and_groups(ca: certs.KeyPair) -> None:
    cert = certs.make_leaf(
        ca, "stead-admin", organizations=["system:masters"], server=False, client=True
    ).certificate

    assert _usages(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "stead-admin"
    groups = [attribute.value for attribute in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == ["system:masters"]
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_a_leaf_may_serve_and_authenticate_as_a_client(ca: certs.KeyPair) -> None:
    cert = certs.make_leaf(ca, "both", hosts=["localhost"], client=True).certificate

    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_a_leaf_needs_a_usage_and_a_serving_one_a_host(ca: certs.KeyPair) -> None:
    with pytest.raises(ValueError, match="at least one host"):
        certs.make_leaf(ca, "server")
    with pytest.raises(ValueError, match="serving, client authentication or both"):
        certs.make_leaf(ca, "nothing", server=False, client=False)


def test_validity_allows_for_clock_skew_and_never_outlasts_the_ca() -> None:
    short_ca = certs.make_ca("short", days=10)
    leaf = certs.make_leaf(short_ca, "server", hosts=["localhost"], days=365).certificate
    now = datetime.datetime.now(datetime.UTC)

    assert leaf.not_valid_before_utc <= now - certs.CLOCK_SKEW + datetime.timedelta(seconds=5)
    assert leaf.not_valid_after_utc == short_ca.certificate.not_valid_after_utc
    default = certs.make_leaf(certs.make_ca("long"), "server", hosts=["localhost"]).certificate
    assert default.not_valid_after_utc - now > datetime.timedelta(days=certs.LEAF_VALID_DAYS - 1)


def test_a_pair_whose_key_is_not_the_certificates_does_not_match(ca: certs.KeyPair) -> None:
    leaf = certs.make_leaf(ca, "server", hosts=["localhost"])

    assert not certs.KeyPair(leaf.cert_pem, ca.key_pem).matches()
    assert not certs.KeyPair(b"not a certificate", leaf.key_pem).matches()
