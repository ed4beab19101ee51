"""The runtime's shared run supervision with a real runner process and an observer of its own.

No cluster: the runs here keep their scripts on this host, so the supervision needs no API access;
the observer stands for a kind's object (what it shows, when it asks to abort).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from operators.runtime.core.pipeline import Observed, StepContext
from operators.runtime.engine import runs
from operators.runtime.engine.runs import (
    Abort,
    AccountCredentials,
    RunRequest,
    RunSettings,
    UntrustedNamespace,
    cidrs_of,
    discover_service_cidrs,
    follow_run,
    in_jobs,
    paths_for,
    read_conclusion,
    write_conclusion,
)
from operators.runtime.engine.slots import RunSlots
from operators.runtime.serving.metrics import Metrics
from pipelines.control import read_status, runner_pid
from tests.polling import wait_until


@dataclass
class Events:
    recorded: list[tuple[str, str, str]] = field(default_factory=list)

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        self.recorded.append((type_, reason, message))


@dataclass
class Services:
    runs: RunSettings
    kube: Any = None
    events: Events = field(default_factory=Events)
    metrics: Metrics = field(default_factory=Metrics)
    run_slots: RunSlots = field(default_factory=lambda: RunSlots(4))


@dataclass
class Observer:
    """Records what the object would show; aborts when told to."""

    abort_with: Abort | None = None
    abort_after_patches: int = 0
    patches: list[Mapping[str, Any]] = field(default_factory=list)

    async def abort(self) -> Abort | None:
        return self.abort_with if len(self.patches) >= self.abort_after_patches else None

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"done": (progress.get("progress") or {}).get("done", 0),
                "states": [s.get("state") for s in status.get("steps") or []]}

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        return {"queued": waiting}

    async def write(self, patch: Mapping[str, Any]) -> None:
        self.patches.append(patch)


def context(tmp_path: Path, namespace: str = "team-a", uid: str = "uid-1", slots: RunSlots | None = None,
            **settings: Any) -> StepContext:
    obj = Observed(kind="ThingRun", namespace=namespace, name="r", uid=uid, generation=1, labels={}, spec={},
                   status={})
    runs = RunSettings.beside(tmp_path / "store", **{"trusted_local_namespaces": ("team-*",), **settings})
    return StepContext(obj=obj, facts={}, services=Services(runs, run_slots=slots or RunSlots(4)))


def workflow(*scripts: str) -> dict[str, Any]:
    steps = [{"id": f"s{i}", "type": "exec", "timeoutSeconds": 60, "parameters": {"script": script},
              **({"dependsOn": [f"s{i - 1}"]} if i else {})} for i, script in enumerate(scripts)]
    return {"name": "w", "steps": steps}


def test_a_run_is_followed_to_its_end_and_its_secrets_reach_it_sealed(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    paths = paths_for(ctx)
    assert paths.state_dir == tmp_path / "store-runs"
    asked: list[str] = []

    async def password(account: AccountCredentials) -> str:  # a vault value: no need of the account's token
        asked.append("pw")
        return "pw-93f1"

    run = workflow("test \"$PW\" = \"$(printf pw-%s 93f1)\" && echo fine", "sleep 1.5", "echo third")
    run["steps"][0]["parameters"]["env"] = {"PW": "@@{pw}@@"}
    request = RunRequest(paths, run, secrets={"pw": password}, hooks="pipelines.hooks:SUBSTITUTE")
    observer = Observer()
    followed = asyncio.run(follow_run(ctx, request, observer))
    assert followed.status["phase"] == "Succeeded", followed.status
    assert followed.starts == 1 and followed.aborted_for is None
    assert asked == ["pw"], "read once, for the one runner start"
    assert observer.patches and followed.writes == len(observer.patches)
    assert observer.patches[-1]["statusWrites"] == followed.writes  # the supervision's counters ride along
    assert len({(p["done"], tuple(p["states"])) for p in observer.patches}) == len(observer.patches)
    assert "pw-93f1" not in (paths.run_dir / "workflow.json").read_text()
    durations = ctx.services.metrics.registry.get_sample_value(
        "stead_workflow_step_duration_seconds_count", {"kind": "ThingRun", "step_type": "exec", "outcome": "success"})
    assert durations == 3  # every step instance, once
    write_conclusion(paths, {"state": "Succeeded"})
    assert read_conclusion(paths) == {"state": "Succeeded"}


@dataclass
class TokenApi:
    """The API server's TokenRequest, as far as `runner_credentials` uses it."""

    asked: list[str] = field(default_factory=list)

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        self.asked.append(f"{method} {path}")
        return {"status": {"token": "sa-token-of-team-a"}}


def test_a_secret_reference_is_read_as_the_namespaces_account_even_for_scripts_on_this_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The account's token is minted for the reader alone and gone before the runner (and its scripts)
    start: a run on this host never gets it unless it has kubernetes steps."""
    monkeypatch.setattr(runs.launch, "_api_server", lambda: ("https://127.0.0.1:6443", None))
    ctx = context(tmp_path)
    api = TokenApi()
    ctx.services.kube = api
    paths = paths_for(ctx)
    seen: list[str] = []

    async def from_secret(account: AccountCredentials) -> str:
        credentials = await account()
        assert await account() == credentials  # minted once per runner start
        seen.append(json.loads(credentials.read_text())["token"])
        return "pw-from-secret"

    request = RunRequest(paths, workflow("ls -a .. > /dev/null; echo ok"), secrets={"pw": from_secret})
    followed = asyncio.run(follow_run(ctx, request, Observer()))
    assert followed.status["phase"] == "Succeeded", followed.status
    assert seen == ["sa-token-of-team-a"]
    assert api.asked == ["POST /api/v1/namespaces/team-a/serviceaccounts/default/token"]
    assert not (paths.run_dir / runs.RUNNER_CREDENTIALS).exists()
    assert "sa-token-of-team-a" not in "".join(f.read_text(errors="replace") for f in paths.run_dir.rglob("*")
                                               if f.is_file())


@pytest.mark.parametrize("reason", [None, "the lock expired"])
def test_the_observer_aborts_the_run_and_says_why(tmp_path: Path, reason: str | None) -> None:
    ctx = context(tmp_path)
    request = RunRequest(paths_for(ctx), workflow("sleep 30"))
    followed = asyncio.run(follow_run(ctx, request, Observer(abort_with=Abort(reason))))
    assert followed.status["phase"] == "Aborted" and followed.aborted_for == reason


def test_a_killed_runner_is_started_again_and_the_count_carries_on(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    paths = paths_for(ctx)
    marks = tmp_path / "marks"
    marks.mkdir()
    request = RunRequest(paths, workflow(f"echo x >> {marks}/first", "sleep 1.5", f"echo x >> {marks}/last"))

    async def scenario() -> Any:
        supervision = asyncio.create_task(follow_run(ctx, request, Observer(), starts=1, writes=3))
        lock = paths.lock_file
        def first_recorded() -> str | None:
            # the second step running: the first is done and recorded (a runner killed between a step's
            # effect and its record runs that step again: at least once, see docs/architecture.md)
            status = read_status(paths) or {}
            done = any(s.get("step") == "s1" and s.get("state") == "running" for s in status.get("steps") or [])
            return lock.read_text().strip() if done and lock.exists() else None

        pid = await asyncio.to_thread(wait_until, first_recorded, 30, "the first step recorded, the runner holding "
                                      "its lock")
        os.kill(int(pid), signal.SIGKILL)
        return await asyncio.wait_for(supervision, 60)

    followed = asyncio.run(scenario())
    assert followed.status["phase"] == "Succeeded"
    assert followed.starts == 3  # one before (an operator restart), the first here, the one after the kill
    assert (marks / "first").read_text() == "x\n" and (marks / "last").read_text() == "x\n"
    assert read_status(paths) is not None
    # issue 27: each restart says why on the run (before: a log line "runner not running", no cause)
    unknown, killed = followed.restarts
    assert unknown.startswith("it ended while no operator process that started it was there to see how")
    assert killed.startswith("it was killed by signal SIGKILL") and killed.endswith("nothing on its stderr")
    events = ctx.services.events.recorded
    assert [(t, r) for t, r, _ in events] == [("Warning", "RunnerRestarted")] * 2
    assert events[1][2] == f"the run's runner is started again (start 3): {killed}"
    assert paths.runner_log.read_text().count(runs.RUNNER_START) == 2  # one per start here


def test_a_runner_that_exits_is_explained_on_the_run_by_its_code_and_stderr(tmp_path: Path) -> None:
    """Issue 27: a runner's stderr went to /dev/null, so a runner started again (once seen mid-run)
    left nobody knowing why. A runner that cannot start (a files root that is no directory) says why
    on its stderr; each restart shows its exit code and that line, until the run gives up."""
    ctx = context(tmp_path, ssh=runs.SshOptions(files_root=tmp_path / "missing"))
    followed = asyncio.run(follow_run(ctx, RunRequest(paths_for(ctx), workflow("true")), Observer()))
    assert followed.aborted_for == f"the runner stopped {runs.MAX_RUNNER_STARTS} times before the run finished"
    said = f"it exited with code 2 before the run ended; its last stderr lines: --ssh-files-root {tmp_path}/missing: " \
           "not a directory"
    assert followed.restarts == [said] * (runs.MAX_RUNNER_STARTS - 1)
    assert ctx.services.events.recorded[0] == ("Warning", "RunnerRestarted",
                                              f"the run's runner is started again (start 2): {said}")


def test_a_restart_reason_names_the_exit_the_stop_and_the_last_stderr_lines() -> None:
    tail = ["Traceback (most recent call last):", "MemoryError"]
    assert runs.restart_reason(1, None, tail) == (
        "it exited with code 1 before the run ended; its last stderr lines: Traceback (most recent call last): | "
        "MemoryError")
    assert runs.restart_reason(-signal.SIGSEGV, None, []) == (
        "it was killed by signal SIGSEGV; it wrote nothing on its stderr")
    assert runs.restart_reason(None, {"at": "2026-11-27T17:00:00Z", "why": "Ctrl-C"}, []) == (
        "the operator stopped it at 2026-11-27T17:00:00Z: Ctrl-C; it wrote nothing on its stderr")


def test_the_runner_log_is_bounded_and_its_tail_is_the_latest_runners(tmp_path: Path) -> None:
    paths = paths_for(context(tmp_path))
    paths.run_dir.mkdir(parents=True)
    paths.runner_log.write_text("old\n" * (runs.RUNNER_LOG_LIMIT // 2))
    os.close(runs.open_runner_log(paths))
    assert runs.runner_log_tail(paths) == []  # the latest runner said nothing yet
    with paths.runner_log.open("a") as log:
        log.write("one\n\n" + "x" * 400 + "\n")
    assert runs.runner_log_tail(paths) == ["one", "x" * runs.RESTART_TAIL_CHARS + "..."]
    assert paths.runner_log.stat().st_size <= runs.RUNNER_LOG_LIMIT
    os.close(runs.open_runner_log(paths))
    assert paths.runner_log.stat().st_size < runs.RUNNER_LOG_LIMIT // 4 + 1024  # cut to its last quarter
    assert paths.runner_log.stat().st_mode & 0o777 == 0o600


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_runs_stopped_with_the_operator_leave_nothing_running_and_resume_saying_why(tmp_path: Path) -> None:
    """Issue 27: Ctrl-C under `make run` left runners and their scripts running. `stop_runs` (the
    operator interrupted) stops the runner and its script without ending the run; the next
    supervision resumes it and says on the run that the operator had stopped it."""
    ctx = context(tmp_path)
    paths = paths_for(ctx)
    marks = tmp_path / "marks"
    marks.mkdir()
    nap = (f"if [ -e {marks}/napped ]; then echo resumed; "
           f"else touch {marks}/napped; echo $$ > {marks}/pid; exec sleep 600; fi")
    request = RunRequest(paths, workflow(f"echo x >> {marks}/first", nap))

    async def interrupted() -> tuple[int, int, list[str]]:
        supervision = asyncio.create_task(follow_run(ctx, request, Observer()))
        script = await asyncio.to_thread(wait_until, lambda: (marks / "pid").exists() and (marks / "pid").read_text(),
                                         30, "the script sleeping")
        runner = runner_pid(paths)
        assert runner is not None
        supervision.cancel()  # the operator's reconcilers stop first
        with contextlib.suppress(asyncio.CancelledError):
            await supervision
        return int(script), runner, await asyncio.to_thread(runs.stop_runs, paths.state_dir, "Ctrl-C")

    script, runner, stopped = asyncio.run(interrupted())
    assert stopped == [paths.uid]
    assert not _alive(runner) and not _alive(script)
    assert {s["step"]: s["state"] for s in (read_status(paths) or {})["steps"]} == {"s0": "success", "s1": "running"}
    followed = asyncio.run(follow_run(ctx, request, Observer(), starts=1))
    assert followed.status["phase"] == "Succeeded" and (marks / "first").read_text() == "x\n"
    (why,) = followed.restarts
    assert why.startswith("the operator stopped it at ") and ": Ctrl-C;" in why
    assert ctx.services.events.recorded[0][:2] == ("Normal", "RunnerRestarted")
    assert not (paths.run_dir / runs.STOPPED).exists()


def test_where_scripts_run_follows_the_operators_settings(tmp_path: Path) -> None:
    request = RunRequest(paths_for(context(tmp_path)), workflow("true"), scripts_on_runner=("task@host",))
    assert not in_jobs(context(tmp_path, "team-a"), request)
    assert not in_jobs(context(tmp_path, "eve"), RunRequest(request.paths, request.workflow))  # nothing local
    assert in_jobs(context(tmp_path, "eve", exec_in_jobs=True), request)
    with pytest.raises(UntrustedNamespace, match=r"namespace eve is not trusted .*task@host"):
        in_jobs(context(tmp_path, "eve"), request)


def test_runs_beyond_the_bound_are_queued_visibly_then_run(tmp_path: Path) -> None:
    slots = RunSlots(1)
    first, second = context(tmp_path, "team-a", "uid-1", slots), context(tmp_path, "team-b", "uid-2", slots)
    marks = tmp_path / "marks"
    marks.mkdir()
    waiting = Observer()

    async def scenario() -> None:
        one = asyncio.create_task(follow_run(first, RunRequest(paths_for(first), workflow(
            f"echo a >> {marks}/log; sleep 1; echo a >> {marks}/log")), Observer()))
        await asyncio.to_thread(wait_until, lambda: (marks / "log").exists(), 30, "the first run started")
        two = asyncio.create_task(follow_run(second, RunRequest(paths_for(second), workflow(
            f"echo b >> {marks}/log")), waiting))
        await asyncio.gather(one, two)

    asyncio.run(scenario())
    assert (marks / "log").read_text() == "a\na\nb\n"  # never two at once
    assert waiting.patches[0] == {"queued": "queued: 1 runs in progress (this operator runs at most 1 at once), "
                                            "0 queued before this one"}
    assert waiting.patches[1] == {"queued": None}  # running: shown before its progress
    assert slots.running == slots.queued == 0


# --- the cluster's Service CIDRs (never reachable from http and ssh steps) ---------------------------


class _ServiceCidrApi:
    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.paths: list[str] = []

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.paths.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_service_cidrs_are_read_from_the_clusters_servicecidr_objects(caplog: pytest.LogCaptureFixture) -> None:
    listing = {"items": [{"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/12", "fd00:10:96::/112"]}},
                         {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.200.0.0/16", "10.96.0.0/12"]}},
                         {"metadata": {"name": "empty"}}]}
    assert cidrs_of(listing) == ("10.96.0.0/12", "fd00:10:96::/112", "10.200.0.0/16")
    api = _ServiceCidrApi(listing)
    assert asyncio.run(discover_service_cidrs(api)) == cidrs_of(listing)
    assert api.paths == ["/apis/networking.k8s.io/v1/servicecidrs"]
    # An older cluster or no RBAC: the operator starts, says which flag to use, and refuses only private ranges.
    assert asyncio.run(discover_service_cidrs(_ServiceCidrApi(RuntimeError("404 Not Found")))) == ()
    assert "--service-cidr" in caplog.text


def test_service_cidrs_become_the_runners_deny_flags() -> None:
    settings = RunSettings(state_dir=Path("/x"), service_cidrs=("10.96.0.0/12", "fd00:10:96::/112"))
    assert settings.runner_deny_args() == ["--deny", "10.96.0.0/12", "--deny", "fd00:10:96::/112"]
