"""Local scripts run as an unprivileged user of their own, out of reach of the runner's files.

Real processes: the runner side is this (root) test process, the script a child that switched user.
Without root there is no other user to switch to: those tests are skipped, the parsing ones are not.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from pathlib import Path

import pytest

from operators.cli.operator import script_uids, script_user
from operators.runtime.engine.runs import (
    DEFAULT_SCRIPT_UIDS,
    RunSettings,
    local_script_user,
    parse_uid_range,
    script_uid,
)
from pipelines.executors import LocalProcess, ScriptUser, StepFailed
from pipelines.executors.script import INTERPRETERS, ScriptExecutor
from pipelines.executors.script.cgroup import StepCgroup
from tests.unit.pipelines.test_pipelines_executors import make_ctx

NOBODY = ScriptUser(65534, 65534)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def test_script_user_parsing() -> None:
    assert ScriptUser.parse("65534") == NOBODY
    assert ScriptUser.parse("65534:65534") == NOBODY
    assert ScriptUser.parse("4242:4343") == ScriptUser(4242, 4343)  # a uid needs no passwd entry (images)
    assert ScriptUser.parse("nobody").uid == 65534
    assert str(NOBODY) == "65534:65534"
    for refused, why in (("root", "root"), ("0", "root"), ("65534:0", "root"), ("no-such-user-x", "no user"),
                         ("65534:no-such-group-x", "no group")):
        with pytest.raises(ValueError, match=why):
            ScriptUser.parse(refused)


def test_the_operator_picks_an_unprivileged_user_only_when_it_can_switch() -> None:
    assert script_user("auto", 0) == "65534:65534"
    assert script_user("auto", 1000) is None
    assert script_user("none", 0) is None
    assert script_user("4242", 0) == "4242:4242"
    with pytest.raises(ValueError, match="must run as root"):
        script_user("4242", 1000)


@as_root
def test_a_script_runs_as_its_user_without_the_runners_groups(tmp_path: Path) -> None:
    ctx, out = make_ctx(tmp_path, {"script": "id -u; id -g; id -G; echo home=$HOME; pwd; touch mine && echo wrote"})
    ScriptExecutor(LocalProcess(user=NOBODY)).run(ctx)
    uid, gid, groups, home, cwd, wrote = out.text("stdout").splitlines()
    assert (uid, gid, groups) == ("65534", "65534", "65534")
    assert home == f"home={cwd}" and wrote == "wrote"
    assert not Path(cwd).is_relative_to(tmp_path), "the script's directory is outside the runner's state"
    assert not Path(cwd).exists(), "the attempt's directory is removed when it ends"


@as_root
def test_a_script_cannot_read_the_runners_secrets_or_environment(tmp_path: Path) -> None:
    """What a script running with the runner's own user could read: here, each is refused."""
    secret = tmp_path / "kube-credentials.json"  # as the runner writes its credentials: 0600, its own
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"runner-token-8f1e")
    os.close(fd)
    tmp_path.chmod(0o755)  # even where the directory itself can be entered
    script = (f"cat {secret} && echo READ-SECRET; "
              f"cat /proc/{os.getpid()}/environ && echo READ-ENVIRON; "
              f"ls {tmp_path} >/dev/null && echo LISTED; "
              "echo done")
    ctx, out = make_ctx(tmp_path, {"script": script})
    ScriptExecutor(LocalProcess(user=NOBODY)).run(ctx)
    stdout, stderr = out.text("stdout"), out.text("stderr")
    assert stdout.splitlines()[-1] == "done"
    assert "runner-token-8f1e" not in stdout and "READ-SECRET" not in stdout, stdout
    assert "READ-ENVIRON" not in stdout and "Permission denied" in stderr, stderr
    # the same script with the runner's user reads the secret: the test can fail
    ctx, out = make_ctx(tmp_path, {"script": script})
    ScriptExecutor(LocalProcess()).run(ctx)
    assert "READ-SECRET" in out.text("stdout")


@as_root
def test_working_directories_live_under_a_private_root_removed_at_close(tmp_path: Path) -> None:
    local = LocalProcess(user=NOBODY)
    script = "pwd; ls -ld .. 2>&1 | cut -c1-10; ls .. >/dev/null 2>&1 || echo unlisted"
    ctx, out = make_ctx(tmp_path, {"script": script})
    ScriptExecutor(local).run(ctx)
    cwd, mode, unlisted = out.text("stdout").splitlines()
    root = Path(cwd).parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o711 and mode == "drwx--x--x" and unlisted == "unlisted"
    local.close()
    assert not root.exists()


@as_root
def test_a_script_that_cannot_start_fails_the_step_and_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalProcess(user=NOBODY)
    ctx, _ = make_ctx(tmp_path, {"script": "true", "interpreter": "python"})
    monkeypatch.setitem(INTERPRETERS, "python", ["/nonexistent/python3"])
    with pytest.raises(StepFailed, match="cannot start python"):
        ScriptExecutor(local).run(ctx)
    assert local._homes is not None and not any(local._homes.iterdir())
    local.close()


def test_each_namespace_gets_a_stable_uid_of_its_own_from_the_range_never_the_operators() -> None:
    first, last = DEFAULT_SCRIPT_UIDS
    uids = {ns: script_uid(ns, first, last) for ns in (f"team-{i}" for i in range(200))}
    assert all(first <= uid <= last for uid in uids.values())
    assert len(set(uids.values())) == len(uids), "200 namespaces, 200 uids"
    assert script_uid("team-7", first, last) == uids["team-7"], "stable: a restart or a replica picks the same"
    assert script_uid("team-7", 5000, 5000) == 5000
    assert parse_uid_range("200000-265535", 0) == (200000, 265535)
    for given, why in (("0-10", "0 < FIRST"), ("10-5", "FIRST <= LAST"), ("x-5", "FIRST-LAST"), ("7", "FIRST-LAST"),
                       ("900-1100", "operator's own uid 1000")):
        with pytest.raises(ValueError, match=re.escape(why)):
            parse_uid_range(given, 1000)
    assert script_uids("auto", "auto", 0) == DEFAULT_SCRIPT_UIDS
    assert script_uids("auto", "4242", 0) is None, "an explicit --script-user keeps one user for all"
    assert script_uids("auto", "auto", 1000) is None and script_uids("none", "auto", 0) is None
    with pytest.raises(ValueError, match="must run as root"):
        script_uids("200000-265535", "auto", 1000)
    settings = RunSettings(Path("/x"), script_user="65534:65534", script_uids=(200000, 265535))
    uid = script_uid("team-7", 200000, 265535)
    assert local_script_user(settings, "team-7") == f"{uid}:{uid}"
    assert local_script_user(RunSettings(Path("/x"), script_user="65534:65534"), "team-7") == "65534:65534"


@as_root
def test_a_step_that_leaves_its_group_and_drops_the_marker_is_still_ended_with_it(tmp_path: Path) -> None:
    """`setsid env -u STEAD_MARKER`: out of the process group, no marker; the step's cgroup still holds it."""
    probe = StepCgroup.create(f"probe/{os.getpid()}")
    if probe is None:
        pytest.skip("no writable cgroup v1 freezer hierarchy")
    probe.kill()
    tag = f"escaped-{os.getpid()}-{time.monotonic_ns()}"
    ctx, _ = make_ctx(tmp_path, {"script": f"setsid env -u STEAD_MARKER sh -c 'while :; do sleep 1; done # {tag}' "
                                           "</dev/null >/dev/null 2>&1 & echo started"})
    ScriptExecutor(LocalProcess(user=NOBODY)).run(ctx)
    assert running(tag) == [], "a process of the step outlived it"


def running(tag: str) -> list[int]:
    """Processes whose command line holds `tag` (also the e2e isolation test's)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and tag.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def test_the_run_files_and_stores_are_the_owners_alone(tmp_path: Path) -> None:
    """Directories 0700 and files 0600, also where an older version had left them readable."""
    from operators.runtime.core.store import LocalStore
    from pipelines.control import prepare_run
    from pipelines.model import Workflow
    from pipelines.store import RunStore

    old = tmp_path / "store"
    old.mkdir(mode=0o755)
    (old / "data.mdb").touch(mode=0o644)
    store = LocalStore(old)
    store.close()
    runs = RunStore(tmp_path / "runs" / "store")
    runs.close()
    paths = prepare_run(tmp_path / "runs", "u1", Workflow.model_validate({"name": "w", "steps": []}))
    for path in (old, tmp_path / "runs", tmp_path / "runs" / "store", paths.run_dir.parent, paths.run_dir):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (old / "data.mdb", old / "lock.mdb", tmp_path / "runs" / "store" / "data.mdb", paths.workflow_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
