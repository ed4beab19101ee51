"""Where `http` and ssh steps may connect: public addresses only, unless an operator allows more.

`http` and ssh steps run inside the runner, that is inside the operator's pod (or host), on behalf
of a tenant. Everything the pod can reach but the tenant could not otherwise is at stake: the
operator's own ports on 127.0.0.1 or its pod IP (health, webhook, the configuration API), a cloud's
metadata service (instance credentials: 169.254.169.254, AWS's fd00:ec2::254, Alibaba's
100.100.100.200), every Service's ClusterIP (the operator's own Services among them) and every pod
or node on the cluster's private networks. The answer would land in the run's output and status.
So the rule is deny by default, with an allow list:

- an address that is not globally reachable (`ipaddress`'s `is_global`, from IANA's special-purpose
  registries) is refused: loopback, link-local, private (RFC 1918, IPv6 unique-local), shared
  (100.64.0.0/10, CGNAT), documentation, reserved, unspecified, multicast;
- so is any address of this host's own interfaces, whatever its class (a public pod IP still
  reaches the operator's ports);
- an IPv6 address that embeds an IPv4 address (IPv4-mapped and -compatible, 6to4 2002::/16,
  NAT64 64:ff9b::/96 and 64:ff9b:1::/48, Teredo) is judged on the embedded address too: a NAT64 or
  6to4 gateway would carry the connection to it;
- `allow` networks (the operator's ``--http-allow-networks`` / ``--ssh-allow``) pass although not
  global: an operator opens its databases' network that way;
- `deny` networks (the cluster's Service CIDRs) are refused even when an allowed network covers
  them, so that allowing 10.0.0.0/8 for a database does not reopen every ClusterIP.

The check is made on the socket's actual peer, right after the TCP connect and before a byte is
sent: the name is resolved by the connection itself, so DNS answers that change between a check
and the connect (rebinding), IPv4-mapped IPv6 forms and redirects (each a new connection) are all
judged on where the connection really went.
"""

from __future__ import annotations

import http.client
import ipaddress
import itertools
import socket
import ssl
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


SSH_ALLOW_HINT = "an operator allows a network with `stead operator --ssh-allow CIDR` (the chart's actions.ssh.allow)"
HTTP_ALLOW_HINT = ("an operator allows a network with `stead operator --http-allow-networks CIDR` (the chart's "
                   "actions.http.allowNetworks)")
"""What a refusal tells the user: the operator's real flag (the runner's own flags are not the user's to set)."""


class EgressRefused(OSError):
    """A connection to an address `http` steps may not reach; the message names the address class."""


def host_addresses() -> set[Address]:
    """This host's own interface addresses (Linux: /proc), loopback included."""
    found: set[Address] = set()
    try:
        with open("/proc/net/fib_trie") as fh:
            lines = fh.read().splitlines()
        for previous, line in itertools.pairwise(lines):
            if line.strip() == "/32 host LOCAL":
                found.add(ipaddress.ip_address(previous.split()[-1]))
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/net/if_inet6") as fh:
            for line in fh:
                raw = line.split()[0]
                found.add(ipaddress.ip_address(":".join(raw[i:i + 4] for i in range(0, 32, 4))))
    except (OSError, ValueError, IndexError):
        pass
    return found


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def embedded(ip: Address) -> list[Address]:
    """`ip` and every IPv4 address an IPv6 form of it carries (mapped, compatible, 6to4, NAT64,
    Teredo's server and client), each of which a gateway may turn the connection into."""
    if isinstance(ip, ipaddress.IPv6Address):
        packed = ip.packed
        if ip.ipv4_mapped is not None:  # the same socket address as the IPv4 one: judged as it
            return [ip.ipv4_mapped]
        if packed[:12] == bytes(12) and packed[12:] not in (bytes(4), bytes(3) + b"\x01"):
            return [ipaddress.IPv4Address(packed[12:])]  # IPv4-compatible ::a.b.c.d (not :: or ::1)
    found: list[Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.sixtofour is not None:
            found.append(ip.sixtofour)
        if ip.teredo is not None:
            found.extend(ip.teredo)
        if any(ip in network for network in _NAT64):
            found.append(ipaddress.IPv4Address(packed[12:]))
    return found


_CLASSES: tuple[tuple[str, Callable[[Address], bool]], ...] = (
    ("a loopback", lambda ip: ip.is_loopback), ("a link-local", lambda ip: ip.is_link_local),
    ("the unspecified", lambda ip: ip.is_unspecified), ("a multicast", lambda ip: ip.is_multicast),
)


class EgressPolicy:
    """Judges a peer address: public addresses pass, `allow` networks pass whatever their class,
    `deny` networks never pass (see the module's docstring)."""

    def __init__(self, allow: Iterable[str | Network] = (), own: Callable[[], set[Address]] = host_addresses,
                 deny: Iterable[str | Network] = ()) -> None:
        self.allow: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in allow)
        self.deny: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in deny)
        self._own = own

    def refusal(self, address: str) -> str | None:
        """Why a connection to `address` is refused, or None when it may go ahead."""
        peer: Address = ipaddress.ip_address(address.split("%", 1)[0])
        own: set[Address] | None = None
        for ip in embedded(peer):
            shown = str(ip) if ip == peer else f"{ip} (in {peer})"
            if any(ip in network for network in self.deny):
                return f"{shown} is in the cluster's Service network (a ClusterIP)"
            if any(ip in network for network in self.allow):
                continue
            for label, hit in _CLASSES:
                if hit(ip):
                    return f"{shown} is {label} address"
            own = self._own() if own is None else own
            if ip in own:
                return f"{shown} is an address of the runner's own host"
            if not ip.is_global:
                return f"{shown} is not a public address (private, shared, reserved or documentation range)"
        return None

    def opener(self, context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
        """A urllib opener whose every connection (redirects included) is judged on its peer."""
        policy = self

        def refused(host: str, why: str) -> EgressRefused:
            return EgressRefused(f"refused to connect to {host}: {why}, which http steps may not reach (the "
                                 "operator's own ports, cloud metadata, the cluster's private networks); "
                                 f"{HTTP_ALLOW_HINT}")

        def guarded_connect(address: tuple[str, int], timeout: Any = None, source_address: Any = None,
                            ) -> socket.socket:
            """Connect to the first allowed address `address` resolves to: a refused one is never sent a
            packet (no probing of ports behind it), and the connected peer is judged again."""
            host, port = address
            error: OSError | None = None
            for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
                why = policy.refusal(str(sockaddr[0]))
                if why is not None:
                    error = error or refused(host, why)
                    continue
                sock = socket.socket(family, kind, proto)
                try:
                    if timeout is not None and timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                        sock.settimeout(timeout)
                    if source_address:
                        sock.bind(source_address)
                    sock.connect(sockaddr)
                except OSError as exc:
                    sock.close()
                    error = exc if error is None or isinstance(error, EgressRefused) else error
                    continue
                why = policy.refusal(str(sock.getpeername()[0]))
                if why is not None:
                    sock.close()
                    raise refused(host, why)
                return sock
            raise error or OSError(f"{host} resolves to no address")

        class Http(http.client.HTTPConnection):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._create_connection = guarded_connect

        class Https(http.client.HTTPSConnection):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._create_connection = guarded_connect

        class HttpHandler(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(Http, req)

        class HttpsHandler(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(Https, req, context=context)

        # No ProxyHandler: a proxy would make the proxy the judged peer, not the destination.
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), HttpHandler(), HttpsHandler())
