"""`KubernetesJob`: scripts as Jobs in the workflow's namespace, under its service account."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from pipelines.executors.base import (
    StepAborted,
    StepContext,
    StepFailed,
)
from pipelines.executors.script.steps import LineSink
from pipelines.kubeapi import KubeApi, KubeApiError


class KubernetesJob:
    """Runs scripts as Jobs in one namespace, under that namespace's service account.

    The script and the environment travel in a Secret (never in the Job's spec, which anyone who
    can list Jobs reads), owned by the Job so Kubernetes collects both. The Job name is derived
    from the run, the instance and the attempt: a restarted runner finds the Job of the attempt it
    was waiting for and waits again instead of starting the script a second time.

    The pod passes the Pod Security "restricted" profile: a non-root user, group and fsGroup
    (`run_as_user`, 65532 by default), the RuntimeDefault seccomp profile, no privilege escalation,
    every capability dropped, a read-only root filesystem with size-limited emptyDirs at /work (the
    working directory and ``HOME``) and /tmp, and requests and limits of cpu, memory and ephemeral
    storage (`requests`, `limits`; a namespace's ResourceQuota may demand them). No service-account
    token is mounted (`automount_token`): the runner talks to the API server, the script does not.

    A Job whose pods cannot be created (refused by Pod Security admission, a ResourceQuota, a
    missing service account...) never fails by itself: the Job controller records FailedCreate
    Events on it and retries forever. So once the Job has had no pod for `failed_create_grace`
    seconds, its FailedCreate Events fail the step with Kubernetes' message and the Job is deleted;
    when the runner may not read Events (they need ``list`` on ``events``), the step fails after
    `no_pod_timeout` seconds without a pod, saying so. The pod's log is read with ``limitBytes``
    (`log_limit_bytes`); a log that was cut is said to be on stderr.
    """

    DEFAULT_REQUESTS: Mapping[str, str] = {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"}
    DEFAULT_LIMITS: Mapping[str, str] = {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}

    def __init__(
        self, api: KubeApi, namespace: str, service_account: str = "default",
        image: str = "python:3.11-slim", poll_interval: float = 1.0, ttl_seconds: int = 3600, *,
        run_as_user: int = 65532, requests: Mapping[str, str] | None = None,
        limits: Mapping[str, str] | None = None, work_size_limit: str = "1Gi", tmp_size_limit: str = "256Mi",
        automount_token: bool = False, failed_create_grace: float = 20.0, no_pod_timeout: float = 60.0,
        log_limit_bytes: int = 1024 * 1024,
    ) -> None:
        if run_as_user <= 0:
            raise ValueError("run_as_user must be a non-root id (> 0): the restricted profile refuses root")
        if log_limit_bytes <= 0:
            raise ValueError("log_limit_bytes must be positive")
        self.api = api
        self.namespace = namespace
        self.service_account = service_account
        self.image = image
        self.poll_interval = poll_interval
        self.ttl_seconds = ttl_seconds
        self.run_as_user = run_as_user
        self.requests = dict(self.DEFAULT_REQUESTS if requests is None else requests)
        self.limits = dict(self.DEFAULT_LIMITS if limits is None else limits)
        self.work_size_limit = work_size_limit
        self.tmp_size_limit = tmp_size_limit
        self.automount_token = automount_token
        self.failed_create_grace = failed_create_grace
        self.no_pod_timeout = max(no_pod_timeout, failed_create_grace)
        self.log_limit_bytes = log_limit_bytes

    def job_name(self, ctx: StepContext) -> str:
        digest = hashlib.sha256(f"{ctx.run_uid}/{ctx.key}/{ctx.attempt}".encode()).hexdigest()[:24]
        return f"stead-step-{digest}"

    def manifests(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Job and its Secret (without the owner reference, known only once the Job exists)."""
        name = self.job_name(ctx)
        labels = {"app.kubernetes.io/managed-by": "stead", "stead.dev/step": name}
        command = {"sh": "/bin/sh", "bash": "bash", "python": "python3"}[interpreter]
        secret: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "type": "Opaque",
            "stringData": {"script": script, **{f"env-{k}": v for k, v in env.items()}},
        }
        job: dict[str, Any] = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": name, "namespace": self.namespace, "labels": labels,
                "annotations": {"stead.dev/run": ctx.run_uid, "stead.dev/instance": ctx.key},
            },
            "spec": {
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": self.ttl_seconds,
                **({"activeDeadlineSeconds": max(1, int(ctx.timeout))} if ctx.timeout else {}),
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": self.service_account,
                        "automountServiceAccountToken": self.automount_token,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": self.run_as_user,
                            "runAsGroup": self.run_as_user,
                            "fsGroup": self.run_as_user,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [{
                            "name": "step",
                            "image": self.image,
                            "command": [command, "/stead/script"],
                            "workingDir": "/work",
                            "env": [
                                *([] if "HOME" in env else [{"name": "HOME", "value": "/work"}]),
                                *({"name": k, "valueFrom": {"secretKeyRef": {"name": name, "key": f"env-{k}"}}}
                                  for k in env),
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                            },
                            "resources": {"requests": dict(self.requests), "limits": dict(self.limits)},
                            "volumeMounts": [
                                {"name": "script", "mountPath": "/stead", "readOnly": True},
                                {"name": "work", "mountPath": "/work"},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }],
                        "volumes": [
                            {"name": "script", "secret": {"secretName": name, "defaultMode": 0o555,
                                                          "items": [{"key": "script", "path": "script"}]}},
                            {"name": "work", "emptyDir": {"sizeLimit": self.work_size_limit}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": self.tmp_size_limit}},
                        ],
                    },
                },
            },
        }
        return job, secret

    def runs_as(self) -> str:
        return f"uid {self.run_as_user} in a Job's Pod in namespace {self.namespace}"

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int:
        ctx.check()
        job, secret = self.manifests(ctx, interpreter, script, env)
        name = job["metadata"]["name"]
        existing = self.api.get("batch/v1", "Job", self.namespace, name)
        if existing is None:
            created = self.api.create(job)
            secret["metadata"]["ownerReferences"] = [{
                "apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": created["metadata"]["uid"], "controller": False,
            }]
            self.api.create(secret)
        else:
            ctx.output(f"waiting again for Job {self.namespace}/{name} of this attempt", "stderr")
        no_pod_since: float | None = None
        while True:
            current = self.api.get("batch/v1", "Job", self.namespace, name)
            if current is None:
                raise StepFailed(f"Job {self.namespace}/{name} disappeared")
            outcome = _job_outcome(current)
            if outcome is not None:
                break
            if ctx.abort.is_set():
                self.api.delete("batch/v1", "Job", self.namespace, name)
                raise StepAborted(f"{ctx.key}: aborted (Job {name} deleted)")
            if ctx.timed_out():
                self.api.delete("batch/v1", "Job", self.namespace, name)
                raise StepFailed(f"timed out after {ctx.timeout:g}s (Job {name} deleted)")
            if _job_has_pods(current):
                no_pod_since = None
            else:
                now = time.monotonic()
                no_pod_since = now if no_pod_since is None else no_pod_since
                if now - no_pod_since >= self.failed_create_grace:
                    self._fail_if_pods_cannot_be_created(current, now - no_pod_since)
            ctx.abort.wait(self.poll_interval)
        code = 0 if outcome == "Complete" else 1
        if outcome == "Failed":  # why Kubernetes gave up (BackoffLimitExceeded, DeadlineExceeded, ...)
            for cond in (current.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Failed" and cond.get("status") == "True":
                    ctx.output(f"Job {name} failed: {cond.get('reason', '')}: {cond.get('message', '')}", "stderr")
        pods = self.api.list("v1", "Pod", self.namespace, f"job-name={name}")
        if pods:
            pod = max(pods, key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))
            code = _container_exit_code(pod, default=code)
            pod_name = pod["metadata"]["name"]
            # one byte more than kept: a log longer than the limit is then known to have been cut
            text = self.api.logs(self.namespace, pod_name, limit_bytes=self.log_limit_bytes + 1)
            raw = text.encode("utf-8", errors="replace")
            cut = len(raw) > self.log_limit_bytes
            if cut:
                text = raw[: self.log_limit_bytes].decode("utf-8", errors="ignore")
            for line in text.splitlines():
                on_line(ctx.output(line, "stdout"), "stdout")
            if cut:
                ctx.output(f"the log of pod {pod_name} was cut: only its first {self.log_limit_bytes} bytes "
                           "were read", "stderr")
        return code

    def _fail_if_pods_cannot_be_created(self, job: Mapping[str, Any], waited: float) -> None:
        """Raise `StepFailed` (deleting the Job) when the Job's FailedCreate Events say why it has no
        pod, or when it has had none for `no_pod_timeout` seconds and its Events cannot be read."""

        meta = job.get("metadata") or {}
        name, uid = str(meta.get("name", "")), meta.get("uid")
        try:
            events = self.api.events(self.namespace, "Job", name)
        except KubeApiError as error:
            if waited < self.no_pod_timeout:
                return
            reason = (f"Job {name}: no pod was created in {waited:.0f}s and the runner cannot read the Job's "
                      f"events to tell why ({_clip(str(error), 300)}; it needs get and list on events)")
        else:
            refused = [e for e in events if e.get("reason") == "FailedCreate"
                       and (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]
            if not refused:
                return
            message = str(max(refused, key=_event_time).get("message") or "").removeprefix("Error creating: ")
            reason = f"Job {name}: pods cannot be created: FailedCreate: {_clip(message, 1000)}"
        try:
            self.api.delete("batch/v1", "Job", self.namespace, name)
        except KubeApiError as error:
            raise StepFailed(f"{reason} (deleting the Job failed: {_clip(str(error), 300)})") from None
        raise StepFailed(f"{reason} (Job deleted)")


def _job_outcome(job: Mapping[str, Any]) -> str | None:
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    if status.get("succeeded"):
        return "Complete"
    if status.get("failed"):
        return "Failed"
    return None


def _container_exit_code(pod: Mapping[str, Any], default: int) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and "exitCode" in terminated:
            return int(terminated["exitCode"])
    return default


def _job_has_pods(job: Mapping[str, Any]) -> bool:
    """Whether the Job controller reports any pod of the Job (running, pending, ended or ending)."""
    status = job.get("status") or {}
    if any(status.get(key) for key in ("active", "ready", "succeeded", "failed", "terminating")):
        return True
    uncounted = status.get("uncountedTerminatedPods") or {}
    return bool(uncounted.get("succeeded") or uncounted.get("failed"))


def _event_time(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
               or event.get("firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp") or "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
