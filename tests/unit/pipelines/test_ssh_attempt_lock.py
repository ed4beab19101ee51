"""An ssh command's attempt lock (issue 26): the lock's name, and the wrapper's guard run by this
machine's /bin/sh in a session of its own, as sshd runs it on a node (no sshd needed: the e2e test
`test_a_runner_killed_mid_run_...` in tests/e2e/test_graphs.py runs it on real nodes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pipelines.executors.ssh.connection import _GUARD, _WRAPPER, BUSY_EXIT, attempt_lock, guard_script, stop_script
from tests.polling import wait_until

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is missing")

LOCK = attempt_lock("run-1", "deploy:hiera:ctl@ctl")


def start(tmp_path: Path, command: str, wrapper: str = _WRAPPER) -> subprocess.Popen[str]:
    """One attempt of a task: `command` under the wrapper, in its own session as sshd gives it."""
    return subprocess.Popen(["/bin/sh", "-c", wrapper, "stead", LOCK, "", "/bin/sh", "-c", command],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)})


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_the_lock_is_one_per_run_task_and_node_and_a_safe_relative_path() -> None:
    assert attempt_lock("run-1", "deploy:hiera:ctl@ctl") == LOCK  # every attempt finds the same one
    assert len({LOCK, attempt_lock("run-2", "deploy:hiera:ctl@ctl"), attempt_lock("run-1", "deploy:hiera:c1@c1"),
                attempt_lock("run-1", "deploy:hiera:ctl@ctl2")}) == 4
    assert LOCK.startswith("run-1/deploy_hiera_ctl@ctl.") and LOCK.endswith(".lock")
    # the same once cleaned, still two locks; nothing climbs out of the directory or hides in it
    assert attempt_lock("r", "a b") != attempt_lock("r", "a_b")
    for run, key in (("..", "../../etc/passwd"), ("r", "$(reboot)"), ("", ""), (".", ".x")):
        run_part, name = attempt_lock(run, key).split("/")
        assert run_part not in (".", "..") and not run_part.startswith(".") and not name.startswith(".")
        assert set(run_part + name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-")


def test_a_retry_stops_the_earlier_attempt_and_starts_when_its_whole_group_has_ended(tmp_path: Path) -> None:
    log = tmp_path / "log"
    # the earlier attempt, left by its runner: its shell dies at TERM, a child of it takes half a second
    first = start(tmp_path, f'echo "first $$" >> {log}; '
                            f"(trap 'sleep 0.5; echo child-stopped >> {log}; exit 0' TERM; "
                            "while :; do sleep 0.1; done) & wait")
    try:
        wait_until(lambda: lines(log), 10, "the first attempt running")
        retry = subprocess.run(["/bin/sh", "-c", _WRAPPER, "stead", LOCK, "", "/bin/sh", "-c", f"echo second >> {log}"],
                               capture_output=True, text=True, timeout=30, start_new_session=True,
                               env={"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)})
        assert first.wait(10) in (143, -15)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, 9)
    assert retry.returncode == 0, retry
    pgid = retry.stdout.splitlines()[0].split()[1]
    assert retry.stdout.splitlines() == [f"stead-pgid {pgid}", f"stead-stopping {first.pid}", "stead-go"]
    assert [line.split()[0] for line in lines(log)] == ["first", "child-stopped", "second"]
    assert (tmp_path / f"stead-{os.getuid()}" / LOCK).read_text().strip() == pgid  # the retry's group, for the next


def test_what_an_attempt_leaves_running_is_not_an_attempt(tmp_path: Path) -> None:
    """The command runs without the lock's descriptor: a daemon it starts never holds the lock, and a
    retry after it ended stops nothing."""
    pid_file = tmp_path / "daemon.pid"
    first = start(tmp_path, f"sleep 30 >/dev/null 2>&1 & echo $! > {pid_file}")
    assert first.wait(10) == 0
    daemon = int(pid_file.read_text())
    try:
        retry = start(tmp_path, "echo again")
        out, _ = retry.communicate(timeout=10)
        assert retry.returncode == 0 and "stead-stopping" not in out and out.endswith("stead-go\nagain\n")
        assert Path(f"/proc/{daemon}").exists()
    finally:
        os.kill(daemon, 9)


def test_an_earlier_attempt_that_does_not_stop_fails_the_retry_rather_than_running_beside_it(tmp_path: Path) -> None:
    lock = tmp_path / f"stead-{os.getuid()}" / LOCK
    lock.parent.mkdir(parents=True, mode=0o700)
    lock.parent.parent.chmod(0o700)
    lock.touch()
    # held by a process outside any group the lock names: nothing the retry may kill
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"], start_new_session=True)
    try:
        wait_until(lambda: subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 1, 10, "the lock held")
        started = time.monotonic()
        retry = start(tmp_path, f"echo ran >> {tmp_path / 'log'}", guard_script(0.2, 0.3) + _WRAPPER[len(_GUARD):])
        out, _ = retry.communicate(timeout=10)
        assert retry.returncode == BUSY_EXIT and out.splitlines()[-1] == "stead-busy 0", out
        assert not (tmp_path / "log").exists() and time.monotonic() - started < 5
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()


def test_a_lock_directory_that_is_not_the_users_own_is_not_used(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"stead-{os.getuid()}").symlink_to(elsewhere)
    attempt = start(tmp_path, "echo ran")
    out, err = attempt.communicate(timeout=10)
    assert attempt.returncode == 0 and out.endswith("stead-go\nran\n")
    assert "is not a private directory of this user" in err and not list(elsewhere.iterdir())


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_stop_script_ends_a_group_under_dash_and_bash(shell: str) -> None:
    """An abort's stop script runs in the node user's login shell; with `kill -TERM -- -PGID`, dash
    answered "Illegal number: -" and the group ran on."""
    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        done = subprocess.run([shell, "-c", stop_script(group.pid, grace=1)], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0 and "Illegal" not in done.stderr, done.stderr
        assert group.wait(10) == -15  # TERM, the first signal: the group went
    finally:
        group.kill()
        group.wait()
