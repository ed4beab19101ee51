"""Serving TLS for the operator's HTTPS endpoints (admission webhooks, domain APIs)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A server-side TLS context with the certificate loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


def write_private(path: Path, data: bytes) -> None:
    """Write a private key: the file exists only with mode 0600 (never readable by others, not
    even between a write and a chmod), and appears whole (written aside, then renamed)."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        aside.unlink()
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(aside, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            aside.unlink()
        raise


async def reload_certificate(context: ssl.SSLContext, certfile: Path, keyfile: Path, every: float = 30.0,
                             what: str = "webhook") -> None:
    """Load a renewed certificate into the live TLS context (cert-manager renews the mounted Secret).

    Without this, a renewal would leave the webhook serving an expired certificate until a
    restart, and with `failurePolicy: Fail` every write to a Stead kind would be refused.
    """
    await on_renewal(certfile, keyfile, lambda: context.load_cert_chain(certfile, keyfile), every, what)


async def on_renewal(certfile: Path, keyfile: Path, renewed: Callable[[], None], every: float = 30.0,
                     what: str = "webhook") -> None:
    """Call `renewed` each time the certificate or key file changes (polled every `every` seconds).

    A server that does not pick up a renewal serves an expired certificate until it restarts:
    the webhooks would refuse every write, the configuration API fail every handshake.
    """
    def stamp() -> tuple[float, float]:
        return certfile.stat().st_mtime, keyfile.stat().st_mtime

    seen = stamp()
    while True:
        await asyncio.sleep(every)  # a file poll interval, not a synchronisation
        try:
            current = stamp()
            if current != seen:
                renewed()
                seen = current
                log.info("%s certificate reloaded from %s", what, certfile)
        except (OSError, ssl.SSLError) as error:
            log.warning("%s certificate not reloaded (keeping the previous one): %s", what, error)
