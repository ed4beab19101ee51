"""Client certificates through the TLS relay in front of granian (`operators.runtime.serving.relay`).

In-process scenarios check what a handler learns (the Subject mapped to user and groups, nothing
for a connection the relay did not make, the record gone with the connection) and what is refused
(another CA's certificate at the handshake, an expired one with its reason). The attacks run the
server in a process of its own, so that its memory can be read while raw sockets misbehave, each
in a bounded loop; after each one a well-behaved client must still be answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf, private_key_pem
from operators.runtime.serving.clientca import AUTHENTICATED_GROUP, ClientCa, PeerCertificate, subject_identity
from operators.runtime.serving.eventloop import event_loop_factory
from operators.runtime.serving.http import HttpServer, Request, Response
from operators.runtime.serving.relay import TlsRelay
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[3]
MiB = 1 << 20
NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


def issue(ca: KeyPair, subject: list[tuple[x509.ObjectIdentifier, str]], *, start: datetime.datetime = NOW - DAY,
          end: datetime.datetime = NOW + DAY, is_ca: bool = False) -> KeyPair:
    """A certificate signed by `ca` with any Subject and validity (an expired one too)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
               .issuer_name(ca.certificate.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
    if is_ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    certificate = builder.sign(ca.private_key(), hashes.SHA256())
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), private_key_pem(key))


@dataclass
class Pki:
    """The server's certificate, the clients' CA, and another CA nobody trusts."""

    directory: Path
    server_ca: KeyPair
    client_ca: KeyPair
    stranger_ca: KeyPair

    @classmethod
    def make(cls, directory: Path) -> Pki:
        server_ca = make_ca("server-ca")
        leaf = make_leaf(server_ca, "server", hosts=["127.0.0.1"])
        (directory / "tls.crt").write_bytes(leaf.cert_pem)
        (directory / "tls.key").write_bytes(leaf.key_pem)
        return cls(directory, server_ca, make_ca("client-ca"), make_ca("stranger-ca"))

    @property
    def tls(self) -> tuple[Path, Path]:
        return self.directory / "tls.crt", self.directory / "tls.key"

    def client(self, pair: KeyPair | None = None, name: str = "client") -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.server_ca.cert_pem.decode())
        if pair is not None:
            cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
            cert.write_bytes(pair.cert_pem)
            key.write_bytes(pair.key_pem)
            context.load_cert_chain(cert, key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki.make(tmp_path)


Seen = dict[str, object]


async def echo(request: Request) -> Response:
    """Says what the handler learnt about the client."""
    certificate = request.certificate
    seen = {"peer": request.peer, "certificate": None if certificate is None else list(certificate)}
    return Response(200, json.dumps(seen).encode())


async def get(port: int, context: ssl.SSLContext | None, path: str = "/") -> tuple[int, Seen]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    if not answer:
        return 0, {}  # closed without an answer
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def serve(pki: Pki, scenario: Callable[[HttpServer], Awaitable[None]], uvloop: bool = True) -> None:
    """Run `scenario` against the server, on the operator's event loop (uvloop), or asyncio's own."""

    async def main() -> None:
        server = HttpServer(echo)
        await server.start("127.0.0.1", 0, pki.tls, client_ca=ClientCa(pki.client_ca.cert_pem))
        try:
            await scenario(server)
        finally:
            await server.stop(grace=1)

    with asyncio.Runner(loop_factory=event_loop_factory() if uvloop else None) as runner:
        runner.run(main())


@pytest.mark.parametrize("uvloop", [True, False], ids=["uvloop", "asyncio"])
def test_a_certificate_maps_to_the_subjects_cn_and_o_and_a_plain_tls_client_has_none(pki: Pki, uvloop: bool
                                                                                     ) -> None:
    alice = make_leaf(pki.client_ca, "alice", organizations=["dev", "ops"], server=False, client=True)

    async def scenario(server: HttpServer) -> None:
        status, seen = await get(server.port, pki.client(alice))
        assert status == 200 and seen == {"peer": "127.0.0.1",
                                          "certificate": ["alice", ["dev", "ops", AUTHENTICATED_GROUP], ""]}
        status, seen = await get(server.port, pki.client())  # TLS without a certificate: tokens still work
        assert status == 200 and seen["certificate"] is None and seen["peer"] == "127.0.0.1"

    serve(pki, scenario, uvloop)


def test_a_certificate_of_another_ca_is_refused_at_the_handshake_and_reaches_no_handler(pki: Pki) -> None:
    mallory = make_leaf(pki.stranger_ca, "alice", organizations=["system:masters"], server=False, client=True)
    handled: list[Request] = []

    async def scenario(server: HttpServer) -> None:
        original = server.handler

        async def counting(request: Request) -> Response:
            handled.append(request)
            return await original(request)

        server.handler = counting
        try:  # TLS 1.3: the server's alert comes after the client's side of the handshake, with the first read
            refused = (await get(server.port, pki.client(mallory, "mallory")))[0] == 0
        except (ssl.SSLError, ConnectionError):
            refused = True
        assert refused and handled == []
        assert (await get(server.port, pki.client()))[0] == 200  # and the server still serves

    serve(pki, scenario)


def test_an_expired_certificate_of_the_right_ca_is_recorded_as_refused_with_the_reason(pki: Pki) -> None:
    expired = issue(pki.client_ca, [(NameOID.COMMON_NAME, "old")], start=NOW - 10 * DAY, end=NOW - DAY)
    early = issue(pki.client_ca, [(NameOID.COMMON_NAME, "early")], start=NOW + DAY, end=NOW + 10 * DAY)

    async def scenario(server: HttpServer) -> None:
        _, seen = await get(server.port, pki.client(expired, "expired"))
        user, groups, problem = seen["certificate"]  # type: ignore[misc]
        assert (user, groups) == ("", []) and problem.startswith("the client certificate expired on ")
        _, seen = await get(server.port, pki.client(early, "early"))
        assert "is not valid before" in seen["certificate"][2]  # type: ignore[index]

    serve(pki, scenario)


def test_a_connection_the_relay_did_not_make_has_no_identity_and_records_go_with_their_connection(pki: Pki) -> None:
    alice = make_leaf(pki.client_ca, "alice", server=False, client=True)

    async def scenario(server: HttpServer) -> None:
        relay = server.relay
        assert relay is not None
        granian = relay.upstream
        # a relayed connection with a certificate, kept open ...
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=pki.client(alice))
        writer.write(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        assert len(relay._peers) == 1
        # ... while a local process talks to granian's loopback port directly: no certificate
        direct_reader, direct_writer = await asyncio.open_connection(*granian)
        direct_writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        body = (await direct_reader.read()).partition(b"\r\n\r\n")[2]
        assert json.loads(body)["certificate"] is None
        direct_writer.close()
        # the relayed connection's record goes when it closes
        writer.close()
        for _ in range(500):
            if not relay._peers and relay.connections == 0:
                break
            await asyncio.sleep(0.01)  # polled, with a bound
        assert relay._peers == {} and relay.connections == 0

    serve(pki, scenario)


class PortThief:
    """A local user who binds a loopback port the moment this process releases it (a tight loop over the
    ports does the same, given time), listens there, and keeps what it receives."""

    def __init__(self) -> None:
        self.listeners: list[socket.socket] = []

    def take(self, address: tuple[str, int]) -> None:
        stolen = socket.socket()
        try:
            stolen.bind(address)
            stolen.listen(16)
            stolen.setblocking(False)
        except OSError:
            stolen.detach()  # nothing to take: closed without the hook below (its fd goes with the object)
            return
        self.listeners.append(stolen)

    def received(self) -> bytes:
        """What was sent to the stolen ports so far."""
        got = b""
        for stolen in self.listeners:
            while True:
                try:
                    connection, _ = stolen.accept()
                except BlockingIOError:
                    break
                connection.settimeout(2)
                with contextlib.suppress(OSError):
                    got += connection.recv(65536)
                connection.detach()
        return got


def test_a_local_user_who_takes_a_released_loopback_port_receives_no_decrypted_request(
        pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25, finding 9: granian's plaintext port behind the relay was probed, released, then bound; a
    thief that took it in between got the requests the relay decrypted, bearer tokens included. Every
    loopback TCP socket this process closes unconnected (a listener, a probe) is taken by the thief at once;
    ten starts in a row must each answer through the handler, and the thief must get nothing."""
    thief = PortThief()
    close = socket.socket.close

    def closing(sock: socket.socket) -> None:
        address = None
        if sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM and sock.fileno() >= 0:
            with contextlib.suppress(OSError):
                name = sock.getsockname()
                try:
                    sock.getpeername()
                except OSError:  # not connected: a listener or a probe
                    address = name if name[1] and name[0].startswith("127.") else None
        close(sock)
        if address is not None:
            thief.take(address)

    secret = "Bearer s3cret-token-of-a-user"

    async def main() -> int:
        server = HttpServer(echo)
        await server.start("127.0.0.1", 0, pki.tls, client_ca=ClientCa(pki.client_ca.cert_pem))
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=pki.client())
            writer.write(f"GET / HTTP/1.1\r\nHost: t\r\nAuthorization: {secret}\r\n"
                         "Connection: close\r\n\r\n".encode())
            try:
                answer = await asyncio.wait_for(reader.read(), 5)
            except TimeoutError:
                answer = b""
            writer.close()
            assert secret.encode() not in thief.received(), "the relay forwarded a decrypted request to the thief"
            return int(answer.split()[1]) if answer else 0
        finally:
            await server.stop(grace=1)

    monkeypatch.setattr(socket.socket, "close", closing)
    try:
        statuses = []
        for _ in range(10):
            statuses.append(asyncio.run(main()))
    finally:
        monkeypatch.undo()
        for stolen in thief.listeners:
            stolen.close()
    assert statuses == [200] * 10


def test_the_check_refuses_paths_outside_the_bundle_and_expired_cas_and_maps_subjects() -> None:
    root = make_ca("root")
    intermediate = issue(root, [(NameOID.COMMON_NAME, "intermediate")], is_ca=True, end=NOW + 30 * DAY)
    leaf = issue(intermediate, [(NameOID.COMMON_NAME, "bob"), (NameOID.ORGANIZATION_NAME, "team")],
                 end=NOW + 365 * DAY)  # outlives its CA
    der = leaf.certificate.public_bytes(serialization.Encoding.DER)
    # the bundle holds only the root: the intermediate came from the client, whose validity is not seen here
    assert "not issued by a CA of the client CA bundle" in ClientCa(root.cert_pem).check(der).problem
    # the bundle holds both: accepted, with the Subject mapped
    both = ClientCa(root.cert_pem + intermediate.cert_pem)
    assert both.check(der) == PeerCertificate("bob", ("team", AUTHENTICATED_GROUP))
    # ... until the intermediate CA expires
    later = ClientCa(root.cert_pem + intermediate.cert_pem, clock=lambda: NOW + 60 * DAY)
    assert later.check(der).problem.startswith('its CA "intermediate" expired on ')
    # the server trusts the bundle and nothing else (not the system's CAs), from TLS 1.2 on
    with_two = both.context(*Pki.make(Path(tempfile.mkdtemp())).tls)
    assert sorted(c["subject"][0][0][1] for c in with_two.get_ca_certs()) == ["intermediate", "root"]
    assert with_two.minimum_version == ssl.TLSVersion.TLSv1_2 and with_two.verify_mode == ssl.CERT_OPTIONAL
    # Kubernetes' x509 rule: no CN is no user
    assert subject_identity(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "g")])).problem
    with pytest.raises(ValueError):
        ClientCa(b"not a certificate")


def test_the_relay_closes_connections_idle_past_its_bound(pki: Pki) -> None:
    """Its own bound, with an upstream that never closes anything (granian would close first)."""

    async def scenario() -> None:
        upstream = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        relay = TlsRelay(upstream.sockets[0].getsockname()[:2],
                         ClientCa(pki.client_ca.cert_pem).context(*pki.tls), idle_timeout=0.3)
        port = await relay.start("127.0.0.1", 0)
        try:
            reader, _ = await asyncio.open_connection("127.0.0.1", port, ssl=pki.client())
            started = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the relay
            assert 0.25 < time.monotonic() - started < 5 and relay.connections == 0
        finally:
            await relay.stop()
            upstream.close()

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(scenario())


# --- attacks, against a server in a process of its own ---------------------------------------

SERVER = """
import asyncio, json, sys
from pathlib import Path
from operators.runtime.serving.http import HttpServer, Response
from operators.runtime.serving.clientca import ClientCa

async def handler(request):
    user = request.certificate and request.certificate.user
    return Response(200, json.dumps({"path": request.path, "user": user}).encode())

async def main():
    work = Path(sys.argv[1])
    server = HttpServer(handler, max_body=64 << 10, header_timeout=1.0, concurrency=64, max_connections=300,
                        handshake_timeout=1.0, idle_timeout=30)
    await server.start("127.0.0.1", 0, (work / "tls.crt", work / "tls.key"),
                       client_ca=ClientCa((work / "client-ca.crt").read_bytes()))
    print(server.port, flush=True)
    await asyncio.Event().wait()

import uvloop
uvloop.run(main())
"""


class Relayed:
    def __init__(self, process: subprocess.Popen[str], port: int, pki: Pki) -> None:
        self.process, self.port, self.pki = process, port, pki

    def rss(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def raw(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def tls(self, pair: KeyPair | None = None) -> ssl.SSLSocket:
        return self.pki.client(pair).wrap_socket(self.raw(), server_hostname="127.0.0.1")

    def get(self, pair: KeyPair | None = None) -> dict[str, object]:
        with self.tls(pair) as sock:
            sock.sendall(b"GET /ok HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answer = read_all(sock)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return dict(json.loads(body))


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (ssl.SSLError, ConnectionError):
        pass
    return b"".join(chunks)


def closed(sock: socket.socket) -> bool:
    try:
        sock.settimeout(0.05)
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.fixture
def relayed(pki: Pki) -> Iterator[Relayed]:
    (pki.directory / "client-ca.crt").write_bytes(pki.client_ca.cert_pem)
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(pki.directory)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert process.stdout is not None
    port = int(process.stdout.readline())
    try:
        yield Relayed(process, port, pki)
    finally:
        process.kill()
        process.wait(10)


def test_many_half_open_handshakes_are_cut_after_the_handshake_timeout_and_others_still_served(
        relayed: Relayed) -> None:
    alice = make_leaf(relayed.pki.client_ca, "alice", server=False, client=True)
    before = relayed.rss()
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # the start of a ClientHello, never finished
    half_open = []
    for _ in range(200):
        sock = relayed.raw()
        sock.sendall(hello)
        half_open.append(sock)
    silent = [relayed.raw() for _ in range(50)]  # connect, and never send a byte
    try:
        assert relayed.get(alice)["user"] == "alice"  # served meanwhile
        started = time.monotonic()
        wait_until(lambda: all(closed(s) for s in (*half_open, *silent)), 15, "half-open connections cut")
        assert time.monotonic() - started < 10
        assert relayed.rss() - before < 32 * MiB
    finally:
        for sock in (*half_open, *silent):
            sock.close()
    assert relayed.get()["path"] == "/ok"


def test_connections_over_the_relays_bound_are_closed_at_once_and_room_comes_back(relayed: Relayed) -> None:
    held = [relayed.tls() for _ in range(300)]  # the bound (max_connections=300), TLS done, no request yet
    try:
        extra = relayed.raw()
        extra.settimeout(10)
        assert read_all(extra) == b""  # closed at once: no handshake for it
        extra.close()
    finally:
        for sock in held:
            sock.close()
    assert wait_until(lambda: _served(relayed), 15, "room for new connections")


def _served(relayed: Relayed) -> bool:
    try:
        return relayed.get()["path"] == "/ok"
    except (OSError, AssertionError):
        return False


def test_a_client_that_completes_tls_and_never_sends_is_cut_by_granians_header_timeout(relayed: Relayed) -> None:
    with relayed.tls() as sock:
        sock.settimeout(10)
        started = time.monotonic()
        read_all(sock)  # returns when the connection is closed
        assert time.monotonic() - started < 8  # header_timeout 1 s, behind the relay


def test_a_64_mib_header_through_the_relay_gets_granians_431_early_and_costs_no_memory(relayed: Relayed) -> None:
    before = relayed.rss()
    sent, answer = 0, b""
    with relayed.tls() as sock:
        sock.settimeout(2)  # a client that gives up sending when nothing is read for 2 s, then reads
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: ")
        try:
            for _ in range(1024):  # 64 MiB in 64 KiB writes, unless the server stops reading
                sock.sendall(b"a" * 65536)
                sent += 65536
        except TimeoutError:
            pass
        sock.settimeout(10)
        answer = read_all(sock)
    assert sent < 16 * MiB, "the relay kept reading a header of many megabytes"
    assert answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert relayed.rss() - before < 16 * MiB
    assert relayed.get()["path"] == "/ok"


def test_pipelined_requests_from_a_client_that_never_reads_hold_no_memory_in_the_relay(relayed: Relayed) -> None:
    before = relayed.rss()
    with relayed.tls() as sock:
        sock.setblocking(False)
        request = b"GET /pipelined HTTP/1.1\r\nHost: t\r\n\r\n" * 100
        sent, deadline = 0, time.monotonic() + 5
        while sent < 100_000 and time.monotonic() < deadline:  # until nobody reads any more
            try:
                sock.send(request)
                sent += 100
            except (BlockingIOError, ssl.SSLWantWriteError):
                time.sleep(0.01)
            except (ssl.SSLEOFError, ConnectionError):
                break  # or the server ends the connection (granian's header timeout on a head cut by backpressure)
        assert relayed.get()["path"] == "/ok"
        assert relayed.rss() - before < 32 * MiB
    assert relayed.get()["path"] == "/ok"
