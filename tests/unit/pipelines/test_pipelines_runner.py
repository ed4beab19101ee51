"""The engine in-process: order, parallelism, failures, retries, variables, secrets, abort, resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import luigi
import pytest
from cryptography.exceptions import InvalidTag
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.control import forget_run, is_running, read_output, read_progress, read_status
from pipelines.executors import StepContext, StepFailed, StepResult, default_executors
from pipelines.hooks import MASK, SUBSTITUTE, Hooks, SealedSecrets, new_run_key, seal, substitute
from pipelines.model import Instance, Workflow
from pipelines.paths import RunPaths
from pipelines.runner import AlreadyRunning, FastScheduler, Runner, RunOutcome, run_workflow
from pipelines.store import open_store
from tests.polling import wait_until


def wf(*steps: dict[str, Any], **extra: Any) -> Workflow:
    return Workflow.model_validate({"steps": list(steps), **extra})


class Recorder:
    """A step type that records when each instance starts and ends (and can fail on demand)."""

    def __init__(self, pause: float = 0.0, fail: set[str] | None = None) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.active = 0
        self.max_active = 0
        self.pause = pause
        self.fail = fail or set()

    def run(self, ctx: StepContext) -> StepResult:
        with self.lock:
            self.events.append(("start", ctx.key))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.pause:
                time.sleep(self.pause)
            if ctx.key in self.fail:
                raise StepFailed(f"{ctx.key} was told to fail", exit_code=9)
            return StepResult(variables=dict(ctx.parameters.get("set", {})))
        finally:
            with self.lock:
                self.active -= 1
                self.events.append(("end", ctx.key))

    def started(self) -> list[str]:
        return [key for kind, key in self.events if kind == "start"]


def executors(recorder: Recorder) -> dict[str, Any]:
    return {**default_executors(), "rec": recorder}


def records(state: Path, uid: str) -> dict[str, dict[str, Any]]:
    status = read_status(RunPaths(state, uid))
    assert status is not None
    return {(f"{r['step']}@{r['target']}" if r["target"] else r["step"]): r for r in status["steps"]}


# -- order and parallelism ------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=30), max_size=3), min_size=1, max_size=14),
       st.integers(min_value=1, max_value=4))
def test_every_instance_runs_once_after_everything_it_requires(edges: list[list[int]], targets: int) -> None:
    steps = []
    for i, deps in enumerate(edges):
        step: dict[str, Any] = {"id": f"s{i}", "type": "rec", "dependsOn": sorted({f"s{j}" for j in deps if j < i})}
        if i % 2:
            step["target"] = [f"t{k}" for k in range(targets)]
        steps.append(step)
    workflow = wf(*steps, parallelism=4)
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_workflow(workflow, "r1", Path(tmp), executors=executors(recorder))
    assert outcome.phase == "Succeeded"
    started = recorder.started()
    ended = [key for kind, key in recorder.events if kind == "end"]
    expected = {inst.key for inst in workflow.instances()}
    assert sorted(started) == sorted(expected)
    for inst, needs in workflow.requirements().items():
        for need in needs:
            assert ended.index(need.key) < started.index(inst.key), f"{inst} started before {need} ended"


def test_parallelism_bounds_concurrent_steps(tmp_path: Path) -> None:
    recorder = Recorder(pause=0.05)
    workflow = wf(*({"id": f"s{i}", "type": "rec"} for i in range(12)), parallelism=3)
    assert run_workflow(workflow, "r1", tmp_path, executors=executors(recorder)).phase == "Succeeded"
    assert recorder.max_active == 3


# -- failure, retries -------------------------------------------------------------------------------


def test_a_failure_stops_the_run_and_skips_what_did_not_run(tmp_path: Path) -> None:
    recorder = Recorder(pause=0.02, fail={"b"})
    workflow = wf(
        {"id": "a", "type": "rec"},
        {"id": "b", "type": "rec", "dependsOn": ["a"]},
        {"id": "c", "type": "rec", "dependsOn": ["b"]},
        *({"id": f"x{i}", "type": "rec", "dependsOn": ["a"]} for i in range(6)),
        parallelism=1,
    )
    outcome = run_workflow(workflow, "r1", tmp_path, executors=executors(recorder))
    assert outcome.phase == "Failed" and outcome.exit_code == 1
    assert outcome.message == "step b failed: b was told to fail"
    recs = records(tmp_path, "r1")
    assert recs["b"]["state"] == "failure" and recs["b"]["exitCode"] == 9
    assert recs["c"]["state"] == "skipped" and "the run failed" in recs["c"]["message"]
    # nothing starts once b has failed
    assert all(kind == "end" for kind, _ in recorder.events[recorder.events.index(("end", "b")):])
    assert sum(r["state"] == "skipped" for r in recs.values()) == 9 - len(recorder.started())


def test_continue_on_failure_runs_every_independent_branch(tmp_path: Path) -> None:
    recorder = Recorder(fail={"b"})
    workflow = wf(
        {"id": "a", "type": "rec"}, {"id": "b", "type": "rec", "dependsOn": ["a"]},
        {"id": "c", "type": "rec", "dependsOn": ["b"]},
        *({"id": f"x{i}", "type": "rec", "dependsOn": ["a"]} for i in range(6)),
        parallelism=1, continueOnFailure=True,
    )
    outcome = run_workflow(workflow, "r1", tmp_path, executors=executors(recorder))
    assert outcome.phase == "Failed" and outcome.counts == {"success": 7, "failure": 1, "skipped": 1}


def test_retries_repeat_a_failed_step_with_its_interval(tmp_path: Path) -> None:
    script = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo try $n; [ $n -ge 3 ]"
    workflow = wf({"id": "flaky", "type": "exec", "retries": 3, "retryIntervalSeconds": 0.1,
                   "parameters": {"script": script}})
    started = time.monotonic()
    assert run_workflow(workflow, "r1", tmp_path).phase == "Succeeded"
    assert time.monotonic() - started >= 0.2
    rec = records(tmp_path, "r1")["flaky"]
    assert (rec["state"], rec["attempts"], rec["exitCode"]) == ("success", 3, 0)
    full = read_output(RunPaths(tmp_path, "r1"), "flaky")
    assert "try 1\nthe script exited with code 1; it ran as uid " in full
    assert "attempt 1 failed: script exited with code 1 (ran as uid " in full and "\n--- attempt 2 ---\ntry 2" in full
    assert rec["output"] == "try 3"


def test_retries_run_out(tmp_path: Path) -> None:
    workflow = wf({"id": "bad", "type": "exec", "retries": 1, "parameters": {"script": "echo no; exit 4"}})
    outcome = run_workflow(workflow, "r1", tmp_path)
    rec = records(tmp_path, "r1")["bad"]
    assert outcome.phase == "Failed" and (rec["attempts"], rec["exitCode"]) == (2, 4)
    assert rec["message"].startswith("script exited with code 4 (ran as uid ")


def test_unknown_types_and_bad_macros_fail_the_step_with_a_reason(tmp_path: Path) -> None:
    workflow = wf({"id": "a", "type": "teleport"}, {"id": "b", "type": "noop", "parameters": {"x": "@@{nope}@@"}},
                  continueOnFailure=True)
    run_workflow(workflow, "r1", tmp_path, hooks=SUBSTITUTE)
    recs = records(tmp_path, "r1")
    assert recs["a"]["message"] == "unknown step type 'teleport'"
    assert recs["b"]["message"] == "MacroError: unresolved macro @@{nope}@@"


# -- variables, macros, secrets ---------------------------------------------------------------------


def test_variables_flow_between_steps_by_target(tmp_path: Path) -> None:
    seen: dict[str, dict[str, str]] = {}

    class Probe:
        def run(self, ctx: StepContext) -> StepResult:
            names = ("who", "ip", "r1:ip", "r2:ip", "cluster")
            seen[ctx.key] = {k: ctx.variables[k] for k in names if k in ctx.variables}
            return StepResult()

    workflow = wf(
        {"id": "name", "type": "setvar",
         "parameters": {"script": "echo cluster=c-@@{app}@@", "variables": ["cluster"]}},
        {"id": "ip", "type": "setvar", "target": ["r1", "r2"], "dependsOn": ["name"],
         "parameters": {"script": "echo ip=10.0.0.@@{idx}@@", "variables": ["ip"]}},
        {"id": "probe", "type": "probe", "target": ["r1", "r2"], "dependsOn": ["ip"]},
        {"id": "all", "type": "probe", "dependsOn": [{"step": "ip", "targets": "all"}]},
        variables={"app": "web", "who": "workflow"}, targets={"r1": {"idx": "1", "who": "r1"}, "r2": {"idx": "2"}},
    )
    outcome = run_workflow(workflow, "r1", tmp_path, hooks=SUBSTITUTE,
                           executors={**default_executors(), "probe": Probe()})
    assert outcome.phase == "Succeeded"
    # probe@r1 waits for ip@r1 only: what ip@r2 sets may or may not be there yet
    assert seen["probe@r1"].items() >= {"who": "r1", "ip": "10.0.0.1", "r1:ip": "10.0.0.1", "cluster": "c-web"}.items()
    assert seen["probe@r2"]["who"] == "workflow" and seen["probe@r2"]["ip"] == "10.0.0.2"
    assert "ip" not in seen["all"] and seen["all"]["r2:ip"] == "10.0.0.2"
    assert records(tmp_path, "r1")["ip@r2"]["variables"] == {"ip": "10.0.0.2"}


def test_secrets_are_revealed_at_step_start_and_masked_everywhere(tmp_path: Path) -> None:
    key = new_run_key()
    revealed: list[str] = []
    sealed = SealedSecrets(key)

    def secret(ref: str) -> str:
        revealed.append(ref)
        return sealed(ref)

    events: list[dict[str, Any]] = []
    workflow = wf(
        {"id": "before", "type": "exec", "parameters": {"script": "echo nothing secret"}},
        {"id": "use", "type": "exec", "dependsOn": ["before"], "parameters": {
            "script": "echo pw=@@{db_password}@@; echo $TOKEN; echo api=$API; exit 2",
            "env": {"TOKEN": "@@{db_password}@@", "API": {"secretRef": seal("k-123456", key, "api")}}}},
        secrets={"db_password": seal("hunter2-secret", key, "db_password")},
    )
    hooks = Hooks(render=substitute, secret=secret, mask=lambda s: s.replace("CALLER", "<caller>"))
    outcome = run_workflow(workflow, "r1", tmp_path, hooks=hooks, events=events.append)
    assert outcome.phase == "Failed"
    assert len(revealed) == 2  # each secret once, when `use` started (never for `before`)
    paths = RunPaths(tmp_path, "r1")
    everything = json.dumps(read_status(paths)) + json.dumps(events) + read_output(paths, "use")
    everything += (paths.status_file.read_text())
    assert "hunter2" not in everything and "k-123456" not in everything
    assert read_output(paths, "use").startswith(f"pw={MASK}\n{MASK}\napi={MASK}\nthe script exited with code 2; ")
    assert "sealed:" not in read_output(paths, "use")


def test_sealed_secrets_are_bound_to_their_name() -> None:
    key = new_run_key()
    ref = seal("v", key, "a")
    assert SealedSecrets(key)(ref) == "v"
    forged = ref.replace("sealed:a:", "sealed:b:")
    with pytest.raises(InvalidTag):
        SealedSecrets(key)(forged)


# -- abort -----------------------------------------------------------------------------------------


def test_abort_stops_the_running_step_and_marks_the_rest_aborted(tmp_path: Path) -> None:
    workflow = wf(
        {"id": "quick", "type": "noop"},
        {"id": "long", "type": "exec", "dependsOn": ["quick"], "target": ["r1", "r2"],
         "parameters": {"script": "echo started; sleep 60"}},
        {"id": "after", "type": "noop", "dependsOn": ["long"]},
    )
    runner = Runner(workflow, "r1", tmp_path)
    result: list[RunOutcome] = []
    thread = threading.Thread(target=lambda: result.append(runner.run()))
    thread.start()
    paths = RunPaths(tmp_path, "r1")
    wait_until(lambda: read_output(paths, "long", "r1") and read_output(paths, "long", "r2"), what="long to start")
    assert is_running(paths)
    started = time.monotonic()
    runner.abort()
    thread.join(timeout=20)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert result[0].phase == "Aborted" and result[0].exit_code == 3
    recs = records(tmp_path, "r1")
    assert recs["quick"]["state"] == "success"
    assert recs["long@r1"]["state"] == recs["long@r2"]["state"] == recs["after"]["state"] == "aborted"
    assert not is_running(paths)


def test_an_abort_file_present_at_start_aborts_at_once(tmp_path: Path) -> None:
    workflow = wf({"id": "a", "type": "exec", "parameters": {"script": "touch ran"}})
    paths = RunPaths(tmp_path, "r1")
    paths.run_dir.mkdir(parents=True)
    paths.abort_file.touch()
    outcome = run_workflow(workflow, "r1", tmp_path)
    assert outcome.phase == "Aborted" and records(tmp_path, "r1")["a"]["state"] == "aborted"
    assert not (paths.instance_workdir("a") / "ran").exists()


# -- resume ----------------------------------------------------------------------------------------


def test_a_failed_run_started_again_repeats_only_what_did_not_succeed(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workflow = wf(
        {"id": "a", "type": "exec", "parameters": {"script": f"echo x >> {marks}/a"}},
        {"id": "b", "type": "exec", "dependsOn": ["a"],
         "parameters": {"script": f"echo x >> {marks}/b; test -f {marks}/ok"}},
        {"id": "c", "type": "setvar", "dependsOn": ["b"], "parameters": {"script": "echo v=1", "variables": ["v"]}},
    )
    assert run_workflow(workflow, "u", tmp_path).phase == "Failed"
    (marks / "ok").touch()
    events: list[dict[str, Any]] = []
    assert run_workflow(workflow, "u", tmp_path, events=events.append).phase == "Succeeded"
    assert (marks / "a").read_text() == "x\n" and (marks / "b").read_text() == "x\nx\n"
    assert events[0] == {**events[0], "event": "run", "resumed": True}
    status = read_status(RunPaths(tmp_path, "u"))
    assert status is not None and status["runs"] == 2 and status["phase"] == "Succeeded"
    assert records(tmp_path, "u")["b"]["attempts"] == 2
    # a finished run started again does nothing at all
    assert run_workflow(workflow, "u", tmp_path).phase == "Succeeded"
    assert (marks / "a").read_text() == "x\n"


def test_a_second_runner_of_the_same_run_is_refused(tmp_path: Path) -> None:
    workflow = wf({"id": "a", "type": "delay", "parameters": {"seconds": 30}})
    runner = Runner(workflow, "r1", tmp_path)
    thread = threading.Thread(target=runner.run)
    thread.start()
    paths = RunPaths(tmp_path, "r1")
    wait_until(lambda: (records(tmp_path, "r1").get("a") or {}).get("state") == "running" if paths.store.exists()
               and read_status(paths) else False, what="a to run")
    with pytest.raises(AlreadyRunning):
        Runner(workflow, "r1", tmp_path).run()
    runner.abort()
    thread.join(timeout=20)


# -- status ----------------------------------------------------------------------------------------


def test_progress_reaches_the_caller(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    workflow = wf(*({"id": f"s{i}", "type": "noop", "dependsOn": [f"s{i - 1}"] if i else []} for i in range(5)),
                  name="five")
    run_workflow(workflow, "r1", tmp_path, events=events.append)
    progress = read_progress(RunPaths(tmp_path, "r1"))
    assert progress is not None
    assert progress["phase"] == "Succeeded" and progress["progress"] == {"done": 5, "total": 5}
    assert progress["workflow"] == "five" and progress["running"] == [] and progress["counts"] == {"success": 5}
    steps = [e for e in events if e["event"] == "step"]
    assert [e["state"] for e in steps] == ["running", "success"] * 5
    assert [e["done"] for e in steps if e["state"] == "success"] == [1, 2, 3, 4, 5]
    assert events[-1]["event"] == "run" and events[-1]["phase"] == "Succeeded"
    status = read_status(RunPaths(tmp_path, "r1"))
    assert status is not None and status["progress"] == {"done": 5, "total": 5}
    for rec in status["steps"]:
        assert rec["startedAt"] <= rec["finishedAt"]


def test_output_in_status_is_bounded_and_whole_in_the_file(tmp_path: Path) -> None:
    workflow = wf({"id": "chatty", "type": "exec", "parameters": {"script": "seq 1 5000"}})
    run_workflow(workflow, "r1", tmp_path, output_limit=200)
    rec = records(tmp_path, "r1")["chatty"]
    assert len(rec["output"]) < 300 and rec["output"].endswith("\n5000")
    assert rec["output"].startswith("[... ")
    assert read_output(RunPaths(tmp_path, "r1"), "chatty").splitlines() == [str(i) for i in range(1, 5001)]


def test_each_run_has_a_store_of_its_own(tmp_path: Path) -> None:
    workflow = wf({"id": "a", "type": "noop"})
    run_workflow(workflow, "one", tmp_path)
    run_workflow(workflow, "two", tmp_path)
    one, two = (open_store(RunPaths(tmp_path, uid).store) for uid in ("one", "two"))
    assert one.path != two.path and one.run_ids() == ["one"] and two.run_ids() == ["two"]
    assert one.is_done("one", "a") and two.is_done("two", "a")
    assert forget_run(RunPaths(tmp_path, "one")) == 4  # step record, its Target, the run's Target, the run record
    assert not one.is_done("one", "a") and two.is_done("two", "a")


HOLDER = """
import sys
from pathlib import Path
from pipelines.paths import RunPaths
from pipelines.store import open_store
state, uid = Path(sys.argv[1]), sys.argv[2]
store = open_store(RunPaths(state, uid).store)
store.put_run(uid, {"phase": "running"})
print("open", flush=True)
sys.stdin.readline()  # the store stays open (a runner in its run) until told
store.put_step(uid, "a", {"state": "success"}, done=True)
print("done", flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="PID namespaces need root")
def test_runs_of_processes_in_other_pid_namespaces_on_one_state_volume(tmp_path: Path) -> None:
    """Sharded replicas share the runs volume, each in a Pod of its own: same pids (1, and small ones
    for runners) in different PID namespaces. LMDB tells readers apart by pid: one store for all runs
    failed every transaction of the second replica (`mdb_txn_begin: Resource temporarily unavailable`)."""
    def holder(uid: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", HOLDER, str(tmp_path), uid],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
        assert process.stdout is not None
        assert process.stdout.readline() == "open\n", process.communicate(timeout=30)[1]
        return process

    first = holder("replica-a-run")
    second = holder("replica-b-run")  # while the first holds its store open
    for process in (second, first):
        out, err = process.communicate("\n", timeout=30)
        assert (process.returncode, out) == (0, "done\n"), err


# -- the scheduler on its own ----------------------------------------------------------------------


class Plain(luigi.Task):
    """Stock Luigi tasks, to show FastScheduler is a drop-in scheduler for Luigi's worker."""

    n = luigi.IntParameter()
    log: ClassVar[list[int]] = []

    def requires(self) -> list[Plain]:
        return [Plain(n=self.n - 1), Plain(n=self.n - 2)] if self.n >= 2 else []

    def complete(self) -> bool:
        return self.n in self.log

    def run(self) -> None:
        self.log.append(self.n)


def test_fast_scheduler_drives_a_stock_worker() -> None:
    class Factory:
        def create_local_scheduler(self) -> FastScheduler:
            return FastScheduler()

        def create_worker(self, scheduler: Any, worker_processes: int, assistant: bool = False) -> Any:
            return luigi.worker.Worker(scheduler=scheduler, worker_processes=worker_processes)

    Plain.log.clear()
    assert luigi.build([Plain(n=12)], worker_scheduler_factory=Factory(), local_scheduler=True,
                       log_level="WARNING")
    assert sorted(Plain.log) == list(range(13))
    for i, n in enumerate(Plain.log):
        if n >= 2:
            assert {n - 1, n - 2} <= set(Plain.log[:i])


def test_instance_helpers() -> None:
    assert str(Instance("a", "b")) == "a@b"


def _group_workflow(may_fail: int) -> Workflow:
    """Per node n1..n3: install -> configure (chained on the node); report waits for every configure."""
    nodes = ["n1", "n2", "n3"]
    steps = [{"id": "install", "type": "rec", "target": nodes},
             {"id": "configure", "type": "rec", "target": nodes, "dependsOn": ["install"]},
             {"id": "report", "type": "rec", "dependsOn": [{"step": "configure", "targets": "all"}]}]
    return wf(*steps, tolerance=[{"steps": ["install", "configure"], "mayFail": may_fail}])


def test_a_failure_within_a_group_s_tolerance_takes_its_target_out_and_the_run_goes_on(tmp_path: Path) -> None:
    recorder = Recorder(fail={"install@n2"})
    outcome = run_workflow(_group_workflow(1), "tol", tmp_path, executors=executors(recorder))
    assert outcome.phase == "Succeeded" and "out of the run: n2" in outcome.message
    found = records(tmp_path, "tol")
    assert found["install@n2"]["state"] == "failure" and found["install@n2"]["tolerated"]
    assert "tolerated: up to 1 target(s)" in found["install@n2"]["message"]
    assert found["configure@n2"]["state"] == "skipped" and "since install@n2 failed" in found["configure@n2"]["message"]
    assert "configure@n2" not in recorder.started() and {"configure@n1", "configure@n3", "report"} <= set(
        recorder.started())
    # a second runner of the same run repeats nothing: the tolerated failure and the exclusion stand
    again = Recorder()
    assert run_workflow(_group_workflow(1), "tol", tmp_path, executors=executors(again)).phase == "Succeeded"
    assert again.started() == []


def test_one_failure_more_than_the_group_tolerates_fails_the_run(tmp_path: Path) -> None:
    recorder = Recorder(fail={"install@n1", "install@n2"})
    outcome = run_workflow(_group_workflow(1), "tol2", tmp_path, executors=executors(recorder))
    assert outcome.phase == "Failed"
    found = records(tmp_path, "tol2")
    failed = [key for key in ("install@n1", "install@n2") if not found[key].get("tolerated")]
    assert len(failed) == 1 and "report" not in recorder.started()
    without = run_workflow(_group_workflow(0), "tol0", tmp_path, executors=executors(Recorder(fail={"install@n3"})))
    assert without.phase == "Failed"  # mayFail 0: any failure fails the run, as without a group


def test_tolerance_names_steps_that_exist() -> None:
    with pytest.raises(ValueError, match=r"tolerance\[0\]\.steps: 'nope' not steps"):
        wf({"id": "a", "type": "noop"}, tolerance=[{"steps": ["nope"], "mayFail": 1}])


def test_step_task_fast_paths_answer_as_luigi_does() -> None:
    """`StepTask`'s parameter fast paths (issue 32) give what Luigi's own methods give: the task id
    luigid shows, the parameters and visibilities reported to the scheduler."""
    from pipelines.runner import StepTask

    task = StepTask(run_uid="fast-paths", step="s1", target="n1")
    assert task.to_str_params() == luigi.Task.to_str_params(task) == {"run_uid": "fast-paths", "step": "s1",
                                                                      "target": "n1"}
    assert task.to_str_params(only_significant=True, only_public=True) == luigi.Task.to_str_params(task, True, True)
    assert task._get_param_visibilities() == luigi.Task._get_param_visibilities(task)
    params = StepTask.get_params()
    kwargs = {"run_uid": "fast-paths", "step": "s1", "target": "n1"}
    assert StepTask.get_param_values(params, (), kwargs) == luigi.Task.get_param_values.__func__(  # type: ignore[attr-defined]
        StepTask, params, (), kwargs)
    # Anything else goes through Luigi: the default target, and its errors.
    assert StepTask(run_uid="fast-paths", step="s1").target == ""
    with pytest.raises(luigi.parameter.UnknownParameterException):
        StepTask(run_uid="fast-paths", step="s1", node="n1")
    assert StepTask(run_uid="fast-paths", step="s1", target="n1") is task  # Luigi's instance cache still holds


def test_runner_builds_each_luigi_task_once(tmp_path: Path) -> None:
    """A wide step's requirement is one task object however many dependents name it."""
    workflow = wf({"id": "first", "type": "noop"},
                  *({"id": f"m{i}", "type": "noop", "dependsOn": ["first"]} for i in range(3)),
                  {"id": "last", "type": "noop", "dependsOn": ["m0", "m1", "m2"]})
    runner = Runner(workflow, "once", tmp_path)
    firsts = {id(runner.requirement_tasks(Instance(f"m{i}"))[0]) for i in range(3)}
    assert len(firsts) == 1
    assert runner.task(Instance("first")) is runner.requirement_tasks(Instance("m0"))[0]
    assert runner.run().phase == "Succeeded"


def test_fast_scheduler_reuses_its_tasks_and_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports of known tasks and calls of a known worker build no throwaway objects (issue 32: the stock
    scheduler built two tasks per step, a placeholder per dependency on every report, and a worker on
    every call), and the state keeps Luigi's statuses."""
    import luigi.scheduler
    from luigi.task_status import DONE, PENDING, RUNNING, UNKNOWN

    built: list[str] = []
    for cls in (luigi.scheduler.Task, luigi.scheduler.Worker):
        stock = cls.__init__

        def counting(self: Any, *args: Any, __stock: Any = stock, __name: str = cls.__name__, **kwargs: Any) -> None:
            built.append(__name)
            __stock(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
    scheduler = FastScheduler()
    scheduler.add_task(worker="w", task_id="a", status=PENDING, deps=[], runnable=True)
    scheduler.add_task(worker="w", task_id="b", status=PENDING, deps=["a"], runnable=True)
    assert sorted(built) == ["Task", "Task", "Worker"]
    a, b = scheduler._state.get_task("a"), scheduler._state.get_task("b")
    assert scheduler.get_work(worker="w")["task_id"] == "a"
    assert a.status == RUNNING
    scheduler.add_task(worker="w", task_id="a", status=DONE, runnable=None)
    scheduler.add_task(worker="w", task_id="b", status=PENDING, deps=["a"], runnable=True)
    assert scheduler.get_work(worker="w")["task_id"] == "b"
    scheduler.add_task(worker="w", task_id="b", status=DONE, runnable=None)
    assert sorted(built) == ["Task", "Task", "Worker"]  # nothing new for known tasks and a known worker
    assert scheduler._state.get_task("a") is a and scheduler._state.get_task("b") is b
    assert (a.status, b.status) == (DONE, DONE)
    scheduler.add_task(worker="w", task_id="c", status=PENDING, deps=["b", "d"], runnable=True)
    assert scheduler._state.get_task("d").status == UNKNOWN  # a placeholder for a dependency not yet added
    assert scheduler._state.get_task("c").deps == {"b", "d"}
