"""The client CA: which client certificates the API accepts, and who each one says is there.

Why a module of its own: deciding about a certificate is independent of relaying bytes (the relay,
`operators.runtime.serving.relay`, asks this module once per handshake), and the API and the CLI
use the CA without the relay. The standard library's `ssl` has no verification callback, so a
certificate that OpenSSL refuses ends the handshake (a TLS alert: "unknown ca"): that is the fate
of a certificate from another CA, and it never reaches granian. Time is left out of OpenSSL's
check (`X509_V_FLAG_NO_CHECK_TIME`) and checked here instead, together with the path from the
certificate up to the CA bundle (`ClientCa.check`): an expired certificate of the right CA is
recorded as refused, with the reason, so that the API answers 401 saying why. A certificate's
identity is Kubernetes' x509 rule (`subject_identity`: user = Subject CN, groups = Subject O).
"""

from __future__ import annotations

import datetime
import hashlib
import ssl
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

X509_V_FLAG_NO_CHECK_TIME = 0x200000
"""OpenSSL's flag to leave validity periods out of chain verification (`ClientCa.check` does it)."""

AUTHENTICATED_GROUP = "system:authenticated"
"""The group Kubernetes adds to every authenticated user; RBAC bindings to it must hold here too."""


class PeerCertificate(NamedTuple):
    """What a verified client certificate says: the user and groups (Kubernetes' x509 rule), or,
    in `problem`, why it is refused although its CA is the right one (expired, not valid yet)."""

    user: str
    groups: tuple[str, ...] = ()
    problem: str = ""


class ClientCa:
    """The CA bundle client certificates are verified against, and the checks OpenSSL leaves to it.

    OpenSSL verifies the signatures and the CA constraints; `check` verifies the validity periods
    of the certificate and of the bundle's certificates above it, and that the certificate is
    issued by a certificate of the bundle (an intermediate CA sent by the client, whose validity
    cannot be read here, is refused). The results are cached by certificate, with the period
    they hold for.
    """

    def __init__(self, pem: bytes, clock: Callable[[], datetime.datetime] | None = None,
                 cache_size: int = 4096) -> None:
        self.pem = pem
        self.certificates = x509.load_pem_x509_certificates(pem)  # ValueError when there is none
        self._clock = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._cache: OrderedDict[bytes, tuple[PeerCertificate, datetime.datetime, datetime.datetime]] = OrderedDict()
        self._cache_size = cache_size

    def context(self, certfile: Path, keyfile: Path) -> ssl.SSLContext:
        """A server context that asks for a client certificate (optional) and verifies it against
        this bundle, time aside."""
        # this bundle only: never the system's CAs (given `cadata`, the default context loads none)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=self.pem.decode("ascii", errors="replace"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile, keyfile)
        context.verify_mode = ssl.CERT_OPTIONAL
        context.options |= ssl.OP_NO_RENEGOTIATION
        context.verify_flags |= X509_V_FLAG_NO_CHECK_TIME  # an OpenSSL flag the ssl module does not name
        return context

    def check(self, der: bytes) -> PeerCertificate:
        """The identity of a certificate OpenSSL verified (time aside), or the reason it is refused."""
        digest = hashlib.sha256(der).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] <= now <= cached[2]:
            self._cache.move_to_end(digest)
            return cached[0]
        leaf = x509.load_der_x509_certificate(der)
        path = self._path(leaf)
        if path is None:
            return PeerCertificate("", (), "the client certificate is not issued by a CA of the client CA bundle "
                                   "(intermediate CAs sent by the client are not accepted)")
        for certificate in path:
            what = "the client certificate" if certificate is leaf else f'its CA "{_common_name(certificate)}"'
            if now > certificate.not_valid_after_utc:
                return PeerCertificate("", (), f"{what} expired on "
                                               f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC")
            if now < certificate.not_valid_before_utc:
                return PeerCertificate("", (), f"{what} is not valid before "
                                               f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC")
        identity = subject_identity(leaf.subject)
        if not identity.problem:
            start = max(c.not_valid_before_utc for c in path)
            end = min(c.not_valid_after_utc for c in path)
            self._cache[digest] = (identity, start, end)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return identity

    def _path(self, leaf: x509.Certificate) -> list[x509.Certificate] | None:
        """The leaf and the bundle's certificates above it up to a self-signed one (or as far as
        the bundle goes); None when no certificate of the bundle issued the leaf."""
        path = [leaf]
        current = leaf
        while True:
            issuer = next((ca for ca in self.certificates if ca is not current and _issued_by(current, ca)), None)
            if issuer is None or issuer in path:
                break
            path.append(issuer)
            if issuer.issuer == issuer.subject:
                break
            current = issuer
        return path if len(path) > 1 else None


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A server context that asks for no client certificate (the relay without a client CA)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    context.verify_mode = ssl.CERT_NONE
    context.options |= ssl.OP_NO_RENEGOTIATION
    return context


def _issued_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    if certificate.issuer != issuer.subject:
        return False
    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else certificate.subject.rfc4514_string()


def subject_identity(subject: x509.Name) -> PeerCertificate:
    """Kubernetes' x509 rule: the user is the Subject's common name, the groups its organizations
    (in order), plus `system:authenticated`, which Kubernetes adds to every authenticated user."""
    names = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if not names or not names[0]:
        return PeerCertificate("", (), "the client certificate has no common name (CN), the user's name")
    groups = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return PeerCertificate(names[0], (*dict.fromkeys(groups), AUTHENTICATED_GROUP))
