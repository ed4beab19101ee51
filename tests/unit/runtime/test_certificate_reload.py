"""A renewed webhook certificate is served without a restart."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.tls import reload_certificate


class Renewal:
    """Certificate files as cert-manager keeps them: a first leaf, renewed in place by a second."""

    def __init__(self, directory: Path, name: str) -> None:
        self.ca = make_ca("test-ca")
        self.first, self.second = (make_leaf(self.ca, name, hosts=["127.0.0.1"]) for _ in range(2))
        self.cert, self.key = directory / "tls.crt", directory / "tls.key"
        self.cert.write_bytes(self.first.cert_pem)
        self.key.write_bytes(self.first.key_pem)

    async def served_serial(self, port: int) -> int:
        client = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number

    async def serials_around_renewal(self, port: int) -> tuple[int, int]:
        """The serial served before the renewal, and the first different one after (polled, 5 s at most)."""
        before = await self.served_serial(port)
        self.cert.write_bytes(self.second.cert_pem)
        self.key.write_bytes(self.second.key_pem)
        later = os.stat(self.cert).st_mtime + 1  # a renewal is a newer file, even within one clock tick
        os.utime(self.cert, (later, later))
        os.utime(self.key, (later, later))
        after = before
        for _ in range(250):
            after = await self.served_serial(port)
            if after != before:
                break
            await asyncio.sleep(0.02)
        return before, after

    def expected(self) -> tuple[int, int]:
        return self.first.certificate.serial_number, self.second.certificate.serial_number


def test_renewed_certificate_is_loaded_into_the_live_context(tmp_path: Path) -> None:
    files = Renewal(tmp_path, "webhook")

    async def scenario() -> tuple[int, int]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(files.cert, files.key)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        reloader = asyncio.create_task(reload_certificate(context, files.cert, files.key, every=0.02))
        serials = await files.serials_around_renewal(port)
        reloader.cancel()
        server.close()
        return serials

    assert asyncio.run(scenario()) == files.expected()


def test_a_private_key_is_written_0600_from_its_first_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No window where the key is readable by others: the mode is given when the file is created."""
    from operators.runtime.serving import tls

    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def spying_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        opened.append((str(path), flags, mode))
        return real_open(path, flags, mode)

    chmods: list[object] = []
    monkeypatch.setattr(tls.os, "open", spying_open)
    monkeypatch.setattr(os, "chmod", lambda *a, **k: chmods.append(a))
    monkeypatch.setattr(Path, "chmod", lambda *a, **k: chmods.append(a))
    key = tmp_path / "tls.key"
    key.write_bytes(b"old")
    tls.write_private(key, b"-----BEGIN PRIVATE KEY-----")
    assert key.read_bytes() == b"-----BEGIN PRIVATE KEY-----"
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert [mode for _, flags, mode in opened if flags & os.O_CREAT] == [0o600]
    assert chmods == []


def test_the_config_api_serves_a_renewed_mounted_certificate(tmp_path: Path) -> None:
    from operators.runtime.api.server import ApiServer as ConfigApiServer

    files = Renewal(tmp_path, "config-api")

    async def scenario() -> tuple[int, int]:
        import contextlib
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = ConfigApiServer(listen="127.0.0.1", port=port, tls_dir=tmp_path, mounted=True, cache=False,
                                 cert_reload_seconds=0.02)
        async with contextlib.AsyncExitStack() as stack:
            await server.serve(object(), stack)  # type: ignore[arg-type]  # no request reaches the API here
            return await files.serials_around_renewal(port)

    assert asyncio.run(scenario()) == files.expected()


def test_the_tls_relay_serves_a_renewed_certificate_and_trusts_a_renewed_client_ca(tmp_path: Path) -> None:
    """With client certificates on, TLS is the relay's: `reload` and `trust` reach the connections to come."""
    from operators.runtime.serving.clientca import ClientCa
    from operators.runtime.serving.http import HttpServer, Request, Response

    files = Renewal(tmp_path, "config-api")
    old_ca, new_ca = make_ca("client-ca-1"), make_ca("client-ca-2")
    user = make_leaf(new_ca, "alice", server=False, client=True)
    (tmp_path / "alice.crt").write_bytes(user.cert_pem)
    (tmp_path / "alice.key").write_bytes(user.key_pem)

    async def who(request: Request) -> Response:
        return Response(200, (request.certificate.user if request.certificate else "-").encode())

    async def ask(port: int) -> bytes:
        client = ssl.create_default_context(cadata=files.ca.cert_pem.decode())
        client.load_cert_chain(tmp_path / "alice.crt", tmp_path / "alice.key")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
            writer.write(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
        except (ssl.SSLError, ConnectionError):
            return b"refused"
        return answer.partition(b"\r\n\r\n")[2] or b"refused"

    async def scenario() -> tuple[tuple[int, int], bytes, bytes]:
        server = HttpServer(who)
        await server.start("127.0.0.1", 0, (files.cert, files.key), client_ca=ClientCa(old_ca.cert_pem))
        try:
            before = await ask(server.port)  # alice's CA is not trusted yet
            server.trust(ClientCa(new_ca.cert_pem))
            after = await ask(server.port)
            reloader = asyncio.create_task(_reload_on_change(server, files))
            serials = await files.serials_around_renewal(server.port)
            reloader.cancel()
            return serials, before, after
        finally:
            await server.stop(grace=1)

    serials, before, after = asyncio.run(scenario())
    assert (before, after) == (b"refused", b"alice")
    assert serials == files.expected()


async def _reload_on_change(server: object, files: Renewal) -> None:
    from operators.runtime.serving.tls import on_renewal

    await on_renewal(files.cert, files.key, server.reload, every=0.02)  # type: ignore[attr-defined]


def test_the_config_api_follows_a_renewed_client_ca_in_the_clusters_configmap() -> None:
    from operators.runtime.api.server import ApiServer as ConfigApiServer
    from operators.runtime.kube.client import core_path
    from operators.runtime.serving.clientca import ClientCa
    from tests.unit.fakeapi import FakeApi

    first, second = make_ca("cluster-ca-1"), make_ca("cluster-ca-2")
    path = core_path("configmaps", "kube-system", "extension-apiserver-authentication")
    kube = FakeApi()
    kube.add(path, {"data": {"client-ca-file": first.cert_pem.decode()}})

    class Server:
        def __init__(self) -> None:
            self.trusted: list[bytes] = []

        def trust(self, client_ca: ClientCa) -> None:
            self.trusted.append(client_ca.pem)

    async def scenario() -> list[bytes]:
        api = ConfigApiServer(listen="127.0.0.1", port=0, tls_dir=Path("."), client_ca="auto",
                              cert_reload_seconds=0.01)
        server = Server()
        following = api._follow_client_ca(kube, server, ClientCa(first.cert_pem))  # type: ignore[arg-type]
        follower = asyncio.create_task(following)
        kube.objects[path] = {**kube.objects[path], "data": {"client-ca-file": second.cert_pem.decode()}}
        for _ in range(500):
            if server.trusted:
                break
            await asyncio.sleep(0.01)  # polled, with a bound
        follower.cancel()
        return server.trusted

    assert asyncio.run(scenario()) == [second.cert_pem]
