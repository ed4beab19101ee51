"""The console's cost (issue 29): its CPU and memory while N run pages are open (bench/console_runs.py
measures a run page's first paint and its output's latency).

It starts its own local control plane, the real operator (`bench/harness.py`) and `stead console` as a
process of its own, makes a ServiceAccount whose token signs in, and an App whose create run prints a line
every `--tick` seconds for `--seconds`. Debian's chromium (Playwright) then shows that run's page in `--pages`
tabs of one browser (one stream, shared by the tabs), then in `--pages` browsers of one tab each (a stream
each); for each, the console process's CPU time (utime + stime) and RSS are sampled from /proc over
`--window` seconds while the run prints, beside its RSS before any page was open.

    .venv/bin/python bench/console_load.py [--pages 10] [--seconds 180] [--tick 0.5] [--window 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import local_plane, operator_session
from bench.pipeline_throughput import BIN, free_port, log
from operators import API_VERSION
from operators.calm.models import APP, BLUEPRINT
from operators.runtime.kube.api import core_path, custom_path

NAMESPACE = "console-bench-views"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

def cpu_and_rss(pid: int) -> tuple[float, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    return cpu, rss


def blueprint(seconds: float, tick: float) -> dict[str, Any]:
    count = max(1, int(seconds / tick))
    script = f"for i in $(seq {count}); do echo \"line $i\"; sleep {tick}; done; echo done"
    return {"active": True, "substrates": [{"name": "host", "type": "Local"}],
            "services": [{"name": "S", "actions": [
                {"name": "create", "tasks": [{"name": "ticker", "type": "exec", "script": script}]}]}],
            "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}]}


async def scenario(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with local_plane(workdir) as (target, _binaries):
        async with operator_session(args, target, workdir, NAMESPACE.rsplit("-", 1)[0]) as session:
            kube = session.kube
            argv = session.operator.argv
            api_port = argv[argv.index("--config-api-port") + 1]
            await kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            await kube.request("POST", core_path("serviceaccounts", NAMESPACE), {"metadata": {"name": "viewer"}})
            await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings", {
                "metadata": {"name": "viewer-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": NAMESPACE}]})
            token = (await kube.request("POST", core_path("serviceaccounts", NAMESPACE, "viewer") + "/token", {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600}}))["status"]["token"]
            port = free_port()
            console_log = (workdir / "console.log").open("wb")
            console = await asyncio.create_subprocess_exec(
                str(BIN / "stead"), "console", "--kubeconfig", str(target.kubeconfig), "--port", str(port),
                "--stead-api", f"https://127.0.0.1:{api_port}",
                "--stead-api-ca", str(workdir / "operator" / "config-api" / "ca.crt"),
                stdout=console_log, stderr=subprocess.STDOUT)
            try:
                await create(kube, blueprint(args.seconds, args.tick), args.app)
                results = await asyncio.to_thread(browse, args, port, token, console.pid)
            finally:
                console.terminate()
                await asyncio.wait_for(console.wait(), 15)
    return results


def browse(args: argparse.Namespace, port: int, token: str, console_pid: int) -> dict[str, Any]:
    import urllib.request

    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{port}/console/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(base + "healthz", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    run = f"{args.app}-create"  # the App's create run
    hash_ = f"#/ns/{NAMESPACE}/actionruns/{run}"
    out: dict[str, Any] = {}
    with sync_playwright() as playwright:
        playwright.selectors.set_test_id_attribute("data-test")
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        context = browser.new_context()
        page = context.new_page()
        page.goto(base)
        page.get_by_test_id("token").fill(token)
        page.get_by_test_id("signin-submit").click()
        page.get_by_test_id("user").wait_for()
        out["idle_rss_mib"] = cpu_and_rss(console_pid)[1] / 2**20
        # one browser with N tabs (one stream, shared), then N browsers of one tab each (N streams)
        shared = [context.new_page() for _ in range(args.pages)]
        out["one_browser"] = sample(args, console_pid, shared, base + hash_)
        for tab in shared:
            tab.close()
        browsers = []
        for _ in range(args.pages if args.separate else 0):
            other = browser.new_context()
            tab = other.new_page()
            tab.goto(base)
            answers: list[str] = []
            tab.on("response", lambda r, answers=answers: answers.append(f"{r.request.method} {r.url} {r.status}"))
            tab.get_by_test_id("token").fill(token)
            tab.get_by_test_id("signin-submit").click()
            try:
                tab.get_by_test_id("user").wait_for(timeout=15_000)
            except PlaywrightTimeout:
                raise SystemExit(f"browser {len(browsers) + 1} did not sign in: {answers}") from None
            browsers.append(tab)
        if browsers:
            out["separate_browsers"] = sample(args, console_pid, browsers, base + hash_)
        browser.close()
    return out


def sample(args: argparse.Namespace, console_pid: int, tabs: list[Any], url: str) -> dict[str, Any]:
    """The console's CPU (percent of one core) and RSS (MiB, at the end and the peak) over `--window` seconds
    while `tabs` show the run's page."""
    for tab in tabs:
        tab.goto(url)
        tab.get_by_test_id("object-name").wait_for()
    cpu0, _ = cpu_and_rss(console_pid)
    rss_peak = 0
    started = time.monotonic()
    while time.monotonic() - started < args.window:
        tabs[0].wait_for_timeout(1000)
        rss_peak = max(rss_peak, cpu_and_rss(console_pid)[1])
    cpu1, rss = cpu_and_rss(console_pid)
    return {"pages": len(tabs), "cpu_percent": round(100 * (cpu1 - cpu0) / (time.monotonic() - started), 2),
            "rss_mib": round(rss / 2**20, 1), "rss_peak_mib": round(rss_peak / 2**20, 1)}


async def create(kube: Any, spec: dict[str, Any], name: str) -> None:
    body = {"apiVersion": API_VERSION, "kind": BLUEPRINT.kind,
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
    await kube.request("POST", custom_path(BLUEPRINT.plural, NAMESPACE), body)
    app = {"apiVersion": API_VERSION, "kind": APP.kind, "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"blueprint": name}}
    for _ in range(60):
        try:
            await kube.request("POST", custom_path(APP.plural, NAMESPACE), app)
            return
        except Exception:  # the blueprint not compiled yet: the webhook refuses
            await asyncio.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the run prints")
    parser.add_argument("--tick", type=float, default=0.5)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--separate", action="store_true", help="also N browsers of one tab each (N streams)")
    parser.add_argument("--app", default="ticker")
    parser.add_argument("--stead-command", default=str(BIN / "stead"))
    parser.add_argument("--stead-pythonpath")
    parser.add_argument("--stead-webhook", default="on")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stead-console-bench-") as tmp:
        results = asyncio.run(scenario(args, Path(tmp)))
    log(json.dumps(results))
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    for key, value in results.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
