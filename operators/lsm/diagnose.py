"""Diagnose (issue 31, item 8): one report of what went wrong with a service instance, newest first, from what
Stead already keeps: the instance's log (transfers that took their error path: failed validations, failed
deployments), its validation problems and refused request, its Stalled condition, and its App's runs
(ActionRuns that failed, with the failing task and its message).

Pure: the caller (`stead service diagnose`) reads the instance, its App and the App's ActionRuns; this module
pairs them. A failed deployment in the log is paired with the failed ActionRun that caused it (the latest one
that ended before the transfer), so that the report says which task failed and where to read its output; a
failed run the lifecycle never saw as a deployment (a user action) is reported on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from operators.runtime import utc_seconds

FAILED_RUN_STATES = ("Failed", "Aborted")


def _stamp(value: Any) -> str:
    """A time in one format (a runner's end time may carry milliseconds or an offset), so that times compare."""
    try:
        return utc_seconds(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value or "")


def _end(run: Mapping[str, Any]) -> str:
    return _stamp((run.get("status") or {}).get("endTime") or (run.get("metadata") or {}).get("creationTimestamp"))


@dataclass(frozen=True)
class Finding:
    """One failure: when, at which version and state of the instance, set off by what, what failed, where to look."""

    kind: str
    """validation, realization, refused, run or stalled."""
    time: str
    version: int | None
    state: str | None
    trigger: str | None
    failure: str
    where: list[str] = field(default_factory=list)
    run: str | None = None
    task: str | None = None


@dataclass(frozen=True)
class Report:
    instance: str
    namespace: str
    state: str | None
    version: int | None
    app: str | None
    findings: list[Finding]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _task_failure(run: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The failing task (task@replica) of a run and its message (the replica's, else the run's reason)."""
    status = run.get("status") or {}
    for task in status.get("runLog") or []:
        for replica in task.get("replicas") or []:
            if replica.get("state") == "failure":
                where = f"{task.get('task')}@{replica['target']}" if replica.get("target") else str(task.get("task"))
                message = str(replica.get("message") or "")
                output = str(replica.get("output") or "").strip().splitlines()
                if output:
                    message = f"{message} (output: {output[-1]})" if message else f"output: {output[-1]}"
                return where, message or None
    return status.get("failedTask"), status.get("reason")


def _run_finding(run: Mapping[str, Any], namespace: str, at: tuple[int | None, str | None]) -> Finding:
    meta, spec, status = run.get("metadata") or {}, run.get("spec") or {}, run.get("status") or {}
    name = str(meta.get("name"))
    task, message = _task_failure(run)
    state = str(status.get("state"))
    failure = f"{spec.get('action')} action {state.lower()}" + (f" at {task}" if task else "") + \
              f": {message or status.get('reason') or state}"
    return Finding(kind="run", time=_end(run),
                   version=at[0], state=at[1], trigger=f"action {spec.get('action')}", failure=failure, run=name,
                   task=task, where=[f"stead actionrun logs {name} -n {namespace}",
                                     f"kubectl get actionrun {name} -n {namespace} -o yaml (status.runLog)"])


def _at(log: Sequence[Mapping[str, Any]], time: str) -> tuple[int | None, str | None]:
    """The instance's version and state at `time` (the last transfer at or before it)."""
    found: tuple[int | None, str | None] = (None, None)
    for entry in log:
        if _stamp(entry.get("time")) <= time:
            found = (entry.get("version"), entry.get("to"))
    return found


def diagnose(instance: Mapping[str, Any], app: Mapping[str, Any] | None,
             runs: Sequence[Mapping[str, Any]]) -> Report:
    """The report: every failure the instance and its App's runs record, newest first."""
    meta, status = instance.get("metadata") or {}, instance.get("status") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    log = list(status.get("log") or [])
    failed = sorted((r for r in runs if (r.get("status") or {}).get("state") in FAILED_RUN_STATES),
                    key=_end)
    paired: set[str] = set()
    findings: list[Finding] = []
    si = f"kubectl get si {name} -n {namespace} -o yaml"
    for entry in log:
        if not entry.get("error"):
            continue
        message = str(entry.get("message") or "")
        time = _stamp(entry.get("time"))
        common = {"time": time, "version": entry.get("version"), "state": entry.get("to"),
                  "trigger": entry.get("trigger")}
        if entry.get("trigger") == "resource_based":
            cause = next((r for r in reversed(failed) if str(r["metadata"]["name"]) not in paired
                          and _end(r) <= time), None)
            where = [f"stead service log {name} -n {namespace}"]
            run_name: str | None = None
            task: str | None = None
            if cause is not None:
                run_name = str(cause["metadata"]["name"])
                paired.add(run_name)
                task, detail = _task_failure(cause)
                if task:
                    message += f" [failing task {task}" + (f": {detail}]" if detail else "]")
                where = [f"stead actionrun logs {run_name} -n {namespace}", *where]
            elif app is not None:
                where.append(f"kubectl get app {app['metadata']['name']} -n {namespace} -o yaml (status.failure)")
            findings.append(Finding(kind="realization", failure=message, where=where, run=run_name, task=task,
                                    **common))
        else:
            findings.append(Finding(kind="validation", failure=message,
                                    where=[f"{si} (status.validationProblems)", "spec.attributes"], **common))
    for run in failed:
        if str(run["metadata"]["name"]) not in paired:
            findings.append(_run_finding(run, namespace, _at(log, _end(run))))
    refused = status.get("refused")
    if refused:
        findings.append(Finding(kind="refused", time=str(refused.get("time") or ""), version=status.get("version"),
                                state=status.get("state"), trigger=refused.get("trigger"),
                                failure=f"{refused.get('reason')}: {refused.get('message')}",
                                where=[f"{si} (status.refused)"]))
    stalled = next((c for c in status.get("conditions") or []
                    if c.get("type") == "Stalled" and c.get("status") == "True"), None)
    if stalled is not None and stalled.get("reason") not in ("ValidationFailed", "DeploymentFailed") and not refused:
        findings.append(Finding(kind="stalled", time=str(stalled.get("lastTransitionTime") or ""),
                                version=status.get("version"), state=status.get("state"), trigger=None,
                                failure=f"{stalled.get('reason')}: {stalled.get('message')}",
                                where=[f"kubectl describe si {name} -n {namespace}"]))
    findings.sort(key=lambda f: (f.time, f.version or 0), reverse=True)
    return Report(instance=name, namespace=namespace, state=status.get("state"), version=status.get("version"),
                  app=status.get("app"), findings=findings)


def format_report(report: Report) -> str:
    """The report as `stead service diagnose` prints it: a heading, then one block per failure, newest first."""
    lines = [f"serviceinstance/{report.instance}  state {report.state or '-'}  version {report.version or '-'}  "
             f"app {report.app or '-'}"]
    if not report.findings:
        lines.append("no failures recorded: no failed validation, deployment, run or refused request")
        return "\n".join(lines)
    lines.append(f"{len(report.findings)} failure(s), newest first:")
    for finding in report.findings:
        head = f"v{finding.version}" if finding.version is not None else "v-"
        lines.append(f"- {head}  {finding.state or '-'}  {finding.trigger or '-'}  {finding.kind}  {finding.time}")
        lines.append(f"    {finding.failure}")
        if finding.task:
            lines.append(f"    failing task: {finding.task}" + (f" (ActionRun {finding.run})" if finding.run else ""))
        for where in finding.where:
            lines.append(f"    look: {where}")
    return "\n".join(lines)
