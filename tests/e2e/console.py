"""The console in a real browser: `stead console` as a process on the test run's control plane and operator,
Debian's Chromium driven by Playwright, and users that are ServiceAccounts signing in with their tokens.

A pytest plugin (tests/conftest.py names it), so every e2e module can ask for `console`, `browser` and
`console_page`. Playwright's own browser downloads cannot run here: Chromium is Debian's (`make browser-tools`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from operators.cluster import ClusterInfo
from tests.e2e.conftest import ROOT, STEAD, Kubectl, OperatorProcess, free_port, stop_process
from tests.e2e.tenant_accounts import tenant_token
from tests.polling import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

SCREENSHOTS = ROOT / "docs" / "images" / "console"
CHECK_SECONDS = 1.0
"""How often the tests' console asks whether an open stream's token is still good (30 s by default): a
revoked token then ends its stream within a second."""


def chromium() -> str:
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        raise AssertionError("Debian's chromium is not installed: `make browser-tools` (as root) installs it")
    return found


@dataclass
class ConsoleProcess:
    cluster: ClusterInfo
    operator: OperatorProcess
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra_args: tuple[str, ...] = ()
    """More flags of `stead console` (the OIDC sign-in's)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/console/"

    def start(self) -> None:
        key = self.log_path.parent / "session.key"
        if not key.exists():  # one key for the process's whole life, so that a restart keeps the sessions
            from cryptography.fernet import Fernet

            key.write_bytes(Fernet.generate_key())
        cmd = [str(STEAD), "console", "--kubeconfig", str(self.cluster.kubeconfig), "--port", str(self.port),
               "--stead-api", f"https://127.0.0.1:{self.operator.config_api_port}",
               "--stead-api-ca", str(self.operator.store.parent / "config-api" / "ca.crt"),
               "--session-check-seconds", str(CHECK_SECONDS), "--session-key-file", str(key), *self.extra_args]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=os.environ)
        wait_until(self._ready, 30, "the console's /console/healthz")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = self.log_path.read_text()[-3000:]
            raise AssertionError(f"stead console exited {self.process.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/console/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        stop_process(self.process, grace=15)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the console's /console/metrics (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/console/metrics", timeout=5).read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += float(sample.value)
        return total


@pytest.fixture(scope="session")
def console(cluster: ClusterInfo, operator: OperatorProcess,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(cluster, operator, tmp_path_factory.mktemp("console") / "console.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one module's tests. Not for the session: Playwright's sync API keeps an event loop running
    in the test's thread while it is started, and every later test that calls `asyncio.run` would fail."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        playwright.selectors.set_test_id_attribute("data-test")  # the console's pages mark what tests read so
        launched = playwright.chromium.launch(executable_path=chromium(), headless=True)
        try:
            yield launched
        finally:
            launched.close()


def console_user(kubectl: Kubectl, namespace: str, *, role: str = "edit", account: str = "console-user") -> str:
    """A ServiceAccount of `namespace` bound to `role` and to Stead's kinds there: its token."""
    return tenant_token(kubectl, namespace, role=role, account=account)


def sign_in(page: Page, console: ConsoleProcess, token: str) -> None:
    page.goto(console.url)
    page.get_by_test_id("token").fill(token)
    page.get_by_test_id("signin-submit").click()
    page.get_by_test_id("user").wait_for()


OpenConsole = Callable[..., "Page"]


@pytest.fixture
def console_page(browser: Browser, console: ConsoleProcess) -> Iterator[OpenConsole]:
    """`console_page(token, hash="")`: a page of a fresh browser context (its own cookies), signed in with
    `token`, at `#hash` when given. Closed after the test."""
    contexts: list[Any] = []

    def open_console(token: str, hash: str = "") -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        sign_in(page, console, token)
        if hash:
            page.goto(console.url + hash)
        return page

    try:
        yield open_console
    finally:
        for context in contexts:
            context.close()


def screenshot(page: Page, name: str, tmp: Path | None = None) -> Path:
    """A screenshot of the page: into docs/images/console/ with STEAD_SCREENSHOTS=1 (the docs show them),
    else beside the test's files."""
    target = SCREENSHOTS if os.environ.get("STEAD_SCREENSHOTS") == "1" else (tmp or Path("/tmp")) / "console-shots"
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
