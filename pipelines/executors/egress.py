"""Where an `http` step may connect: not to the runner's own host or its metadata endpoints.

`http` steps run inside the runner, that is inside the operator's pod (or host). A tenant's
request to 127.0.0.1 reaches the operator's own ports (health, webhook, the configuration API),
one to 169.254.169.254 a cloud's metadata service (instance credentials), and the answer lands
in the run's output and status. So, by default, a connection is refused when its peer is:

- loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10), unspecified, multicast;
- any address of this host's own interfaces (a pod IP reaches the same ports as 127.0.0.1).

The check is made on the socket's actual peer, right after the TCP connect and before a byte is
sent: the name is resolved by the connection itself, so DNS answers that change between a check
and the connect (rebinding), IPv4-mapped IPv6 forms and redirects (each a new connection) are all
judged on where the connection really went. `allow` lists networks an operator deliberately
opens (for example a test's HTTP server on loopback).
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


class EgressPolicy:
    """Judges a peer address; `allow` networks pass whatever their class."""

    def __init__(self, allow: Iterable[str | Network] = (), own: Callable[[], set[Address]] = host_addresses) -> None:
        self.allow: tuple[Network, ...] = tuple(ipaddress.ip_network(n) for n in allow)
        self._own = own

    def refusal(self, address: str) -> str | None:
        """Why a connection to `address` is refused, or None when it may go ahead."""
        ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in network for network in self.allow):
            return None
        for label, hit in (("a loopback", ip.is_loopback), ("a link-local", ip.is_link_local),
                           ("the unspecified", ip.is_unspecified), ("a multicast", ip.is_multicast)):
            if hit:
                return f"{ip} is {label} address"
        if ip in self._own():
            return f"{ip} is an address of the runner's own host"
        return None

    def opener(self, context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
        """A urllib opener whose every connection (redirects included) is judged on its peer."""
        policy = self

        def guarded_connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            sock = socket.create_connection(address, *args, **kwargs)
            peer = str(sock.getpeername()[0])
            why = policy.refusal(peer)
            if why is not None:
                sock.close()
                raise EgressRefused(f"refused to connect to {address[0]}: {why}, which http steps may not "
                                    "reach (the operator's own ports, cloud metadata)")
            return sock

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
