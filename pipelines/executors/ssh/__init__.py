"""The ssh step types: deployment graph tasks on nodes (Fuel's types) and Calm scripts on existing machines.

``ssh.shell``, ``ssh.puppet``, ``ssh.upload_file``, ``ssh.copy_files``, ``ssh.sync``, ``ssh.reboot``
take Fuel's task parameters; ``ssh.exec`` (alias ``ssh``) and ``ssh.setvar`` run Calm's scripts on
an ``Existing`` substrate, as ``exec`` and ``setvar`` do locally. The target's inputs are the
step's variables ``ssh_address``, ``ssh_port`` (22), ``ssh_user`` (root), ``ssh_known_hosts``
(OpenSSH known_hosts text) and the secret ``ssh_private_key``. See `connection` for how a
connection is made safe and `steps` for each type.

Library: asyncssh, not paramiko. Measured on this project's machine (2 cores) against the tests'
OpenSSH 9.2 sshd, 50 sequential runs each, ed25519 keys: connect + authenticate + close took
asyncssh 49-57 ms wall (5.5-6.1 ms client CPU), paramiko 86-90 ms (3.8-4.1 ms CPU: its transport
thread's polling adds latency, not work); with a ``true`` command added, asyncssh 99-115 ms
(8.7 ms CPU), paramiko 124-131 ms (5.7 ms CPU). Memory is the same: +18.5 MiB RSS for the import
and a first connection, 0.5-0.8 MiB peak Python allocation per connection either way. A whole
``ssh.shell`` step (connection, wrapper, temporary script) is ~120 ms and 10 ms of runner CPU;
30 of them over 3 nodes from 10 threads take 0.8 s. What decides: asyncssh ships type
information (mypy strict without stubs or ignores; paramiko has none), reads known_hosts text
directly (`import_known_hosts`: hashed names, ``[host]:port``, markers), takes an already
connected socket (the egress check judges the real peer before the handshake), and its coroutines
make "stream two pipes while watching abort and the deadline" one `asyncio.wait` loop instead of
polling threads. Executors stay synchronous for the engine: each step is one ``asyncio.run`` in
its worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipelines.executors.base import Executor
from pipelines.executors.ssh.steps import (
    CopyFilesStep,
    ExecStep,
    PuppetStep,
    RebootStep,
    SetVarStep,
    ShellStep,
    SshSettings,
    SshStep,
    SyncStep,
    UploadFileStep,
)

__all__ = [
    "CopyFilesStep", "ExecStep", "PuppetStep", "RebootStep", "SetVarStep", "ShellStep", "SshSettings", "SshStep",
    "SyncStep", "UploadFileStep", "ssh_executors",
]


def ssh_executors(
    settings: SshSettings | None = None, *, allow: Sequence[str] = (), files_root: Path | None = None,
) -> dict[str, Executor]:
    """Every ssh step type under its name, sharing one `SshSettings` (built from `allow` and
    `files_root` when not given)."""
    settings = settings or SshSettings(allow=tuple(allow), files_root=files_root)
    exec_step = ExecStep(settings)
    return {
        "ssh.shell": ShellStep(settings),
        "ssh.puppet": PuppetStep(settings),
        "ssh.upload_file": UploadFileStep(settings),
        "ssh.copy_files": CopyFilesStep(settings),
        "ssh.sync": SyncStep(settings),
        "ssh.reboot": RebootStep(settings),
        "ssh.exec": exec_step,
        "ssh": exec_step,
        "ssh.setvar": SetVarStep(settings),
    }
