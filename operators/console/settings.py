"""What `stead console` is told: where it listens, which API servers it talks to as its users, how sessions are
sealed. A typed dataclass, filled from the command's flags (`operators.console.command`) or by the operator
process that serves the console beside its reconcilers (`make run`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from operators.console.oidc import OidcSettings


@dataclass(frozen=True)
class ConsoleSettings:
    listen: str = "127.0.0.1"
    port: int = 8090
    kubeconfig: Path | None = None
    """Where the Kubernetes API server is, and the CA it is trusted by. Only those two are taken: the console
    holds no credentials of its own (None: `$KUBECONFIG`, ~/.kube/config, or in-cluster)."""
    stead_api: str | None = None
    """The operator's API server (configuration, graphs, services, run outputs), reached as the user too."""
    stead_api_ca: Path | None = None
    """The CA bundle the operator's API server is trusted by (None: the system's)."""
    session_key_file: Path | None = None
    """A Fernet key shared by the console's replicas (None: one made at start-up; sessions end on restart)."""
    tls_dir: Path | None = None
    """tls.crt and tls.key to serve HTTPS (None: plain HTTP, on loopback or behind an Ingress)."""
    session_check_seconds: float = 30.0
    """How often an open stream asks the API server whether its token is still good: a revoked or expired
    token ends the stream (an `unauthorized` event) rather than streaming on what it may no longer read."""
    max_topics: int = 32
    """Topics one stream multiplexes at most (a page needs a handful)."""
    max_streams_per_session: int = 8
    """Streams one session may hold open at once (one per page is the design; more is a misbehaving client)."""
    max_body: int = 1 << 20
    """The largest request body (an object sent from a form)."""
    oidc: OidcSettings | None = None
    """The OIDC issuer users may sign in at ("Sign in with OIDC"), the one the API server trusts (None: tokens
    only)."""
