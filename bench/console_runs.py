"""The console's run view (issue 29): time to first paint, and stream latency from a task's output line to
the page.

It starts its own LocalControlPlane and the real operator (`harness.py`), then `stead console` against them
(`--stead-api` the operator's API server), a user (a ServiceAccount bound to Stead's kinds and `view` in the
benchmark's namespace, signing in with its token) and Debian's Chromium through Playwright. An App is
launched whose create action has one task that prints `T <epoch seconds>` every `--interval` seconds,
`--lines` times:

- **stream latency**, for an ActionRun (a Local substrate) and a GraphRun (one sshd node of tests/sshd.py
  on 127.0.0.2): the run's page is opened while the task runs and its output pane opened; a
  MutationObserver in the page notes when each `T` line first appears. Latency = that moment minus the
  time the task printed (same host, same clock). Both come through the `output` topic, which reads the
  operator API's output route of the run's kind every 0.5 s (`/api/v1/graphruns/RUN/output/TASK/`,
  `/api/v1/actionruns/RUN/output/STEP/`), so both stream while the task runs.
- **first paint**: `--paints` times, a fresh tab opens the finished run's page; the figure is the page's
  `performance.now()` (milliseconds since navigation started) when the first task row is in the DOM,
  noted by a requestAnimationFrame poll (so within a frame of the paint).

    .venv/bin/python bench/console_runs.py [--lines 20] [--interval 1.0] [--paints 10] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import local_plane, operator_session
from bench.pipeline_throughput import BIN, OperatorProcess, Target, child_env, create_namespace, free_port, log
from operators import API_VERSION
from operators.runtime.kube.client import ApiError, KubeClient, custom_path
from tests.sshd import SshNodes, ssh_nodes_in

PREFIX = "bench-console"
CHROMIUM = "/usr/bin/chromium"
OBSERVER = """() => {
  window.__seen = [];
  const seen = new Set();
  const note = () => {
    for (const pre of document.querySelectorAll('pre.output')) {
      for (const line of pre.textContent.split('\\n')) {
        if (line.startsWith('T ') && !seen.has(line)) {
          seen.add(line);
          window.__seen.push([parseFloat(line.slice(2)), Date.now() / 1000]);
        }
      }
    }
  };
  new MutationObserver(note).observe(document.body, {childList: true, subtree: true, characterData: true});
  note();
}"""


async def user_token(kube: KubeClient, namespace: str) -> str:
    """A ServiceAccount of `namespace` that may use Stead's kinds and read the namespace: its token."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + namespace
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "watcher"}})
    await kube.request("POST", f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "stead"},
        "rules": [{"apiGroups": ["stead.dev"], "resources": ["*"], "verbs": ["*"]}]})
    for name, ref in (("stead", {"kind": "Role", "name": "stead"}), ("view", {"kind": "ClusterRole", "name": "view"})):
        await kube.request("POST", f"{rbac}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", **ref},
            "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": namespace}]})
    answer = await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/watcher/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    return str(answer["status"]["token"])


def talker(lines: int, interval: float) -> str:
    return f'for i in $(seq 1 {lines}); do echo "T $(date +%s.%N)"; sleep {interval}; done'


async def launch(kube: KubeClient, namespace: str, script: str) -> str:
    """The App (and its Blueprint) whose create run prints the time stamps: the run's name."""
    spec = {"active": True, "substrates": [{"name": "host", "type": "Local"}],
            "services": [{"name": "S", "actions": [
                {"name": "create", "tasks": [{"name": "talk", "type": "exec", "script": script}]}]}],
            "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}]}
    await kube.request("POST", custom_path("blueprints", namespace), {
        "apiVersion": API_VERSION, "kind": "Blueprint", "metadata": {"name": "talker"}, "spec": spec})
    for _ in range(300):  # the App is refused until the Blueprint is Ready
        if await _ready(kube, "blueprints", namespace, "talker"):
            break
        await asyncio.sleep(0.2)
    await kube.request("POST", custom_path("apps", namespace), {
        "apiVersion": API_VERSION, "kind": "App", "metadata": {"name": "talker"}, "spec": {"blueprint": "talker"}})
    return "talker-create"


async def _ready(kube: KubeClient, plural: str, namespace: str, name: str) -> bool:
    found = await kube.request("GET", custom_path(plural, namespace, name))
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (found.get("status") or {}).get("conditions") or [])


async def run_state(kube: KubeClient, namespace: str, name: str, plural: str = "actionruns") -> str:
    try:
        found = await kube.request("GET", custom_path(plural, namespace, name))
    except ApiError:  # not created yet
        return ""
    return str((found.get("status") or {}).get("state") or "")


async def graph_run(kube: KubeClient, namespace: str, nodes: SshNodes, script: str) -> str:
    """An Environment of one sshd node (tests/sshd.py), a graph of one shell task printing the time stamps,
    and a GraphRun of it: the run's name."""
    core, rbac = f"/api/v1/namespaces/{namespace}", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    for name, data in (("key", {"id_ed25519": nodes.private_key}), ("hosts", {"known_hosts": nodes.known_hosts})):
        await kube.request("POST", f"{core}/secrets", {"apiVersion": "v1", "kind": "Secret",
                                                        "metadata": {"name": name}, "stringData": data})
    await kube.request("POST", f"{rbac}/roles", {  # runs read them as the namespace's default account
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "ssh"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["key", "hosts"]}]})
    await kube.request("POST", f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "ssh"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ssh"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})
    await kube.request("POST", custom_path("environments", namespace), {
        "apiVersion": API_VERSION, "kind": "Environment", "metadata": {"name": "env"},
        "spec": {"release": "r1", "nodes": [{"name": "ctl", "roles": ["controller"], "address": "127.0.0.2"}],
                 "ssh": {"user": nodes.user, "port": nodes.port, "privateKey": {"name": "key", "key": "id_ed25519"},
                         "knownHosts": {"name": "hosts", "key": "known_hosts"}}}})
    await kube.request("POST", custom_path("deploymentgraphs", namespace), {
        "apiVersion": API_VERSION, "kind": "DeploymentGraph", "metadata": {"name": "talk"},
        "spec": {"release": "r1", "tasks": [{"id": "talk", "type": "shell", "version": "2.1.0",
                                             "roles": ["controller"], "parameters": {"cmd": script}}]}})
    for _ in range(300):
        if await _ready(kube, "environments", namespace, "env") and \
                await _ready(kube, "deploymentgraphs", namespace, "talk"):
            break
        await asyncio.sleep(0.2)
    await kube.request("POST", custom_path("graphruns", namespace), {
        "apiVersion": API_VERSION, "kind": "GraphRun", "metadata": {"name": "talk"},
        "spec": {"environment": "env", "graphs": [{"type": "default"}]}})
    return "talk"


async def follow(context: Any, kube: KubeClient, url: str, namespace: str, plural: str, run: str, row: str,
                 within: float) -> list[float]:
    """Open the run's page (a tab of its own) while it runs, open the task's output, note when each stamp
    appears: the latencies."""
    await wait_for(lambda: _started(kube, namespace, run, plural), 60, f"{run} to start")
    page = await context.new_page()
    await page.goto(f"{url}#/ns/{namespace}/{plural}/{run}")
    found = page.locator(f'[data-test="{row}"]')
    await found.wait_for(timeout=30000)
    await page.evaluate(OBSERVER)
    await found.click()
    await wait_for(lambda: _ended(kube, namespace, run, plural), within, f"{run} to end")
    await asyncio.sleep(3)  # the last line's way to the page
    seen = await page.evaluate("window.__seen")
    await page.close()
    return [round(shown - printed, 3) for printed, shown in seen]


async def wait_for(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f}s")
        await asyncio.sleep(0.2)


async def measure(args: argparse.Namespace, target: Target, workdir: Path) -> dict[str, list[float]]:
    """Both runs followed in one signed-in page, then the first paints in fresh tabs."""
    from playwright.async_api import async_playwright

    async with operator_session(args, target, workdir, PREFIX, ("--ssh-allow", "127.0.0.0/8")) as session:
        kube = session.kube
        api_port = session.operator.argv[session.operator.argv.index("--config-api-port") + 1]
        port = free_port()
        console = OperatorProcess("console", [
            *args.stead_command.split(), "console", "--kubeconfig", str(target.kubeconfig), "--port", str(port),
            "--stead-api", f"https://127.0.0.1:{api_port}",
            "--stead-api-ca", str(workdir / "operator" / "config-api" / "ca.crt")],
            child_env(target.kubeconfig, args.stead_pythonpath), f"http://127.0.0.1:{port}/console/healthz",
            workdir / "console.log")
        await console.start(target, args.start_timeout)
        try:
            namespace = await create_namespace(kube, PREFIX)
            token = await user_token(kube, namespace)
            run = await launch(kube, namespace, talker(args.lines, args.interval))
            url = f"http://127.0.0.1:{port}/console/"
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
                context = await browser.new_context(viewport={"width": 1280, "height": 900})
                page = await context.new_page()
                await page.goto(url)
                await page.fill('[data-test="token"]', token)
                await page.click('[data-test="signin-submit"]')
                await page.wait_for_selector('[data-test="user"]')
                within = args.lines * args.interval + 60
                results = {"actionrun_s": await follow(context, kube, url, namespace, "actionruns", run,
                                                       "task-S/talk@tier-0", within)}
                with ssh_nodes_in(workdir / "ssh") as nodes:
                    graph = await graph_run(kube, namespace, nodes, talker(args.lines, args.interval))
                    results["graphrun_s"] = await follow(context, kube, url, namespace, "graphruns", graph,
                                                         "task-talk@ctl", within)
                hash_ = f"#/ns/{namespace}/actionruns/{run}"
                paints = []
                for _ in range(args.paints):
                    tab = await context.new_page()
                    await tab.goto(url + hash_)
                    painted = await tab.wait_for_function(
                        "() => document.querySelector('[data-test=\"run-tree\"] tr.task') && performance.now()",
                        polling="raf", timeout=30000)
                    paints.append(round(float(await painted.json_value()), 1))
                    await tab.close()
                await browser.close()
            return {**results, "first_paint_ms": paints}
        finally:
            await console.stop()


async def _started(kube: KubeClient, namespace: str, run: str, plural: str) -> bool:
    return await run_state(kube, namespace, run, plural) in ("Running", "Succeeded", "Failed")


async def _ended(kube: KubeClient, namespace: str, run: str, plural: str) -> bool:
    return await run_state(kube, namespace, run, plural) in ("Succeeded", "Failed", "Aborted")


def summary(name: str, values: Sequence[float], unit: str) -> str:
    if not values:
        return f"{name}: no samples"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"{name}: n={len(values)} median {statistics.median(values):.3f}{unit} p90 {p90:.3f}{unit} "
            f"min {ordered[0]:.3f}{unit} max {ordered[-1]:.3f}{unit}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=20, help="time stamps the task prints (default 20)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between them (default 1)")
    parser.add_argument("--paints", type=int, default=10, help="first paints measured (default 10)")
    parser.add_argument("--workdir", type=Path, help="keep the logs and the control plane's home here")
    parser.add_argument("--stead-command", default=str(BIN / "stead"))
    parser.add_argument("--stead-pythonpath")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.set_defaults(stead_webhook="local")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="stead-console-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = None
    try:
        with local_plane(workdir) as (target, _):
            results = asyncio.run(measure(args, target, workdir))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if results is None:
        return 1
    for kind in ("actionrun", "graphrun"):
        seen = results[f"{kind}_s"]
        print(summary(f"stream latency, {kind} output line -> page ({len(seen)} of {args.lines} lines seen)", seen,
                      "s"))
    print(summary("time to first paint of a run view (navigation -> first task row)", results["first_paint_ms"],
                  "ms"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
