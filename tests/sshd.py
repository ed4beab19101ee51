"""Real OpenSSH servers for tests: three "nodes" on 127.0.0.2, 127.0.0.3 and 127.0.0.4.

The ssh step types are tested against the real thing, never a mock (issue 16): each node is its own
``sshd -D -e -f <config>`` process (not the system service) with its own generated host key,
listening on one loopback address and a port free on all three, accepting one generated client key
for the current user (root: ``PermitRootLogin prohibit-password``; another user: sshd runs without
privilege separation and only that user can log in). ``make ssh-tools`` installs the server with
apt-get when it is missing; without it the fixtures skip the tests that need it.

Nodes are told apart by their environment: sshd's ``SetEnv`` gives every session ``NODE_DIR`` (a
directory of that node, e.g. ``<root>/127.0.0.3``), the same as ``HOME`` (the tester's own dotfiles
are not read: sessions are hermetic and quick), ``TMPDIR=$NODE_DIR/tmp`` (the nodes share this
machine's /tmp, and so would the locks of tasks' attempts, `attempt_lock`, of every test session on
it) and a ``PATH`` that starts with ``$NODE_DIR/bin``, so
a test writes ``echo x >> $NODE_DIR/log`` to see where a command ran, or drops a fake ``puppet``
into ``node.bin``. Readiness is a real SSH banner on the port, polled with a deadline; teardown
kills the processes (the listeners, their connections and the commands those run).

Use: ``with ssh_nodes_in(path) as nodes:`` (a context manager, any scope), or the module-scoped
``ssh_nodes`` fixture, made visible by importing it in a conftest.py
(``from tests.sshd import ssh_nodes  # noqa: F401``). ``nodes.variables(address)`` are the inputs
an ssh step reads for that node; ``nodes.node(address).restart()`` plays a reboot.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from operators.cluster.processes import descendants_of
from operators.cluster.sshd import (
    SYSTEM_PATH,
    banner,
    keygen,
    known_hosts_line,
    prepare_privilege_separation,
    render_config,
    sshd_unavailable_reason,
)

SSHD = os.environ.get("STEAD_TEST_SSHD", "/usr/sbin/sshd")
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
_READY_SECONDS = 30.0


def available() -> str | None:
    """Why real sshd tests cannot run here, or None when they can."""
    return sshd_unavailable_reason(SSHD)


def _port_free_on_all(addresses: Sequence[str]) -> int:
    """A port that every address can bind now (sshd binds it a moment later; `start` retries a race)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = int(probe.getsockname()[1])
        ok = True
        for address in addresses:
            with socket.socket() as other:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    other.bind((address, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError(f"no port free on all of {', '.join(addresses)}")


@dataclass
class SshNode:
    """One sshd: its address, its directory (``NODE_DIR`` of its sessions) and its process."""

    address: str
    port: int
    dir: Path
    config: Path
    host_key_line: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def bin(self) -> Path:
        """First on the sessions' PATH: put fake commands (puppet...) here."""
        return self.dir / "bin"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start sshd and wait until it answers (a banner), or raise with its log."""
        if self.running:
            return
        logfile = self.log.open("ab")
        try:
            self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                            stdout=logfile, stderr=logfile, start_new_session=True)
        finally:
            logfile.close()
        deadline = time.monotonic() + _READY_SECONDS
        while not banner(self.address, self.port, timeout=0.5):
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd on {self.address}:{self.port} exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sshd on {self.address}:{self.port} not ready after {_READY_SECONDS:.0f}s")
            time.sleep(0.02)  # polling interval of the readiness check, not a synchronisation

    def stop(self) -> None:
        """Kill this sshd, its connections and the commands they run: what a reboot does to them."""
        process, self.process = self.process, None
        if process is None:
            return
        descendants = descendants_of(process.pid)  # before the listener dies and they are reparented
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in descendants:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def set_path(self, path: str | None) -> None:
        """Give this node's sessions another PATH (None: the usual one) and restart its sshd."""
        lines = self.config.read_text().splitlines()
        usual = f"{self.bin}:{SYSTEM_PATH}"
        setenv = f"SetEnv NODE_DIR={self.dir} HOME={self.dir} TMPDIR={self.dir / 'tmp'} PATH={path or usual}"
        lines = [setenv if line.startswith("SetEnv ") else line for line in lines]
        self.config.write_text("\n".join(lines) + "\n")
        self.restart()


@dataclass
class SshNodes:
    """Three sshd nodes sharing a client key and a port; ``known_hosts`` knows all their host keys."""

    root: Path
    addresses: Sequence[str] = ADDRESSES
    user: str = field(default_factory=getpass.getuser)
    nodes: list[SshNode] = field(default_factory=list)
    port: int = 0
    private_key: str = ""
    public_key: str = ""

    @property
    def known_hosts(self) -> str:
        return "".join(node.host_key_line + "\n" for node in self.nodes)

    def node(self, address: str) -> SshNode:
        return next(node for node in self.nodes if node.address == address)

    def variables(self, address: str) -> dict[str, str]:
        """The inputs an ssh step reads for a target (the private key is a secret in a real run)."""
        return {"ssh_address": address, "ssh_port": str(self.port), "ssh_user": self.user,
                "ssh_known_hosts": self.known_hosts, "ssh_private_key": self.private_key}

    def start(self) -> SshNodes:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        client = self.root / "client_key"
        self.public_key = keygen(client, "stead-test-client")
        self.private_key = client.read_text()
        authorized = self.root / "authorized_keys"
        authorized.write_text(self.public_key + "\n")
        prepare_privilege_separation()
        for attempt in range(5):
            self.port = _port_free_on_all(self.addresses)
            try:
                self._start_nodes(authorized)
                return self
            except RuntimeError:
                self.stop()
                if attempt == 4:
                    raise
        return self

    def _start_nodes(self, authorized: Path) -> None:
        self.nodes = []
        for address in self.addresses:
            home = self.root / address
            (home / "bin").mkdir(parents=True, exist_ok=True)
            (home / "tmp").mkdir(exist_ok=True)
            os.chmod(home, 0o755)
            host_key = home / "ssh_host_ed25519_key"
            if not host_key.exists():
                keygen(host_key, address)
            path = f"{home / 'bin'}:{SYSTEM_PATH}"
            config = home / "sshd_config"
            config.write_text(render_config(
                address=address, port=self.port, host_key=host_key, pid_file=home / "sshd.pid",
                authorized_keys=authorized, user=self.user,
                environment={"NODE_DIR": str(home), "HOME": str(home), "TMPDIR": str(home / "tmp"), "PATH": path}))
            node = SshNode(address=address, port=self.port, dir=home, config=config,
                           host_key_line=known_hosts_line(address, self.port, host_key), log=home / "sshd.log")
            self.nodes.append(node)
            node.start()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@contextlib.contextmanager
def ssh_nodes_in(root: Path | None = None) -> Iterator[SshNodes]:
    """Three running nodes for the duration of the block (a temporary root unless given)."""
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-sshd-")))
        nodes = SshNodes(root)
        stack.callback(nodes.stop)
        yield nodes.start()


@pytest.fixture(scope="module")
def ssh_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodes]:
    """Three real sshd nodes for a test module (skipped where sshd is not installed)."""
    why = available()
    if why is not None:
        pytest.skip(why)
    with ssh_nodes_in(tmp_path_factory.mktemp("sshd")) as nodes:
        yield nodes
