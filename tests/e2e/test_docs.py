"""Every tour in README.md and docs/, run as written (issue 27; how a page is read: tests/docsrun.py).

The plane is the reader's: `make run` in the background, in a fresh `$STEAD_HOME`, with nothing but what it
starts (no local node: `STEAD_NODE=never`; no kubeconfig reaching another cluster). Each page then runs in a
terminal of its own, the reader's second one: `$STEAD_HOME` and the plane's ports set, no `.venv/bin` on the
PATH and no KUBECONFIG, so a page says in its own commands what it needs. Its operator listens on the
default ports, so two docs runs on one machine take turns (a file lock)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from operators.cli.cluster import PORT_VARIABLES
from operators.cluster import Binaries
from tests.docsrun import StepFailed, Terminal, read_page, run_page
from tests.e2e.conftest import DOCS_SKIPPED, ROOT, free_port, wait_until

PAGES = ("README.md", "docs/environments.md", "docs/calm.md", "docs/configuration.md", "docs/services.md",
         "docs/gitops.md", "docs/graphs.md", "docs/operations.md", "docs/console.md", "docs/architecture.md")
"""In the order a reader meets them; they share the plane, each in namespaces of its own."""

HEALTH = "http://127.0.0.1:8080/readyz"  # `stead operator`'s default --health-port
LOCK = Path(tempfile.gettempdir()) / "stead-docs-plane.lock"


@dataclass(frozen=True)
class DocsPlane:
    env: dict[str, str]
    """A second terminal's environment while `make run` goes in the first."""
    kubectl: list[str]
    log: Path


def _ready() -> bool:
    try:
        with urllib.request.urlopen(HEALTH, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def docs_plane(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[DocsPlane]:
    tmp = tmp_path_factory.mktemp("docs")
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        venv_bin = str(Path(sys.executable).parent)
        terminal = {key: value for key, value in os.environ.items() if key not in ("KUBECONFIG", "VIRTUAL_ENV")}
        terminal["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
        terminal |= {"STEAD_HOME": str(tmp / "home"), "STEAD_NODE": "never",
                     **{variable: str(free_port()) for variable in PORT_VARIABLES.values()}}
        log = tmp / "make-run.log"
        # `-o` the venv's stamp: make test (or the reader's first `make run`) installed it; a checkout newer than
        # the stamp must not reinstall the package into a venv shared with another tree.
        with log.open("wb") as output:
            make = subprocess.Popen(["make", "-o", ".venv/.installed-stamp", "run"], cwd=ROOT,
                                    env={**terminal, "KUBECONFIG": str(tmp / "no-cluster")},
                                    stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def ready() -> bool:
                assert make.poll() is None, f"make run exited {make.returncode}:\n{log.read_text()[-3000:]}"
                return _ready()

            wait_until(ready, 180, "make run's operator to be ready", interval=0.5)
            yield DocsPlane(terminal, [str(binaries.kubectl), "--kubeconfig", str(tmp / "home" / "kubeconfig")], log)
        finally:
            os.killpg(make.pid, signal.SIGINT)  # Ctrl-C in make run's terminal
            try:
                make.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait(timeout=10)
                subprocess.run([str(Path(venv_bin) / "stead"), "cluster", "down"], env=terminal, check=False)
                raise


def _namespaces(plane: DocsPlane) -> set[str]:
    done = subprocess.run([*plane.kubectl, "get", "namespaces", "-o", "name"], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


def test_every_page_with_commands_is_run() -> None:
    """A new page with shell blocks cannot escape the docs test."""
    with_commands = {str(path.relative_to(ROOT)) for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
                     if "```sh" in path.read_text()}
    assert with_commands <= set(PAGES), f"add to PAGES: {sorted(with_commands - set(PAGES))}"


@pytest.mark.parametrize("name", PAGES)
def test_the_page_runs_as_written(name: str, docs_plane: DocsPlane, tmp_path: Path,
                                  request: pytest.FixtureRequest) -> None:
    page = read_page(name, (ROOT / name).read_text())
    request.node.user_properties.extend((DOCS_SKIPPED, f"{name}:{block.line}: {block.skip}") for block in page.skipped)
    before = _namespaces(docs_plane)
    terminal = Terminal(ROOT, docs_plane.env, tmp_path)
    failed: str | None = None
    try:
        for _ in run_page(page, terminal):
            pass
    except StepFailed as failure:
        failed = f"{failure}\n{_what_the_plane_shows(docs_plane)}"
    finally:
        terminal.close()
        for namespace in sorted(_namespaces(docs_plane) - before):
            subprocess.run([*docs_plane.kubectl, "delete", namespace, "--wait=false"], capture_output=True,
                           check=False)
    if failed is not None:
        pytest.fail(failed, pytrace=False)  # the page and line say where; the runner's frames do not


def _what_the_plane_shows(plane: DocsPlane) -> str:
    """What a reader would look at next: the Stead objects and the operator's last log lines."""
    objects = subprocess.run([*plane.kubectl, "get", "stead", "-A", "-o", "wide"], capture_output=True, text=True,
                             check=False)
    why = subprocess.run([*plane.kubectl, "get", "stead", "-A", "-o", "jsonpath={range .items[?(@.status.conditions)]}"
                          "{.kind} {.metadata.namespace}/{.metadata.name}: "
                          "{.status.conditions[?(@.status==\"True\")].message}{\"\\n\"}{end}"],
                         capture_output=True, text=True, check=False)
    log = plane.log.read_text(errors="replace").splitlines()[-40:]
    return "--- kubectl get stead -A:\n" + objects.stdout + objects.stderr + \
        "--- their conditions' messages:\n" + why.stdout + why.stderr + \
        "--- make run's last lines:\n" + "\n".join(log)


def test_a_second_make_run_says_the_port_is_taken_and_leaves_the_first_running(docs_plane: DocsPlane,
                                                                              tmp_path: Path) -> None:
    """A reader who starts `make run` twice gets a sentence, not a traceback, and keeps the first."""
    done = subprocess.run(["make", "-o", ".venv/.installed-stamp", "run"], cwd=ROOT, capture_output=True, text=True,
                          env={**docs_plane.env, "KUBECONFIG": str(tmp_path / "no-cluster")}, timeout=120)
    assert done.returncode != 0
    assert "('127.0.0.1', 8080): address already in use: another process (another `make run`?) listens there; " \
           "choose a free port with --health-port" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert _ready()
