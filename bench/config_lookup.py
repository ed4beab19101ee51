"""Hiera-style lookups against the real operator's configuration API, beside a bare handler (the ceiling).

A Hiera backend asks the configuration API once per key, so the cost that matters is one
authenticated `GET .../nodes/<node>/resources/<res>/values?effective&key=<k>` on a warm server.
The benchmark starts a local control plane (kube-apiserver, etcd; non-default ports, a temporary
home), a real `stead run` against it, and applies one environment the GitOps way: 50 nodes, a
ConfigComponent, five layers of `astute` values and overrides (root, role, node; about 100 keys)
to merge. A ServiceAccount token (`kubectl create token`, RBAC through a Role) authenticates.
Then, one contender at a time, the same client (wrk when installed, else aiohttp in this
process; one keep-alive HTTPS connection per concurrent client) cycles for `--seconds` through
1,000 distinct lookups, 20 keys of each of the 50 nodes, as a puppetserver compiling catalogues
for many nodes would (one URL asked over and over would flatter every cache keyed by URL, in
the server):

- ``ceiling``: the API's HTTP server (granian, embedded: `operators.runtime.serving.http`) with a
  handler that returns a constant JSON body for any request, no authentication, same TLS (EC
  P-256), on the same event loop as the operator (uvloop when installed). Nothing served by this
  stack on this machine can answer faster.
- ``uvicorn``: the contender not chosen, uvicorn with httptools and uvloop, serving the same
  constant answer as a bare ASGI app, same TLS.
- ``operator``: the configuration API of the real `stead run --config-api-workers N
  --config-api-client-ca off` (TokenReview + SubjectAccessReview with their short cache, reads
  from the watch-fed cache, effective values cached per snapshot; granian terminates TLS).
- ``relay-token`` and ``relay-cert``: "operator, client CA on": a second `stead run`, with
  `--config-api-client-ca auto` (the default), whose API terminates TLS in Python in front of
  granian (`operators.runtime.serving.relay`) so that client certificates map to users. The same
  token through the relay, then a client certificate of the cluster's client CA whose user a
  RoleBinding grants the same Role (SubjectAccessReview, no TokenReview). wrk cannot present a
  client certificate: ``relay-cert`` always uses the Python client, and with `--client wrk`
  ``relay-token`` is measured with both, for the comparison.
- ``in-process`` and ``in-process/no-metrics``: a quiet `stead run --config-api-workers 0` (watching an
  empty namespace, no webhooks; its API serves every namespace): the API on the operator's own process
  and event loop, with the per-request metrics it keeps there (`stead_api_requests_total`, the
  latency histogram), then without them (the bench's switch, `WITHOUT_METRICS`): what the metrics
  cost. Workers serve unobserved, so that comparison is only in-process.
- ``<name>@base`` (`--baseline-tree DIR`, e.g. a `git worktree` of main): each operator contender
  above run by that checkout's code (a quiet `stead run` with DIR first on its path), right after
  this checkout's, every repeat: before/after in one run. The ceiling is this checkout's.
- ``uncached``: the same API application reading from the API server on every request
  (`KubeConfigRepository`: three GETs per lookup), which is what the operator did before the
  cache. Shown for the difference; skip with `--only ceiling,operator`.

Every contender is served by `--workers` processes (default: one per CPU) sharing its port with
SO_REUSEPORT, as `stead run --config-api-workers` serves the API; `--workers 0` measures the
operator serving the API from its own process (the others then use one process).

Besides requests per second and latency, the server processes' CPU time per request (from
/proc) is printed: on a shared, busy machine it is the steadier figure; and their resident
memory together at the end of the run. `--repeat N` interleaves
N runs of each contender and reports medians.

Before the request rates, both servers get the attack that decided between them (`--attack`,
on by default): one connection sends a single header growing by 64 KiB writes up to 64 MiB;
printed are how much the server read before it closed the connection, its answer, and how much
its memory grew. The hand-written server Stead had before (deleted) read all of it, in 6.5 s of
CPU and 119 MiB, before its 431; its bare handler served 32.5k req/s, p99 8.1 ms, here.

Each operator contender is then put against the ceiling: its share of the ceiling's requests per
second and of its CPU per request, and its p99 as a multiple of the ceiling's p99, measured in the
same run; with `--repeat`, every run's figures too (p99 moves with the machine's load).

Targets (from the issue): ``operator`` reaches at least 50% of the ceiling's requests per second,
with p99 under 10 ms at 100 concurrent clients. By Little's law, 100 clients always waiting on
one answer each cannot see a median under 10 ms unless the server answers more than 10,000 per
second: compare the operator's p99 with the ceiling's, measured the same way.

    .venv/bin/python bench/config_lookup.py [--concurrency 100] [--seconds 10] [--repeat 3]
                                            [--workers 2] [--only ceiling,operator,relay-token,relay-cert]
                                            [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.cluster import Binaries, LocalControlPlane, ensure_binaries  # noqa: E402
from operators.config.api import ConfigApi  # noqa: E402
from operators.config.repository import KubeConfigRepository  # noqa: E402
from operators.runtime.api.auth import TokenReviewAuthenticator  # noqa: E402
from operators.runtime.kube.client import KubeClient, load_access  # noqa: E402
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf  # noqa: E402
from operators.runtime.serving.clientca import ClientCa  # noqa: E402
from operators.runtime.serving.eventloop import event_loop_factory  # noqa: E402
from operators.runtime.serving.http import HttpServer, Request, Response  # noqa: E402

STEAD = Path(sys.executable).parent / "stead"
NAMESPACE = "bench"
PATH = "/api/v1/config/environments/env-1/nodes/node-1.domain.tld/resources/astute/values"
QUERY = f"?effective&key=nova.workers&namespace={NAMESPACE}"
EXPECTED = b"16"  # the answer to PATH + QUERY: node-1's override beats its role's and the root's values
KEYS = ["nova.workers", "nova.debug", "deployment_id", *(f"key{i}.value" for i in range(0, 100, 6)), "key1.list.2"]
LOOKUPS = [f"/api/v1/config/environments/env-1/nodes/node-{n}.domain.tld/resources/astute/values"
           f"?effective&key={key}&namespace={NAMESPACE}" for n in range(1, 51) for key in KEYS]


WITHOUT_METRICS = ("import sys; from operators.runtime.serving.metrics import Metrics; "
                   "Metrics.request_observer = lambda self, api: None; from operators.cli import main; "
                   "sys.argv[0] = 'stead'; sys.exit(main())")
"""`stead run` whose configuration API observes no request (`HttpServer.observe` None): the bench's
switch for the cost of the per-request metrics, the same on any checkout."""


class Variant(NamedTuple):
    """The configuration API of one more quiet `stead run` (see `Setup.quiet`)."""

    name: str
    workers: int | None  # None: --workers
    metrics: bool
    baseline: bool  # the code of --baseline-tree


VARIANTS = {
    "in-process": Variant("in-process", 0, True, False),
    "in-process/no-metrics": Variant("in-process/no-metrics", 0, False, False),
}
"""Contenders beside `operator` (N workers, this checkout): the API served by the operator's own
process, with and without its per-request metrics (workers serve unobserved: their requests are not
in the operator's /metrics). With --baseline-tree, `<name>@base` of each operator contender."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manifests() -> list[dict[str, Any]]:
    """One environment, its component and five layers of values (the GitOps way: plain objects)."""
    api = "stead.dev/v1alpha1"
    nodes = [{"name": f"node-{i}", "fqdn": f"node-{i}.domain.tld", "roles": ["controller" if i <= 3 else "compute"]}
             for i in range(1, 51)]
    big = {f"key{i}": {"value": i, "list": list(range(5))} for i in range(100)}
    layers = [
        ("astute", {}, "values", {"deployment_id": 1, "nova": {"workers": 4, "debug": False}, **big}),
        ("astute-overrides", {}, "overrides", {"nova": {"debug": True}}),
        ("astute-controller", {"role": "controller"}, "values", {"nova": {"workers": 8}, "key1": {"value": -1}}),
        ("astute-node-1", {"role": "controller", "node": "node-1.domain.tld"}, "values", {"local": True}),
        ("astute-node-1-overrides", {"role": "controller", "node": "node-1.domain.tld"}, "overrides",
         {"nova": {"workers": 16}}),
    ]
    return [
        {"apiVersion": api, "kind": "Environment", "metadata": {"name": "env-1"},
         "spec": {"release": "mitaka-9.0", "hierarchyLevels": ["role", "node"], "components": ["fuel"],
                  "nodes": nodes}},
        {"apiVersion": api, "kind": "ConfigComponent", "metadata": {"name": "fuel"},
         "spec": {"resources": [{"name": "astute"}]}},
        *({"apiVersion": api, "kind": "ConfigValues", "metadata": {"name": name},
           "spec": {"environment": "env-1", "resource": "astute", "kind": kind, "level": level, "data": data}}
          for name, level, kind, data in layers),
    ]


class Setup:
    """The control plane, the operator, the objects and a token; torn down in reverse."""

    def __init__(self, work: Path, binaries: Binaries, workers: int) -> None:
        self.work = work
        self.workers = workers
        self.binaries = binaries
        self.plane = LocalControlPlane(work / "home", apiserver_port=_free_port(), etcd_client_port=_free_port(),
                                       etcd_peer_port=_free_port(), controller_manager_port=_free_port(),
                                       binaries=binaries)
        self.operator: subprocess.Popen[bytes] | None = None
        self.relayed: subprocess.Popen[bytes] | None = None
        self.api_port = _free_port()
        self.relayed_port = _free_port()
        self.token = ""
        self.kubeconfig = Path()
        self.cert = ("", "")
        self.variants: list[Variant] = []
        self.baseline: Path | None = None
        self.quiets: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run([str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
                                input=input, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def _operator(self, name: str, port: int, *flags: str, workers: int | None = None, metrics: bool = True,
                  tree: Path | None = None) -> subprocess.Popen[bytes]:
        """A `stead run` serving the API on `port`, ready (its CA in `<work>/<name>-home/config-api`):
        with `workers` API processes (default `--workers`), the code of `tree` (default this checkout)
        first on its path, and without the per-request metrics when `metrics` is False (the bench's
        own switch: `stead run` always observes the requests its process serves)."""
        health = _free_port()
        home = self.work / f"{name}-home"
        log_path = self.work / f"{name}.log"
        command = [str(STEAD)] if metrics else [sys.executable, "-c", WITHOUT_METRICS]
        env = {**os.environ, "STEAD_HOME": str(home)}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*command, "run", "--kubeconfig", str(self.kubeconfig), "--store", str(home / "store"),
                 "--health-port", str(health), "--replica", f"bench-{name}", "--config-api-port", str(port),
                 "--config-api-workers", str(self.workers if workers is None else workers), *flags],
                stdout=log, stderr=subprocess.STDOUT, cwd=tree or ROOT, env=env)
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"stead run exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("stead run did not become ready")
            time.sleep(0.2)  # a readiness poll with a deadline
        return process

    def quiet(self, variant: Variant) -> None:
        """One more `stead run` for a variant of the API (`VARIANTS`), watching only an empty namespace
        and without webhooks, as the relayed one: its API serves the bench's namespace all the same."""
        port = _free_port()
        name = variant.name.replace("@", "-").replace("/", "-")  # names of files
        process = self._operator(name, port, "--webhook", "off", "--namespace", "bench-quiet",
                                 "--config-api-client-ca", "off", workers=variant.workers, metrics=variant.metrics,
                                 tree=self.baseline if variant.baseline else None)
        self.quiets[variant.name] = (process, port, self.work / f"{name}-home" / "config-api" / "ca.crt")

    def up(self, relayed: bool) -> None:
        info = self.plane.up()
        self.kubeconfig = info.kubeconfig
        self.operator = self._operator("operator", self.api_port, "--install-crds", "--webhook-port",
                                       str(_free_port()), "--config-api-client-ca", "off")
        self.cacert = self.work / "operator-home" / "config-api" / "ca.crt"
        self.kubectl("create", "namespace", NAMESPACE)
        self.kubectl("create", "serviceaccount", "hiera", "-n", NAMESPACE)
        self.kubectl("create", "role", "hiera", "-n", NAMESPACE, "--verb=get,list",
                     "--resource=configvalues.stead.dev,configcomponents.stead.dev,environments.stead.dev")
        self.kubectl("create", "rolebinding", "hiera", "-n", NAMESPACE, "--role=hiera",
                     f"--serviceaccount={NAMESPACE}:hiera")
        self.token = self.kubectl("create", "token", "hiera", "-n", NAMESPACE, "--duration=1h").strip()
        docs = manifests()
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input="\n".join(json.dumps(d) for d in docs[:2]))
        self.kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", "--timeout=60s", "env/env-1", "cc/fuel")
        self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input="\n".join(json.dumps(d) for d in docs[2:]))
        self.kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", "--timeout=60s", "cv", "--all")
        self.kubectl("create", "namespace", "bench-quiet")
        for variant in self.variants:
            self.quiet(variant)
        if relayed:
            # "operator, client CA on": watching only an empty namespace and without webhooks, so that it
            # leaves the first one alone; its API serves every namespace. A certificate of the cluster's
            # client CA whose user the same Role is bound to.
            self.relayed = self._operator("relayed", self.relayed_port, "--webhook", "off", "--namespace",
                                          "bench-quiet", "--config-api-client-ca", "auto")
            self.relayed_cacert = self.work / "relayed-home" / "config-api" / "ca.crt"
            pki = info.home / "pki"
            ca = KeyPair((pki / "client-ca.crt").read_bytes(), (pki / "client-ca.key").read_bytes())
            leaf = make_leaf(ca, "hiera-cert", server=False, client=True)
            self.cert = (str(self.work / "hiera-cert.crt"), str(self.work / "hiera-cert.key"))
            Path(self.cert[0]).write_bytes(leaf.cert_pem)
            Path(self.cert[1]).write_bytes(leaf.key_pem)
            self.kubectl("create", "rolebinding", "hiera-cert", "-n", NAMESPACE, "--role=hiera", "--user=hiera-cert")

    def down(self) -> None:
        for process in (self.relayed, *(quiet[0] for quiet in self.quiets.values()), self.operator):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        self.plane.down()


def _serve(which: str, port: int, cert: str, key: str, kubeconfig: str) -> None:
    """A contender of its own process: the constant answer (on granian or uvicorn), or the API
    reading through to the API server."""

    async def serve() -> None:
        if which == "uvicorn":
            await _serve_uvicorn(port, cert, key)
            return
        client_ca = None
        if which in ("ceiling", "relay"):
            answer = Response(200, EXPECTED)

            async def constant(request: Request) -> Response:
                return answer

            server = HttpServer(constant)
            if which == "relay":  # the same, with the TLS relay in front (a client CA configured)
                client_ca = ClientCa(make_ca("bench-client-ca").cert_pem)
        else:
            kube = KubeClient(load_access(Path(kubeconfig)), concurrency=100)
            await kube.__aenter__()
            api = ConfigApi(KubeConfigRepository(kube), TokenReviewAuthenticator(kube), NAMESPACE)
            server = HttpServer(api, errors=api.problem)
        await server.start("127.0.0.1", port, (Path(cert), Path(key)), client_ca=client_ca)
        await asyncio.Event().wait()  # until terminated

    _new_loop().run_until_complete(serve())


async def _serve_uvicorn(port: int, cert: str, key: str) -> None:
    import uvicorn

    async def constant(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(EXPECTED)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": EXPECTED})

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(constant, http="httptools", loop="none", lifespan="off", log_level="warning",
                            ssl_certfile=cert, ssl_keyfile=key, access_log=False)
    await uvicorn.Server(config).serve(sockets=[sock])


def attack(which: str, work: Path) -> str:
    """One 64 MiB header against a contender in a process of its own: what it read, answered, grew."""
    port = _free_port()
    server = multiprocessing.Process(target=_serve, daemon=True, args=(
        which, port, str(work / "tls.crt"), str(work / "tls.key"), ""))
    server.start()
    assert server.pid is not None
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    deadline = time.monotonic() + 10
    while True:
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)  # then it stops sending, and reads
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # a readiness poll with a deadline
    before, cpu_before = rss_mib([server.pid]), cpu_seconds([server.pid])
    sent, answer = 0, b""
    try:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nX-Big: ")
            try:
                for _ in range(1024):
                    sock.sendall(b"a" * 65536)
                    sent += 65536
                sock.sendall(b"\r\n\r\n")
            except OSError:
                pass
            with contextlib.suppress(OSError):
                answer = sock.recv(64).split(b"\r\n", 1)[0]
        grown, cpu = rss_mib([server.pid]) - before, cpu_seconds([server.pid]) - cpu_before
    finally:
        server.terminate()
        server.join(10)
    said = answer.decode(errors="replace") or "connection closed"
    return (f"{which:<10} read {sent / (1 << 20):6.1f} MiB of a 64 MiB header, answered: {said:<28} "
            f"memory +{grown:.0f} MiB, CPU {cpu:.1f} s")


def _new_loop() -> asyncio.AbstractEventLoop:
    """The event loop `stead run` uses, so that the contenders differ only in their handlers."""
    factory = event_loop_factory()
    return factory() if factory is not None else asyncio.new_event_loop()


async def _load(base: str, cafile: str, token: str, concurrency: int, seconds: float,
                pids: list[int], cert: tuple[str, str] | None = None) -> tuple[int, list[float], int, float]:
    """Checks one answer (waiting for the server), then cycles through LOOKUPS from `concurrency`
    workers; a non-200 answer counts as an error. With `cert`, a client certificate instead of the token."""
    url = base + PATH + QUERY
    context = ssl.create_default_context(cafile=cafile)
    if cert is not None:
        context.load_cert_chain(*cert)
    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency)
    latencies: list[float] = []
    errors = 0
    headers = {"Authorization": f"Bearer {token}"} if cert is None else {}
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(300):  # wait for the server, and warm caches and connections
            try:
                async with session.get(url, headers=headers) as response:
                    body = await response.read()
                    if response.status == 200 and body == EXPECTED:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"{url} never answered {EXPECTED!r}")
        deadline = time.perf_counter() + seconds
        turn = 0

        async def worker() -> None:
            nonlocal errors, turn
            while time.perf_counter() < deadline:
                turn += 1
                start = time.perf_counter()
                async with session.get(base + LOOKUPS[turn % len(LOOKUPS)], headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                latencies.append(time.perf_counter() - start)

        began, cpu = time.perf_counter(), cpu_seconds(pids)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - began, cpu_seconds(pids) - cpu
    return int(len(latencies) / elapsed), latencies, errors, cpu


_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _wrk_ms(text: str) -> float:
    """`1.23ms`, `845.00us`, `1.02s` -> milliseconds."""
    for unit in ("us", "ms", "s"):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * _WRK_UNITS[unit]
    raise ValueError(f"not a wrk duration: {text!r}")


def _load_wrk(base: str, token: str, concurrency: int, seconds: float, pids: list[int], script: Path
              ) -> tuple[int, float, float, int, float]:
    """The same lookups from wrk (C, two threads): the load generator costs far less CPU than the
    Python client, which shares the two cores with the servers and inflates their tail latency."""
    cpu = cpu_seconds(pids)
    out = subprocess.run(
        ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds:.0f}s", "--latency", "-s", str(script),
         "-H", f"Authorization: Bearer {token}", base], capture_output=True, text=True, check=True,
        timeout=seconds + 60,
    ).stdout
    cpu = cpu_seconds(pids) - cpu
    percentiles = {line.split()[0]: _wrk_ms(line.split()[1]) for line in out.splitlines()
                   if line.strip().split(" ")[0].endswith("%") and len(line.split()) == 2}
    requests = int(next(line.split()[0] for line in out.splitlines() if " requests in " in line))
    rate = float(next(line.split()[1] for line in out.splitlines() if line.startswith("Requests/sec:")))
    errors = sum(int(line.split()[-1]) for line in out.splitlines() if line.strip().startswith("Non-2xx"))
    return int(rate), percentiles["50%"], percentiles["99%"], errors, cpu / max(1, requests) * 1e6


def wrk_script(path: Path) -> Path:
    """A wrk script cycling through LOOKUPS (in each of wrk's threads)."""
    paths = ",\n".join(json.dumps(lookup) for lookup in LOOKUPS)
    path.write_text(f"local paths = {{\n{paths}\n}}\nlocal turn = 0\n"
                    "request = function()\n  turn = turn % #paths + 1\n"
                    "  return wrk.format(\"GET\", paths[turn])\nend\n")
    return path


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of these processes so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mib(pids: list[int]) -> float:
    """Resident memory of these processes together, in MiB."""
    kib = 0
    for pid in pids:
        kib += int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("VmRSS:")))
    return kib / 1024


def with_children(pid: int) -> list[int]:
    """A process and its children (the operator and its config API workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--client", choices=("python", "wrk"), default="wrk" if shutil.which("wrk") else "python",
                        help="load generator: wrk (Debian package `wrk`; the default when installed) or the "
                        "Python client")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes serving each contender (`stead run --config-api-workers`; the others "
                        "listen on one port the same way); default: one per CPU")
    parser.add_argument("--only", default="ceiling,uvicorn,operator,in-process,in-process/no-metrics,relay-token,"
                        "relay-cert,uncached", help="comma-separated contenders")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout (a `git worktree` of main): its "
                        "operator contenders too, as `<name>@base`, in the same run, alternating")
    parser.add_argument("--no-attack", dest="attack", action="store_false", help="skip the 64 MiB header attack")
    parser.add_argument("--repeat", type=int, default=1, help="run the contenders this many times, interleaved; "
                        "report medians")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) at the end")
    parser.add_argument("--json", action="store_true", help="print the medians as one JSON line instead of the "
                        "report, contender -> req/s, p50, p99, errors, server CPU us/req, RSS MiB (bench/check.py)")
    args = parser.parse_args()
    chosen = args.only.split(",")
    contenders = [c for c in ("ceiling", "uvicorn", "operator", *VARIANTS, "relay-token", "relay-cert", "uncached")
                  if c in chosen]
    variants = [VARIANTS[c] for c in contenders if c in VARIANTS]
    if args.baseline_tree is not None:
        based = [Variant(f"{c}@base", None if c == "operator" else VARIANTS[c].workers,
                         c == "operator" or VARIANTS[c].metrics, True)
                 for c in contenders if c == "operator" or c in VARIANTS]
        for variant in based:  # each beside its own, so that the two alternate
            contenders.insert(contenders.index(variant.name.removesuffix("@base")) + 1, variant.name)
        variants += based
    if args.client == "wrk" and "relay-token" in contenders:  # beside relay-cert, which wrk cannot measure
        contenders.insert(contenders.index("relay-token") + 1, "relay-token/py")
    load_at_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="stead-bench-config-"))
    ca = make_ca("bench-ca")
    leaf = make_leaf(ca, "bench", hosts=["127.0.0.1"])
    (work / "ca.crt").write_bytes(ca.cert_pem)
    (work / "tls.crt").write_bytes(leaf.cert_pem)
    (work / "tls.key").write_bytes(leaf.key_pem)
    attacks = [attack(which, work) for which in ("ceiling", "relay", "uvicorn")] if args.attack else []
    setup = Setup(work, ensure_binaries(progress=lambda line: print(line, file=sys.stderr)), args.workers)
    setup.variants, setup.baseline = variants, args.baseline_tree
    runs: dict[str, list[tuple[float, ...]]] = {c: [] for c in contenders}
    try:
        print("starting a local control plane and `stead run` ...", file=sys.stderr)
        setup.up(relayed=any(c.startswith("relay") for c in contenders))
        for _ in range(args.repeat):
            for which in contenders:
                servers: list[multiprocessing.Process] = []
                cert = setup.cert if which == "relay-cert" else None
                client = "python" if which in ("relay-cert", "relay-token/py") else args.client
                if which == "operator":
                    assert setup.operator is not None
                    pids = with_children(setup.operator.pid)
                    base, cafile = f"https://127.0.0.1:{setup.api_port}", str(setup.cacert)
                elif which in setup.quiets:
                    quiet, quiet_port, cafile_path = setup.quiets[which]
                    pids = with_children(quiet.pid)
                    base, cafile = f"https://127.0.0.1:{quiet_port}", str(cafile_path)
                elif which.startswith("relay"):
                    assert setup.relayed is not None
                    pids = with_children(setup.relayed.pid)
                    base, cafile = f"https://127.0.0.1:{setup.relayed_port}", str(setup.relayed_cacert)
                else:
                    port = _free_port()
                    servers = [multiprocessing.Process(target=_serve, daemon=True, args=(
                        which, port, str(work / "tls.crt"), str(work / "tls.key"), str(setup.kubeconfig)))
                        for _ in range(max(1, args.workers))]
                    for server in servers:
                        server.start()
                    pids = [server.pid for server in servers if server.pid is not None]
                    base, cafile = f"https://127.0.0.1:{port}", str(work / "ca.crt")
                try:
                    if client == "wrk":  # the Python client checks the answer and warms up first
                        asyncio.run(_load(base, cafile, setup.token, args.concurrency, 1.0, pids))
                        runs[which].append(_load_wrk(base, setup.token, args.concurrency, args.seconds, pids,
                                                     wrk_script(work / "lookups.lua")))
                    else:
                        rps, latencies, errors, cpu = asyncio.run(
                            _load(base, cafile, setup.token, args.concurrency, args.seconds, pids, cert=cert))
                        cuts = statistics.quantiles(latencies, n=100)
                        runs[which].append((rps, cuts[49] * 1000, cuts[98] * 1000, errors,
                                            cpu / max(1, len(latencies)) * 1e6))
                    runs[which][-1] += (rss_mib(pids),)
                finally:
                    for server in servers:
                        server.terminate()
                        server.join(10)
                print(f"{which}: {runs[which][-1][0]} req/s", file=sys.stderr)
    finally:
        setup.down()
        if args.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    results = {which: tuple(statistics.median(run[i] for run in done) for i in range(6))
               for which, done in runs.items() if done}
    if args.json:
        fields = ("rps", "p50_ms", "p99_ms", "errors", "cpu_us_per_request", "rss_mib")
        print(json.dumps({which: dict(zip(fields, medians, strict=True)) for which, medians in results.items()}))
        return 0
    serving = (f"{args.workers} server processes each" if args.workers
               else "the API in the operator's process, the others in one")
    print(f"effective-value lookups over HTTPS ({args.client}), {args.concurrency} concurrent clients, "
          f"{args.seconds:.0f} s each, {serving}, "
          f"median of {args.repeat} ({os.cpu_count()} CPUs, load average {load_at_start:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end; client and "
          "servers on one machine)")
    if attacks:
        print("one 64 MiB header (ceiling = granian, Stead's server; relay = granian behind the TLS relay; "
              "uvicorn = httptools):")
        for line in attacks:
            print("  " + line)
    print(f"{'contender':<26} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'server CPU us/req':>18} "
          f"{'server RSS MiB':>15}")
    for which, (rate, p50, p99, failed, per_request, rss) in results.items():
        print(f"{which:<26} {rate:>8.0f} {p50:>8.2f} {p99:>8.2f} {failed:>7.0f} {per_request:>18.0f} {rss:>15.0f}")
    if all(len(done) == args.repeat for done in runs.values()) and args.repeat > 1:
        print("each run (req/s, p99 ms): " + "; ".join(
            f"{which} " + ", ".join(f"{run[0]:.0f}/{run[2]:.1f}" for run in done) for which, done in runs.items()))
    if any(which in ("relay-cert", "relay-token/py") for which in results):
        print("(relay-cert and relay-token/py: the Python client, which shares the CPUs with the servers)")
    if "ceiling" in results and "uvicorn" in results:
        print(f"granian / uvicorn (bare handlers): {results['ceiling'][0] / max(1, results['uvicorn'][0]):.2f} req/s")
    if "ceiling" in results:
        ceiling = results["ceiling"]
        print(f"against the ceiling (targets: >= 0.50 of its req/s, p99 < 10 ms; its own p99 {ceiling[2]:.2f} ms):")
        for which, (rate, _, p99, _, per_request, _) in results.items():
            if which == "operator" or which.split("@")[0] in VARIANTS or which == "operator@base":
                print(f"  {which:<24} {rate / max(1, ceiling[0]):.2f} req/s, {ceiling[4] / max(1, per_request):.2f} "
                      f"by server CPU per request, p99 {p99:.2f} ms = {p99 / max(1e-9, ceiling[2]):.2f}x the "
                      "ceiling's")
    for which in [w for w in results if w.endswith("@base")]:
        new, old = results[which.removesuffix("@base")], results[which]
        print(f"{which.removesuffix('@base')}: this checkout / {args.baseline_tree}: {new[0] / max(1, old[0]):.2f} "
              f"req/s, {new[4] / max(1e-9, old[4]):.2f} server CPU per request, p99 {new[2]:.2f} vs {old[2]:.2f} ms")
    if "in-process" in results and "in-process/no-metrics" in results:
        on, off = results["in-process"], results["in-process/no-metrics"]
        print(f"per-request metrics (in-process): {on[4] - off[4]:+.0f} us of server CPU per request, "
              f"p99 {on[2]:.2f} vs {off[2]:.2f} ms without")
    if "uncached" in results:
        print("(uncached: its CPU column leaves out the kube-apiserver and etcd, which do most of its work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
