"""Serving TLS for the operator's HTTPS endpoints (admission webhooks, domain APIs)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

log = logging.getLogger(__name__)


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A server-side TLS context with the certificate loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


async def reload_certificate(context: ssl.SSLContext, certfile: Path, keyfile: Path, every: float = 30.0) -> None:
    """Load a renewed certificate into the live TLS context (cert-manager renews the mounted Secret).

    Without this, a renewal would leave the webhook serving an expired certificate until a
    restart, and with `failurePolicy: Fail` every write to a Stead kind would be refused.
    """
    def stamp() -> tuple[float, float]:
        return certfile.stat().st_mtime, keyfile.stat().st_mtime

    seen = stamp()
    while True:
        await asyncio.sleep(every)  # a file poll interval, not a synchronisation
        try:
            current = stamp()
            if current != seen:
                context.load_cert_chain(certfile, keyfile)
                seen = current
                log.info("webhook certificate reloaded from %s", certfile)
        except (OSError, ssl.SSLError) as error:
            log.warning("webhook certificate not reloaded (keeping the previous one): %s", error)
