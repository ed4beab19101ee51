"""Each step type on its own: real processes for exec/setvar, a real HTTP server for http.

The kubernetes step type and the Job backend of exec talk to an injected `KubeApi`; here it is a
small in-memory fake that plays the controllers (the e2e suite owns the real API server).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import os
import pwd
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from pipelines.executors import (
    KubernetesJob,
    LocalProcess,
    StepAborted,
    StepContext,
    StepFailed,
    default_executors,
)
from pipelines.executors.base import ParameterError
from pipelines.executors.delay import DelayExecutor
from pipelines.executors.egress import EgressPolicy, host_addresses
from pipelines.executors.http_request import HttpExecutor, json_path
from pipelines.executors.kube import KubernetesExecutor, readiness
from pipelines.executors.script import ScriptExecutor, ScriptUser, SetVarExecutor, kill_leftover
from pipelines.kubeapi import KubeApiError
from tests.polling import wait_until


@dataclass
class Captured:
    lines: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, line: str, stream: str) -> str:
        self.lines.append((stream, line))
        return line

    def text(self, stream: str | None = None) -> str:
        return "\n".join(line for s, line in self.lines if stream is None or s == stream)


def make_ctx(
    tmp_path: Path, parameters: Mapping[str, Any], *, timeout: float | None = None,
    variables: Mapping[str, str] | None = None, abort: threading.Event | None = None, step_type: str = "exec",
) -> tuple[StepContext, Captured]:
    out = Captured()
    ctx = StepContext(
        run_uid="run1", step_id="s1", step_type=step_type, target="r1", attempt=1, parameters=dict(parameters),
        variables=dict(variables or {}), plain_variables=dict(variables or {}), workdir=tmp_path / "work",
        deadline=None if timeout is None else time.monotonic() + timeout, timeout=timeout,
        abort=abort or threading.Event(), output=out, mask=lambda s: s, marker="run1/s1@r1",
    )
    return ctx, out


# -- exec --------------------------------------------------------------------------------------


def test_exec_captures_exit_code_stdout_and_stderr(tmp_path: Path) -> None:
    ctx, out = make_ctx(tmp_path, {"script": "echo out1; echo err1 >&2; echo out2; exit 7"})
    with pytest.raises(StepFailed) as info:
        ScriptExecutor(LocalProcess()).run(ctx)
    assert info.value.exit_code == 7
    assert out.text("stdout") == "out1\nout2" and out.text("stderr").startswith("err1\n")


def test_a_failed_script_names_the_user_it_ran_as(tmp_path: Path) -> None:
    """Issue 27: "script exited with code 2" alone left a user whose script could not write (it ran as
    another uid under a root operator) guessing; the failure and the step's log name the user."""
    ctx, out = make_ctx(tmp_path, {"script": "exit 2"})
    with pytest.raises(StepFailed) as info:
        ScriptExecutor(LocalProcess()).run(ctx)
    me = f"uid {os.geteuid()} ({pwd.getpwuid(os.geteuid()).pw_name})"
    assert info.value.message == f"script exited with code 2 (ran as {me})"
    assert out.text("stderr") == (f"the script exited with code 2; it ran as {me}: it may write its working "
                                  "directory (HOME) and /tmp, and elsewhere only what that user may")
    assert LocalProcess(user=ScriptUser(1 << 30, 1 << 30)).runs_as() == \
        f"uid {1 << 30} (no user of that uid on this host)"


def test_exec_environment_workdir_and_interpreters(tmp_path: Path) -> None:
    os.environ["STEAD_TEST_LEAK"] = "operator-secret"
    try:
        ctx, out = make_ctx(
            tmp_path,
            {"script": 'echo "$app_name|$PORT|$STEAD_TARGET|${STEAD_TEST_LEAK:-none}"; pwd; echo hi > here.txt',
             "env": {"PORT": 8080}},
            variables={"app_name": "web", "not-exported": "x"},
        )
        result = ScriptExecutor(LocalProcess()).run(ctx)
    finally:
        del os.environ["STEAD_TEST_LEAK"]
    assert result.exit_code == 0
    assert out.text("stdout").splitlines() == ["web|8080|r1|none", str(tmp_path / "work")]
    assert (tmp_path / "work" / "here.txt").read_text() == "hi\n"

    ctx, out = make_ctx(tmp_path, {"script": "import os, sys\nprint(sys.version_info[0], os.environ['X'])",
                                   "interpreter": "python", "env": {"X": "1"}})
    ScriptExecutor(LocalProcess()).run(ctx)
    assert out.text() == "3 1"

    ctx, out = make_ctx(tmp_path, {"script": "echo $app_name", "exportVariables": False}, variables={"app_name": "w"})
    ScriptExecutor(LocalProcess()).run(ctx)
    assert out.text() == ""


def test_exec_script_is_neither_on_disk_nor_on_the_command_line(tmp_path: Path) -> None:
    ctx, out = make_ctx(tmp_path, {"script": "cat /proc/$$/cmdline | tr '\\0' ' '; echo; ls -A"})
    ScriptExecutor(LocalProcess()).run(ctx)
    cmdline, *listing = out.text("stdout").splitlines()
    assert "cat /proc" not in cmdline and "/dev/fd/" in cmdline
    assert listing == []


def test_exec_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    ctx, _ = make_ctx(tmp_path, {"script": f"sleep 30 & echo $! > {pidfile}; wait"}, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(StepFailed, match=r"timed out after 0\.5s"):
        ScriptExecutor(LocalProcess(kill_grace=0.5)).run(ctx)
    assert time.monotonic() - started < 5
    child = int(pidfile.read_text())
    wait_until(lambda: not _alive(child), what="the background child to die")


def test_a_finished_step_leaves_no_background_child_behind(tmp_path: Path) -> None:
    """Children started with `&` stay in the step's group; `setsid` ones leave it but keep its marker."""
    pids = tmp_path / "pids"
    script = (f"sleep 300 & echo $! >> {pids}; setsid sleep 301 & echo $! >> {pids}; "
              f"(setsid sh -c 'sleep 302 & echo $! >> {pids}' &); sleep 0.2; echo done")
    ctx, out = make_ctx(tmp_path, {"script": script})
    ScriptExecutor(LocalProcess()).run(ctx)
    assert ("stdout", "done") in out.lines
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 3
    wait_until(lambda: not any(_alive(c) for c in children), 5, "every background child to be gone")


def test_exec_abort_stops_a_running_script(tmp_path: Path) -> None:
    abort = threading.Event()
    ctx, out = make_ctx(tmp_path, {"script": "echo started; sleep 30"}, abort=abort)
    errors: list[BaseException] = []

    def go() -> None:
        try:
            ScriptExecutor(LocalProcess(kill_grace=0.5)).run(ctx)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=go)
    thread.start()
    wait_until(lambda: ("stdout", "started") in out.lines, what="the script to start")
    abort.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and isinstance(errors[0], StepAborted)


def test_exec_output_is_masked_line_by_line(tmp_path: Path) -> None:
    seen: list[str] = []
    ctx, _ = make_ctx(tmp_path, {"script": "echo token=s3cr3t; printf 'no newline s3cr3t'"})
    ctx.output = lambda line, stream: seen.append(line.replace("s3cr3t", "***")) or line.replace("s3cr3t", "***")
    ScriptExecutor(LocalProcess()).run(ctx)
    assert seen == ["token=***", "no newline ***"]


def test_kill_leftover_only_kills_groups_that_carry_the_marker(tmp_path: Path) -> None:
    import subprocess

    env = {"PATH": os.environ["PATH"], "STEAD_MARKER": "run1/a"}
    mine = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"]}, start_new_session=True)
    try:
        # Until the child has exec'd, /proc shows the parent's environment (no marker) and the command line
        # of the forked Python: wait for both to be `sleep`, or the check below races the exec.
        for proc in (mine, other):
            wait_until(lambda p=proc: Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep"), 5, "exec")
        assert not kill_leftover(other.pid, "run1/a")
        assert kill_leftover(mine.pid, "run1/a")
        assert mine.wait(timeout=5) == -9
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- setvar ------------------------------------------------------------------------------------


def test_setvar_sets_the_named_variables(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path, {"script": "echo ip = 10.0.0.1; echo port=80; echo junk; echo ignored=1 >&2",
                                 "variables": ["ip", "port"]}, step_type="setvar")
    result = SetVarExecutor(LocalProcess()).run(ctx)
    assert result.variables == {"ip": "10.0.0.1", "port": "80"}


def test_setvar_fails_when_a_named_variable_is_not_set(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path, {"script": "echo ip=1", "variables": ["ip", "port"]}, step_type="setvar")
    with pytest.raises(StepFailed, match="did not set port"):
        SetVarExecutor(LocalProcess()).run(ctx)


def test_parameters_are_checked(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path, {"script": 3})
    with pytest.raises(ParameterError, match="parameter 'script' must be str"):
        ScriptExecutor(LocalProcess()).run(ctx)
    ctx, _ = make_ctx(tmp_path, {"script": "true", "interpreter": "perl"})
    with pytest.raises(ParameterError, match="interpreter must be one of"):
        ScriptExecutor(LocalProcess()).run(ctx)


# -- http --------------------------------------------------------------------------------------

LOOPBACK_OK = EgressPolicy(["127.0.0.1/32"])  # the test server; the rest of 127/8 stays refused


@dataclass
class Server:
    url: str
    hits: dict[str, int]


@pytest.fixture
def http_server() -> Iterator[Server]:
    hits: dict[str, int] = {}

    async def doc(request: web.Request) -> web.Response:
        return web.json_response({"data": {"items": [{"id": "x1", "n": 3}]}, "ok": True})

    async def echo(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        return web.json_response({"method": request.method, "token": request.headers.get("X-Token"), "body": body},
                                 status=201)

    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status page")

    async def flaky(request: web.Request) -> web.Response:
        hits["flaky"] = hits.get("flaky", 0) + 1
        return web.json_response({"n": hits["flaky"]}, status=500 if hits["flaky"] < 3 else 200)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/doc", doc)
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/flaky", flaky)
    app.router.add_get("/slow", slow)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, shutdown_timeout=0.5)  # do not wait out the slow handler at teardown
    ready = threading.Event()
    port: list[int] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "0.0.0.0", 0)  # so that 127.0.0.2 and the host's addresses reach it too
        loop.run_until_complete(site.start())
        port.append(runner.addresses[0][1])
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield Server(f"http://127.0.0.1:{port[0]}", hits)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


def test_http_get_takes_values_from_the_json_response(tmp_path: Path, http_server: Server) -> None:
    ctx, out = make_ctx(tmp_path, {"url": f"{http_server.url}/doc",
                                   "variables": {"item": "$.data.items[0].id", "n": "data.items[0].n", "ok": "ok"}},
                        step_type="http")
    result = HttpExecutor(LOOPBACK_OK).run(ctx)
    assert result.variables == {"item": "x1", "n": "3", "ok": "true"}
    assert result.details == {"statusCode": 200}
    assert "HTTP 200 OK" in out.text("stderr")


def test_http_post_with_headers_and_json_body(tmp_path: Path, http_server: Server) -> None:
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/echo", "method": "post", "headers": {"X-Token": "t0k"},
                                 "body": {"name": "web", "replicas": 2}, "expectedStatus": [201],
                                 "variables": {"method": "method", "token": "token", "name": "body.name"}},
                      step_type="http")
    assert HttpExecutor(LOOPBACK_OK).run(ctx).variables == {"method": "POST", "token": "t0k", "name": "web"}


def test_http_unexpected_status_fails(tmp_path: Path, http_server: Server) -> None:
    ctx, out = make_ctx(tmp_path, {"url": f"{http_server.url}/status/404"}, step_type="http")
    with pytest.raises(StepFailed, match=r"HTTP 404 Not Found \(expected 2xx\)") as info:
        HttpExecutor(LOOPBACK_OK).run(ctx)
    assert info.value.details == {"statusCode": 404} and "status page" in out.text("stdout")
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/status/200", "expectedStatus": [204, 304]},
                      step_type="http")
    with pytest.raises(StepFailed, match=r"expected 204, 304"):
        HttpExecutor(LOOPBACK_OK).run(ctx)


def test_http_missing_value_and_unreachable_server_fail(tmp_path: Path, http_server: Server) -> None:
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/doc", "variables": {"x": "data.nope"}}, step_type="http")
    with pytest.raises(StepFailed, match=r"no 'data\.nope' in the response"):
        HttpExecutor(LOOPBACK_OK).run(ctx)
    ctx, _ = make_ctx(tmp_path, {"url": "http://127.0.0.1:1/"}, step_type="http")
    with pytest.raises(StepFailed, match="refused"):
        HttpExecutor(LOOPBACK_OK).run(ctx)


@pytest.mark.parametrize("where", ["127.0.0.1", "127.0.0.2", "[::ffff:127.0.0.1]", "own"])
def test_http_to_the_runners_own_host_is_refused_by_default(tmp_path: Path, http_server: Server, where: str) -> None:
    port = http_server.url.rsplit(":", 1)[1]
    host = where if where != "own" else next(str(a) for a in host_addresses() if a.version == 4 and not a.is_loopback)
    ctx, _ = make_ctx(tmp_path, {"url": f"http://{host}:{port}/doc"}, step_type="http")
    with pytest.raises(StepFailed) as refused:
        HttpExecutor().run(ctx)
    assert "http step 's1'" in str(refused.value) and "which http steps may not reach" in str(refused.value)
    assert "`stead operator --http-allow-networks CIDR`" in str(refused.value)
    assert http_server.hits == {}


def test_http_redirects_are_judged_where_they_lead(tmp_path: Path, http_server: Server) -> None:
    port = http_server.url.rsplit(":", 1)[1]
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/redirect?to=http://127.0.0.2:{port}/doc"},
                      step_type="http")
    with pytest.raises(StepFailed, match=r"127\.0\.0\.2 is a loopback address"):
        HttpExecutor(LOOPBACK_OK).run(ctx)


@pytest.mark.parametrize(("address", "why"), [
    ("169.254.169.254", "a link-local"), ("fe80::1", "a link-local"), ("::1", "a loopback"),
    ("::ffff:169.254.169.254", "a link-local"), ("0.0.0.0", "the unspecified"), ("224.0.0.1", "a multicast"),
    ("192.0.2.77", "the runner's own host"),
])
def test_egress_policy_names_the_class_of_a_refused_address(address: str, why: str) -> None:
    policy = EgressPolicy(own=lambda: {ipaddress.ip_address("192.0.2.77")})
    assert why in (policy.refusal(address) or "")
    assert policy.refusal("8.8.8.8") is None and EgressPolicy(["10.0.0.0/8"]).refusal("10.1.2.3") is None
    assert EgressPolicy(["169.254.0.0/16"]).refusal("169.254.169.254") is None


@pytest.mark.parametrize(("address", "why"), [
    ("fd00:ec2::254", "not a public address"),  # AWS IMDS over IPv6
    ("100.100.100.200", "not a public address"),  # Alibaba Cloud's metadata service (shared 100.64/10)
    ("64:ff9b::a9fe:a9fe", "169.254.169.254 (in 64:ff9b::a9fe:a9fe) is a link-local"),  # NAT64
    ("64:ff9b:1::7f00:1", "127.0.0.1 (in 64:ff9b:1::7f00:1) is a loopback"),  # local-use NAT64
    ("2002:a9fe:a9fe::1", "169.254.169.254 (in 2002:a9fe:a9fe::1) is a link-local"),  # 6to4
    ("2002:c000:24d::", "192.0.2.77 (in 2002:c000:24d::) is an address of the runner's own host"),
    ("::127.0.0.1", "127.0.0.1 (in ::7f00:1) is a loopback"),  # IPv4-compatible
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "not a public address"),  # Teredo
    ("10.96.0.1", "not a public address"), ("172.16.0.1", "not a public address"),
    ("192.168.1.1", "not a public address"), ("fc00::1", "not a public address"),
])
def test_egress_is_denied_by_default_to_every_address_that_is_not_public(address: str, why: str) -> None:
    policy = EgressPolicy(own=lambda: {ipaddress.ip_address("192.0.2.77")})
    assert why in (policy.refusal(address) or "")
    for public in ("8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"):
        assert policy.refusal(public) is None, public


def test_service_cidrs_are_refused_even_inside_an_allowed_network() -> None:
    policy = EgressPolicy(["10.0.0.0/8", "fd00::/8"], deny=["10.96.0.0/12", "fd00:10:96::/112"], own=set)
    assert policy.refusal("10.1.2.3") is None and policy.refusal("fd00:1::1") is None
    for cluster_ip in ("10.96.0.1", "10.111.2.3", "::ffff:10.96.0.10", "fd00:10:96::1", "64:ff9b::a60:1"):
        assert "is in the cluster's Service network" in (policy.refusal(cluster_ip) or ""), cluster_ip


def test_a_refused_address_is_never_sent_a_packet(tmp_path: Path, http_server: Server) -> None:
    """Refused before the connect, not after: a tenant cannot tell an open port behind a refused
    address from a closed one."""
    port = int(http_server.url.rsplit(":", 1)[1])
    for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "[::127.0.0.1]"):
        ctx, _ = make_ctx(tmp_path, {"url": f"http://{host}:{port}/doc"}, step_type="http")
        with pytest.raises(StepFailed, match="which http steps may not reach"):
            HttpExecutor(EgressPolicy(deny=["127.0.0.0/8"])).run(ctx)
        closed = make_ctx(tmp_path, {"url": f"http://{host}:1/doc"}, step_type="http")[0]
        with pytest.raises(StepFailed, match="which http steps may not reach"):
            HttpExecutor(EgressPolicy(deny=["127.0.0.0/8"])).run(closed)
    assert http_server.hits == {}


def test_http_timeout_and_abort(tmp_path: Path, http_server: Server) -> None:
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/slow"}, timeout=0.3, step_type="http")
    with pytest.raises(StepFailed, match="timed out"):
        HttpExecutor(LOOPBACK_OK).run(ctx)
    abort = threading.Event()
    ctx, _ = make_ctx(tmp_path, {"url": f"{http_server.url}/slow"}, abort=abort, step_type="http")
    threading.Timer(0.2, abort.set).start()
    started = time.monotonic()
    with pytest.raises(StepAborted):
        HttpExecutor(LOOPBACK_OK).run(ctx)
    assert time.monotonic() - started < 5


def test_json_path() -> None:
    doc = {"a": [{"b": {"c": 1}}, 2], "x": None}
    assert json_path(doc, "a[0].b.c") == 1 and json_path(doc, "$.a[1]") == 2 and json_path(doc, "a[-1]") == 2
    for bad in ("a[5]", "a.b", "zz", "x.y"):
        with pytest.raises(KeyError):
            json_path(doc, bad)


# -- delay -------------------------------------------------------------------------------------


def test_delay_waits_and_honours_abort(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path, {"seconds": "0.05"}, step_type="delay")
    started = time.monotonic()
    DelayExecutor().run(ctx)
    assert time.monotonic() - started >= 0.05
    abort = threading.Event()
    ctx, _ = make_ctx(tmp_path, {"seconds": 30}, abort=abort, step_type="delay")
    threading.Timer(0.1, abort.set).start()
    with pytest.raises(StepAborted):
        DelayExecutor().run(ctx)
    ctx, _ = make_ctx(tmp_path, {"seconds": 30}, timeout=0.1, step_type="delay")
    with pytest.raises(StepFailed, match="timed out"):
        DelayExecutor().run(ctx)


# -- kubernetes --------------------------------------------------------------------------------


class FakeKube:
    """Objects in a dict; "controllers" make them ready after `ready_after` reads."""

    def __init__(self, ready_after: int = 2, job_exit: int = 0) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.reads: dict[tuple[str, str | None, str], int] = {}
        self.ready_after = ready_after
        self.job_exit = job_exit
        self.calls: list[str] = []
        self.deleting: set[tuple[str, str | None, str]] = set()
        self.log_text = "line one\nsecret-free line two\n"
        self.log_limits: list[int | None] = []
        self.refusal: str | None = None  # the message of FailedCreate events on every Job, if any
        self.events_error: KubeApiError | None = None
        self.event_reads = 0

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return kind, namespace, name

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = self._key(kind, namespace, name)
        self.reads[key] = self.reads.get(key, 0) + 1
        if key in self.deleting and self.reads[key] >= self.ready_after:
            self.objects.pop(key, None)
            self.deleting.discard(key)
        obj = self.objects.get(key)
        if obj is None:
            return None
        if self.reads[key] >= self.ready_after:
            self._settle(obj)
        return copy.deepcopy(obj)

    def _settle(self, obj: dict[str, Any]) -> None:
        kind = obj["kind"]
        if kind == "Deployment":
            n = obj["spec"].get("replicas", 1)
            obj["status"] = {"replicas": n, "updatedReplicas": n, "availableReplicas": n, "observedGeneration": 1}
        elif kind == "Job" and "status" not in obj:
            ok = self.job_exit == 0
            obj["status"] = {"conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}]}
            ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
            self.objects[("Pod", ns, name + "-x")] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name + "-x", "namespace": ns, "labels": {"job-name": name},
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": self.job_exit}}}]},
            }

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(manifest))
        key = self._key(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in self.objects:
            raise KubeApiError(409, "exists")
        obj["metadata"]["uid"] = f"uid-{len(self.objects)}"
        obj["metadata"]["generation"] = 1
        self.objects[key] = obj
        self.calls.append(f"create {obj['kind']}")
        return copy.deepcopy(obj)

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(f"apply {manifest['kind']}")
        key = self._key(manifest["kind"], manifest["metadata"].get("namespace"), manifest["metadata"]["name"])
        self.objects[key] = {**copy.deepcopy(dict(manifest)), "metadata": {**manifest["metadata"], "generation": 1}}
        self.reads[key] = 0
        return copy.deepcopy(self.objects[key])

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        key = self._key(kind, namespace, name)
        self.calls.append(f"delete {kind}")
        if key not in self.objects:
            return False
        self.deleting.add(key)
        self.reads[key] = 0
        return True

    def namespaced(self, api_version: str, kind: str) -> bool:
        """Discovery of a cluster serving a cluster-scoped custom kind and the CSR, VAP (no fixed list knows)."""
        self.calls.append(f"discover {kind}")
        if kind == "Nonesuch":
            raise KubeApiError(400, f"the API server serves no {kind} in {api_version}")
        return kind not in ("CertificateSigningRequest", "ValidatingAdmissionPolicy", "ClusterWidget", "Namespace")

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        name, _, value = label_selector.partition("=")
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                if k == kind and ns == namespace and o["metadata"].get("labels", {}).get(name) == value]

    def logs(self, namespace: str, pod: str, limit_bytes: int | None = None) -> str:
        self.log_limits.append(limit_bytes)
        raw = self.log_text.encode()
        return (raw if limit_bytes is None else raw[:limit_bytes]).decode(errors="replace")

    def events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """What the Job controller records when it cannot create a Job's pod (and a stale event of an
        earlier object of the same name, which must not count)."""
        self.event_reads += 1
        if self.events_error is not None:
            raise self.events_error
        obj = self.objects.get(self._key(kind, namespace, name))
        if obj is None or self.refusal is None:
            return []
        involved = {"kind": kind, "namespace": namespace, "name": name}
        return [
            {"reason": "FailedCreate", "type": "Warning", "lastTimestamp": "2026-01-01T00:00:09Z",
             "message": "Error creating: stale", "involvedObject": {**involved, "uid": "an-older-job"}},
            {"reason": "SuccessfulCreate", "type": "Normal", "lastTimestamp": "2026-01-01T00:00:01Z",
             "message": "Created pod: x", "involvedObject": {**involved, "uid": obj["metadata"]["uid"]}},
            {"reason": "FailedCreate", "type": "Warning", "lastTimestamp": "2026-01-01T00:00:02Z",
             "message": "Error creating: first", "involvedObject": {**involved, "uid": obj["metadata"]["uid"]}},
            {"reason": "FailedCreate", "type": "Warning", "lastTimestamp": "2026-01-01T00:00:05Z",
             "message": f"Error creating: {self.refusal}",
             "involvedObject": {**involved, "uid": obj["metadata"]["uid"]}},
        ]


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {a: b}
"""


def test_kubernetes_apply_waits_for_readiness_then_delete_waits_for_absence(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=3)
    ctx, out = make_ctx(tmp_path, {"manifest": DEPLOYMENT, "namespace": "apps", "pollIntervalSeconds": 0.01},
                        timeout=10, step_type="kubernetes")
    result = KubernetesExecutor(kube).run(ctx)
    assert "ready" in result.message
    assert ("Deployment", "apps", "web") in kube.objects and ("ConfigMap", "apps", "web-config") in kube.objects
    assert "ready Deployment apps/web" in out.text()
    ctx, out = make_ctx(tmp_path, {"manifest": DEPLOYMENT, "namespace": "apps", "action": "delete",
                                   "pollIntervalSeconds": 0.01}, timeout=10, step_type="kubernetes")
    KubernetesExecutor(kube).run(ctx)
    assert not kube.objects
    assert kube.calls[-2:] == ["delete ConfigMap", "delete Deployment"]


def test_kubernetes_wait_times_out_naming_the_object(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=10**6)
    ctx, _ = make_ctx(tmp_path, {"manifest": DEPLOYMENT, "namespace": "apps", "pollIntervalSeconds": 0.01},
                      timeout=0.2, step_type="kubernetes")
    with pytest.raises(StepFailed, match="waiting: Deployment apps/web: 0/2 replicas ready"):
        KubernetesExecutor(kube).run(ctx)


def test_kubernetes_without_client_and_with_bad_manifest(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path, {"manifest": DEPLOYMENT}, step_type="kubernetes")
    with pytest.raises(ParameterError, match="need a Kubernetes client"):
        KubernetesExecutor(None).run(ctx)
    ctx, _ = make_ctx(tmp_path, {"manifest": "kind: X\nmetadata: {name: a}"}, step_type="kubernetes")
    with pytest.raises(ParameterError, match="document 0 has no apiVersion/kind"):
        KubernetesExecutor(FakeKube()).run(ctx)


CSR = """
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: mine}
spec: {signerName: kubernetes.io/kube-apiserver-client, usages: [client auth], request: eA==}
"""


@pytest.mark.parametrize(("manifest", "problem"), [
    (DEPLOYMENT + "---\n" + CSR, "document 2 (CertificateSigningRequest mine): CertificateSigningRequest is "
     "cluster-scoped; this step may only touch objects in namespace apps"),
    ("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}",
     "document 0 (ValidatingAdmissionPolicy p): ValidatingAdmissionPolicy is cluster-scoped"),
    ("apiVersion: example.com/v1\nkind: ClusterWidget\nmetadata: {name: w}", "ClusterWidget is cluster-scoped"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: kube-system}",
     "document 0 (ConfigMap c): names namespace kube-system; this step may only touch objects in namespace apps"),
    ("apiVersion: example.com/v1\nkind: Nonesuch\nmetadata: {name: n}",
     "Nonesuch of example.com/v1: 400: the API server serves no Nonesuch"),
])
@pytest.mark.parametrize("action", ["apply", "delete"])
def test_kubernetes_confined_to_a_namespace_refuses_the_whole_manifest_before_sending_anything(
    tmp_path: Path, manifest: str, problem: str, action: str,
) -> None:
    kube = FakeKube()
    ctx, _ = make_ctx(tmp_path, {"manifest": manifest, "namespace": "apps", "namespaceOnly": True,
                                 "action": action}, step_type="kubernetes")
    with pytest.raises(ParameterError, match=re.escape(problem)):
        KubernetesExecutor(kube).run(ctx)
    assert [c for c in kube.calls if not c.startswith("discover ")] == [] and not kube.objects


def test_kubernetes_confined_to_a_namespace_applies_namespaced_objects_there(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=1)
    custom = "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
    ctx, _ = make_ctx(tmp_path, {"manifest": DEPLOYMENT + custom, "namespace": "apps", "namespaceOnly": True,
                                 "pollIntervalSeconds": 0.01}, timeout=10, step_type="kubernetes")
    KubernetesExecutor(kube).run(ctx)
    assert set(kube.objects) == {("Deployment", "apps", "web"), ("ConfigMap", "apps", "web-config"),
                                 ("Widget", "apps", "w")}
    ctx, _ = make_ctx(tmp_path, {"manifest": DEPLOYMENT, "namespaceOnly": True}, step_type="kubernetes")
    with pytest.raises(ParameterError, match="namespaceOnly needs the parameter 'namespace'"):
        KubernetesExecutor(kube).run(ctx)


@pytest.mark.parametrize(
    ("obj", "ready"),
    [
        ({"kind": "StatefulSet", "spec": {"replicas": 2}, "status": {"readyReplicas": 2}}, True),
        ({"kind": "StatefulSet", "spec": {"replicas": 2},
          "status": {"readyReplicas": 2, "currentRevision": "a", "updateRevision": "b"}}, False),
        ({"kind": "DaemonSet", "status": {"desiredNumberScheduled": 3, "numberReady": 3,
                                           "updatedNumberScheduled": 2}}, False),
        ({"kind": "Pod", "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, True),
        ({"kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}}, False),
        ({"kind": "Environment", "status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
        ({"kind": "ConfigMap"}, True),
        ({"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 1},
          "status": {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1}}, False),
    ],
)
def test_readiness_rules(obj: dict[str, Any], ready: bool) -> None:
    assert readiness(obj)[0] is ready


def test_readiness_terminal_failures() -> None:
    with pytest.raises(StepFailed, match="Job j failed"):
        readiness({"kind": "Job", "metadata": {"name": "j"},
                   "status": {"conditions": [{"type": "Failed", "status": "True"}]}})
    with pytest.raises(StepFailed, match="stalled"):
        readiness({"kind": "App", "metadata": {"name": "a"},
                   "status": {"conditions": [{"type": "Stalled", "status": "True"}]}})


# -- exec as a Kubernetes Job --------------------------------------------------------------------


def test_exec_as_a_job_in_the_namespace_with_its_service_account(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=2)
    backend = KubernetesJob(kube, "team-a", service_account="runner", image="img:1", poll_interval=0.01)
    ctx, out = make_ctx(tmp_path, {"script": "echo hi", "env": {"TOKEN": "abc"}}, variables={"app": "web"})
    assert ScriptExecutor(backend).run(ctx).exit_code == 0
    jobs = [o for (k, _, _), o in kube.objects.items() if k == "Job"]
    secrets = [o for (k, _, _), o in kube.objects.items() if k == "Secret"]
    assert len(jobs) == 1 and len(secrets) == 1
    job, secret = jobs[0], secrets[0]
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "team-a" and pod["serviceAccountName"] == "runner"
    assert pod["containers"][0]["image"] == "img:1"
    # the script and the environment are in the Secret, owned by the Job, not in the Job's spec
    assert "echo hi" not in str(job) and "abc" not in str(job)
    assert secret["stringData"]["script"] == "echo hi" and secret["stringData"]["env-TOKEN"] == "abc"
    assert secret["stringData"]["env-app"] == "web"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert out.text() == "line one\nsecret-free line two"


def test_a_restarted_runner_waits_for_the_job_of_its_attempt_instead_of_starting_another(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=2, job_exit=3)
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01)
    ctx, _ = make_ctx(tmp_path, {"script": "exit 3"})
    job, _ = backend.manifests(ctx, "sh", "exit 3", {})
    kube.create(job)  # the Job the killed runner had created
    with pytest.raises(StepFailed) as info:
        ScriptExecutor(backend).run(ctx)
    assert info.value.exit_code == 3
    assert kube.calls == ["create Job"]


def test_job_abort_deletes_the_job(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=10**6)
    abort = threading.Event()
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01)
    ctx, _ = make_ctx(tmp_path, {"script": "sleep 100"}, abort=abort)
    threading.Timer(0.1, abort.set).start()
    with pytest.raises(StepAborted):
        ScriptExecutor(backend).run(ctx)
    assert kube.calls[-1] == "delete Job"


def test_the_job_pod_is_restricted_and_bounded(tmp_path: Path) -> None:
    """Pod Security "restricted", no service-account token, requests and limits, size-limited scratch space."""
    backend = KubernetesJob(FakeKube(), "team-a", run_as_user=1234, requests={"cpu": "10m"},
                            limits={"cpu": "2", "memory": "1Gi", "ephemeral-storage": "2Gi"}, work_size_limit="3Gi")
    ctx, _ = make_ctx(tmp_path, {"script": "true"})
    job, _ = backend.manifests(ctx, "sh", "true", {"A": "1"})
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1234, "runAsGroup": 1234, "fsGroup": 1234,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "readOnlyRootFilesystem": True, "runAsNonRoot": True}
    assert container["resources"] == {"requests": {"cpu": "10m"},
                                      "limits": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "2Gi"}}
    # writable: /work (the working directory and HOME) and /tmp, both emptyDirs with a size limit
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/work"]]["emptyDir"] == {"sizeLimit": "3Gi"}
    assert volumes[mounts["/tmp"]]["emptyDir"] == {"sizeLimit": "256Mi"}
    assert {"name": "HOME", "value": "/work"} in container["env"]
    assert [v for v in pod["volumes"] if set(v) - {"name", "emptyDir", "secret"}] == []

    # the defaults
    job, _ = KubernetesJob(FakeKube(), "team-a").manifests(ctx, "sh", "true", {"HOME": "/elsewhere"})
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 65532
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
        "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}}
    assert [e["name"] for e in pod["containers"][0]["env"]] == ["HOME"]  # the step's own HOME, from the Secret
    assert "valueFrom" in pod["containers"][0]["env"][0]
    assert all(v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v)
    with pytest.raises(ValueError, match="non-root"):
        KubernetesJob(FakeKube(), "team-a", run_as_user=0)


def test_a_job_whose_pods_cannot_be_created_fails_the_step_with_the_reason(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=10**6)  # no controller ever reports a pod
    kube.refusal = ('pods "stead-step-1-abcde" is forbidden: violates PodSecurity "restricted:latest": '
                    'runAsNonRoot != true')
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01, failed_create_grace=0.3)
    ctx, _ = make_ctx(tmp_path, {"script": "echo hi", "env": {"TOKEN": "tok-7f3a"}}, timeout=30)
    started = time.monotonic()
    with pytest.raises(StepFailed) as info:
        ScriptExecutor(backend).run(ctx)
    elapsed = time.monotonic() - started
    name = backend.job_name(ctx)
    assert str(info.value) == (
        f'Job {name}: pods cannot be created: FailedCreate: pods "stead-step-1-abcde" is forbidden: '
        'violates PodSecurity "restricted:latest": runAsNonRoot != true (Job deleted)')
    assert 0.3 <= elapsed < 10, elapsed  # the grace, then at once: not the step's 30 s timeout
    assert kube.calls[-1] == "delete Job" and ("Job", "team-a", name) in kube.deleting
    assert "tok-7f3a" not in str(info.value)


def test_failed_create_events_do_not_fail_a_job_that_has_its_pod(tmp_path: Path) -> None:
    """A transient FailedCreate (the quota freed a moment later): once the pod exists, the Job's own outcome counts."""
    kube = FakeKube(ready_after=10**6)
    kube.refusal = "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01, failed_create_grace=0.0, no_pod_timeout=0.0)
    ctx, _ = make_ctx(tmp_path, {"script": "echo hi"}, timeout=30)
    name = backend.job_name(ctx)
    job, _ = backend.manifests(ctx, "sh", "echo hi", {})
    kube.create(job)
    kube.objects[("Job", "team-a", name)]["status"] = {"active": 1}
    threading.Timer(0.3, lambda: kube.objects[("Job", "team-a", name)].update(
        status={"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})).start()
    assert ScriptExecutor(backend).run(ctx).exit_code == 0
    assert "delete Job" not in kube.calls and kube.event_reads == 0


def test_unreadable_events_fail_the_step_after_the_bound_saying_why(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=10**6)
    kube.refusal = "exceeded quota"
    kube.events_error = KubeApiError(403, 'events is forbidden: User "system:serviceaccount:team-a:default" '
                                          'cannot list resource "events" in API group "" in the namespace "team-a"')
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01, failed_create_grace=0.1, no_pod_timeout=0.6)
    ctx, _ = make_ctx(tmp_path, {"script": "echo hi", "env": {"TOKEN": "tok-7f3a"}}, timeout=30)
    started = time.monotonic()
    with pytest.raises(StepFailed) as info:
        ScriptExecutor(backend).run(ctx)
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert 0.6 <= elapsed < 10, elapsed
    assert f"Job {backend.job_name(ctx)}: no pod was created in " in message
    assert "the runner cannot read the Job's events" in message and "403" in message
    assert message.endswith("(Job deleted)") and kube.calls[-1] == "delete Job"
    assert kube.event_reads > 1  # tried again until the bound (rights may have been granted meanwhile)
    assert "tok-7f3a" not in message


def test_job_logs_are_read_with_a_limit_and_a_cut_is_said(tmp_path: Path) -> None:
    kube = FakeKube(ready_after=2)
    kube.log_text = "first line\n" + "x" * 100 + "\n"
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01, log_limit_bytes=20)
    ctx, out = make_ctx(tmp_path, {"script": "echo hi"}, timeout=30)
    ScriptExecutor(backend).run(ctx)
    assert kube.log_limits == [21]  # one byte more than kept: a longer log is known to be cut
    assert out.text("stdout") == "first line\n" + "x" * 9
    assert "was cut: only its first 20 bytes were read" in out.text("stderr")

    kube = FakeKube(ready_after=2)
    kube.log_text = "x" * 20 + "\n"  # exactly the limit: whole, nothing to say
    backend = KubernetesJob(kube, "team-a", poll_interval=0.01, log_limit_bytes=21)
    ctx, out = make_ctx(tmp_path, {"script": "echo hi"}, timeout=30)
    ScriptExecutor(backend).run(ctx)
    assert out.text("stdout") == "x" * 20 and out.text("stderr") == ""
    assert KubernetesJob(FakeKube(), "team-a").log_limit_bytes == 1024 * 1024


def test_http_retries_with_interval_through_the_engine(tmp_path: Path, http_server: Server) -> None:
    from pipelines.control import read_status
    from pipelines.model import Workflow
    from pipelines.paths import RunPaths
    from pipelines.runner import run_workflow

    workflow = Workflow.model_validate({"steps": [
        {"id": "call", "type": "http", "retries": 3, "retryIntervalSeconds": 0.05,
         "parameters": {"url": f"{http_server.url}/flaky", "variables": {"n": "n"}}},
    ]})
    executors = default_executors(http_allow=["127.0.0.1/32"])
    assert run_workflow(workflow, "h1", tmp_path, executors=executors).phase == "Succeeded"
    status = read_status(RunPaths(tmp_path, "h1"))
    assert status is not None
    (record,) = status["steps"]
    assert (record["attempts"], record["variables"], record["details"]) == (3, {"n": "3"}, {"statusCode": 200})
    assert http_server.hits["flaky"] == 3


@pytest.mark.parametrize("offset", [1, 5, 9, 16])
def test_a_secret_straddling_the_64k_cut_of_a_long_line_is_not_in_clear(tmp_path: Path, offset: int) -> None:
    from pipelines.hooks import Masker

    secret = "straddling-secret-0123456789"
    masker = Masker()
    masker.add(secret)
    start = 64 * 1024 - offset  # the secret begins `offset` bytes before the cut
    ctx, out = make_ctx(tmp_path, {"script": f"printf '%0{start}d{secret}%070000d\\n' 0 0"})
    ctx.output = lambda line, stream: out(masker(line), stream)
    ctx.safe_cut, ctx.mask_reach = masker.safe_cut, masker.longest
    ScriptExecutor(LocalProcess()).run(ctx)
    pieces = [line for stream, line in out.lines if stream == "stdout"]
    assert len(pieces) >= 2
    for piece in pieces:
        for part in (secret[:offset], secret[offset:]):
            assert not piece.endswith(part) or len(part) < 4
        assert secret[4:-4] not in piece
    assert sum(piece.count("********") for piece in pieces) == 1
