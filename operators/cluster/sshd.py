"""OpenSSH servers run as plain processes on loopback: the local plane's demo node, and the tests' nodes.

Deployment graphs run their tasks over SSH, so a graph tour on one machine needs an SSH server to
reach. The local control plane (`stead cluster up`, `make run`) starts one beside it: Debian's
``/usr/sbin/sshd`` (``make ssh-tools``), never the system service, as ``sshd -D -e -f <config>`` with
a host key, a client key and its config of its own in ``$STEAD_HOME/demo-node``, on a loopback address
(`DEMO_ADDRESS`) and a port free there, accepting that one key for the user Stead runs as.
``stead cluster demo-node`` prints the Secret and the Environment that reach it; the local plane's
operator may connect there without ``--ssh-allow`` (`demo_allow_network`). Where sshd is missing the
plane runs without it, saying why (`sshd_unavailable_reason`).

tests/sshd.py starts its three test nodes with the same pieces (`keygen`, `render_config`, `banner`).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from operators.cluster.atomicwrite import write_file_atomically
from operators.cluster.processes import (
    ProcessRecord,
    ProcessTable,
    descendants_of,
    marked_processes,
    port_in_use,
    process_cmdline,
    process_is_running,
    process_start_ticks,
)

SSHD: Final = "/usr/sbin/sshd"
DEMO_ADDRESS: Final = "127.0.0.10"
"""The demo node's address: loopback, and not 127.0.0.1, where the operator's own ports listen (the
allowance `demo_allow_network` gives reaches this address only)."""
DEMO_DIR: Final = "demo-node"
DEMO_KEY: Final = "id_ed25519"
"""The client key's file and its key in the printed Secret."""
KNOWN_HOSTS: Final = "known_hosts"
READY_SECONDS: Final = 30.0
STOP_SECONDS: Final = 5.0
MARK_VARIABLE: Final = "STEAD_DEMO_NODE"
"""Set in every session of the demo node (its directory): `down` ends what they started by it."""
SYSTEM_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sshd_unavailable_reason(sshd: str | None = None) -> str | None:
    """Why no sshd can be started here, in one line; None when it can."""
    sshd = sshd or SSHD
    if not os.access(sshd, os.X_OK):
        return f"{sshd} is missing: `make ssh-tools` installs openssh-server (as root)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing (openssh-client)"
    return None


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key without passphrase at `path` (and `path`.pub); returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return Path(f"{path}.pub").read_text().strip()


def banner(address: str, port: int, timeout: float = 1.0) -> bool:
    """True when an SSH server answers with its banner on address:port."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def known_hosts_line(address: str, port: int, host_key: Path) -> str:
    """The known_hosts entry of a server on address:port with the host key `host_key` (its .pub)."""
    key_type, key_blob = Path(f"{host_key}.pub").read_text().split()[:2]
    return f"[{address}]:{port} {key_type} {key_blob}"


def render_config(*, address: str, port: int, host_key: Path, pid_file: Path, authorized_keys: Path, user: str,
                  environment: Mapping[str, str] = {}) -> str:
    """An sshd_config for one user logging in with a key only: no PAM, no DNS, no password, the given
    variables set in every session. As root, root may log in with a key (``prohibit-password``); as
    another user sshd runs without privilege separation and only that user can log in.

    Sessions do not run the user's ``~/.bashrc``: bash reads it for a command over ssh only at shell
    level 1, and ``SHLVL=1`` in the session makes it 2. These nodes are this machine's user, whose rc
    files are not the node's: on these machines root's runs ``pyenv rehash``, which waits up to a minute
    on a lock file that a session killed mid-rehash (an aborted task) leaves behind, so every later task
    hung until its timeout."""
    lines = [
        f"ListenAddress {address}:{port}",
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized_keys}",
        f"AllowUsers {user}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "StrictModes no",
        "UsePAM no",
        "UseDNS no",
        "LogLevel VERBOSE",
        "MaxStartups 200",
        "MaxSessions 50",
        "Subsystem sftp internal-sftp",
    ]
    lines.append("SetEnv " + " ".join(f"{name}={value}" for name, value in {"SHLVL": "1", **environment}.items()))
    return "\n".join([*lines, ""])


def prepare_privilege_separation() -> None:
    """Debian's sshd, run as root, chroots its unprivileged children into /run/sshd, which a container
    without the system service lacks."""
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)


def free_port(address: str) -> int:
    """A port free on `address` now (sshd binds it a moment later; a lost race is retried)."""
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def demo_allow_network(address: str | None) -> tuple[str, ...]:
    """What the local plane's operator adds to its ssh allow-list: the demo node's address alone (a /32),
    never loopback as a whole: 127.0.0.1 holds the operator's own ports. Allowing it gives a tenant
    nothing new, as the local plane's namespaces may run scripts on this host anyway
    (`--trust-local-namespaces`)."""
    return () if address is None else (f"{address}/32",)


class _SshdTable(ProcessTable):
    """sshd rewrites its process title (``sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] ...``): a
    recorded listener is ours while its start time matches and its title names our config."""

    def is_ours(self, record: ProcessRecord) -> bool:
        if not process_is_running(record.pid) or process_start_ticks(record.pid) != record.start_ticks:
            return False
        title = " ".join(process_cmdline(record.pid))
        return "sshd" in title.split(" ", 1)[0] and self.owner_mark in title


@dataclass(frozen=True)
class DemoNodeInfo:
    """Where the demo node listens and who logs in (no key: the key is only in `DemoNode.manifest`)."""

    address: str
    port: int
    user: str


class DemoNode:
    """The local plane's SSH node, its files in ``<home>/demo-node``: ``up`` is idempotent, ``down`` stops
    the server and every session it runs (a task's commands too), whichever process started it."""

    NAME: Final = "sshd"

    def __init__(self, home: Path, *, address: str = DEMO_ADDRESS, sshd: str | None = None,
                 user: str | None = None) -> None:
        self.dir = home.expanduser().absolute() / DEMO_DIR
        self.address = address
        self.sshd = sshd or SSHD
        self.user = user or getpass.getuser()
        self._processes = _SshdTable(self.dir / "run", owner_mark=str(self.dir))

    @property
    def _mark(self) -> bytes:
        return f"{MARK_VARIABLE}={self.dir}".encode()

    @property
    def config(self) -> Path:
        return self.dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.dir / DEMO_KEY

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def _state(self) -> Path:
        return self.dir / "node.json"

    def recorded(self) -> DemoNodeInfo | None:
        """Where this home's demo node listens (or last listened)."""
        try:
            data = json.loads(self._state.read_text())
            return DemoNodeInfo(address=str(data["address"]), port=int(data["port"]), user=str(data["user"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def running(self) -> DemoNodeInfo | None:
        """Where it listens, while its sshd is ours, alive and answering."""
        info = self.recorded()
        if info is None or not self._processes.alive([self.NAME]) or not banner(info.address, info.port):
            return None
        return info

    def up(self) -> DemoNodeInfo:
        """Start sshd (or find it running): keys made once and kept, the last port again when it is free."""
        info = self.running()
        if info is not None:
            return info
        self.down()
        reason = sshd_unavailable_reason(self.sshd)
        if reason is not None:
            raise RuntimeError(reason)
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)  # the client key is the node's login
        for key, comment in ((self.host_key, "stead-demo-node"), (self.client_key, "stead-demo-client")):
            if not key.exists():
                keygen(key, comment)
        authorized = self.dir / "authorized_keys"
        authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        (self.dir / "tmp").mkdir(exist_ok=True)
        prepare_privilege_separation()
        last = self.recorded()
        port = last.port if last is not None and not port_in_use(last.port, self.address) else free_port(self.address)
        for attempt in range(3):
            try:
                return self._start(port, authorized)
            except RuntimeError:
                self.down()
                if attempt == 2:
                    raise
                port = free_port(self.address)
        raise AssertionError("unreachable")

    def _start(self, port: int, authorized: Path) -> DemoNodeInfo:
        self.config.write_text(render_config(
            address=self.address, port=port, host_key=self.host_key, pid_file=self.dir / "sshd.pid",
            authorized_keys=authorized, user=self.user,
            environment={"TMPDIR": str(self.dir / "tmp"), MARK_VARIABLE: str(self.dir)}))
        info = DemoNodeInfo(address=self.address, port=port, user=self.user)
        write_file_atomically(self._state, json.dumps(
            {"address": info.address, "port": info.port, "user": info.user}).encode())
        process = self._processes.launch(self.NAME, [self.sshd, "-D", "-e", "-f", str(self.config)],
                                         log=self.log, cwd=self.dir)
        deadline = time.monotonic() + READY_SECONDS
        while not banner(self.address, port, timeout=0.5):
            if process.poll() is not None:
                raise RuntimeError(f"sshd on {self.address}:{port} exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {self.address}:{port} did not answer within {READY_SECONDS:.0f}s")
            time.sleep(0.02)  # the interval of a readiness poll bounded by the deadline above
        return info

    def down(self) -> None:
        """Stop the listener and the sessions it forked (each its own session: killing the listener does
        not reach them, nor the commands they run)."""
        record = self._processes.read_record(self.NAME)
        sessions = descendants_of(record.pid) if record is not None and self._processes.is_alive(record) else []
        survivors = self._processes.stop([self.NAME], STOP_SECONDS)
        for pid in [*sessions, *marked_processes(self._mark)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if survivors:
            raise RuntimeError(f"could not stop the demo node's sshd (pid {survivors[0].pid})")

    def status_row(self) -> tuple[str, str]:
        """The line of `stead cluster status`: where it listens, or why there is none."""
        info = self.running()
        if info is not None:
            pid = self._processes.alive([self.NAME])[self.NAME]
            return ("demo node", f"{info.address}:{info.port}, user {info.user}, pid {pid} "
                    "(`stead cluster demo-node` prints its Secret and Environment)")
        reason = sshd_unavailable_reason(self.sshd)
        return ("demo node", f"none: {reason}" if reason else "not running")

    def manifest(self, namespace: str, name: str, release: str, roles: list[str]) -> str:
        """A Secret (the client key, the known host) and an Environment of one node, this server, for
        ``kubectl apply -f -``. It holds the private key: for stdout only, never a log."""
        info = self.running()
        if info is None:
            raise RuntimeError(self.status_row()[1] + ": `make run` (or `stead cluster up`) starts it")
        import yaml

        class Literal(str):
            pass

        class Dumper(yaml.SafeDumper):
            pass

        def represent(dumper: yaml.SafeDumper, text: Literal) -> yaml.Node:
            return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")

        Dumper.add_representer(Literal, represent)
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": name, "namespace": namespace},
                  "stringData": {DEMO_KEY: Literal(self.client_key.read_text()),
                                 KNOWN_HOSTS: Literal(known_hosts_line(info.address, info.port, self.host_key) + "\n")}}
        environment = {"apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {"release": release,
                                "nodes": [{"name": name, "roles": roles, "address": info.address}],
                                "ssh": {"user": info.user, "port": info.port,
                                        "privateKey": {"name": name, "key": DEMO_KEY},
                                        "knownHosts": {"name": name, "key": KNOWN_HOSTS}}}}
        return yaml.dump_all([secret, environment], Dumper=Dumper, sort_keys=False)
