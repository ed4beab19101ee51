"""Local scripts run as an unprivileged user of their own, out of reach of the runner's files.

Real processes: the runner side is this (root) test process, the script a child that switched user.
Without root there is no other user to switch to: those tests are skipped, the parsing ones are not.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from operators.cli import script_user
from pipelines.executors import LocalProcess, ScriptUser, StepFailed
from pipelines.executors.script import INTERPRETERS, ScriptExecutor
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
