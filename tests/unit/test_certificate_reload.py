"""A renewed webhook certificate is served without a restart."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

from cryptography import x509

from operators.runtime.certs import make_ca, make_leaf
from operators.runtime.tls import reload_certificate


async def _served_serial(port: int, ca_pem: bytes) -> int:
    client = ssl.create_default_context(cadata=ca_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


def test_renewed_certificate_is_loaded_into_the_live_context(tmp_path: Path) -> None:
    ca = make_ca("test-ca")
    first, second = (make_leaf(ca, "webhook", hosts=["127.0.0.1"]) for _ in range(2))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)

    async def scenario() -> tuple[int, int]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        reloader = asyncio.create_task(reload_certificate(context, cert, key, every=0.02))
        before = await _served_serial(port, ca.cert_pem)
        cert.write_bytes(second.cert_pem)
        key.write_bytes(second.key_pem)
        later = os.stat(cert).st_mtime + 1  # a renewal is a newer file, even within one clock tick
        os.utime(cert, (later, later))
        os.utime(key, (later, later))
        after = before
        for _ in range(250):
            after = await _served_serial(port, ca.cert_pem)
            if after != before:
                break
            await asyncio.sleep(0.02)
        reloader.cancel()
        server.close()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == first.certificate.serial_number
    assert after == second.certificate.serial_number
