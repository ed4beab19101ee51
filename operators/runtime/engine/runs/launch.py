"""Starting a run's runner: where its scripts run, the credentials it acts with, its secrets, its log.

Why a module of its own: everything a runner start needs, and nothing of following it. A start
decides where the scripts run (`in_jobs`: this host for trusted namespaces, else Jobs, else
`UntrustedNamespace`), mints the namespace's service-account token when the run needs one
(`runner_credentials`), reads the Secrets the run names with that token (`read_account_secret`),
seals them for this runner only, and starts it with its stderr in a bounded ``runner.log``
(`open_runner_log`, whose last lines explain a restart: `runner_log_tail`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import functools
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.runtime.core.clock import utc_now
from operators.runtime.core.pipeline import PermanentError, StepContext, TemporaryError
from operators.runtime.engine.runs.settings import local_script_user, run_settings
from operators.runtime.kube.client import ApiError, core_path, load_configuration
from pipelines.control import RunProcess, prepare_run, start_run
from pipelines.hooks import new_run_key, seal
from pipelines.kubeapi import CREDENTIALS_ENV, KubeApiError, RestKubeApi, write_credentials
from pipelines.model import Workflow
from pipelines.paths import RunPaths, write_private

RUNNER_CREDENTIALS = "kube-credentials.json"
"""The runner's credentials (0600, in the run's directory): a token of the namespace's service account."""


RUNNER_LOG_LIMIT = 256 * 1024
"""``runner.log`` beyond this size is cut to its last quarter before a runner is started."""
RESTART_TAIL_LINES = 5
RESTART_TAIL_CHARS = 300


AccountCredentials = Callable[[], Awaitable[Path]]
"""The credentials file of the namespace's service account (a short-lived token, `runner_credentials`),
minted on the first call of a runner start and reused after."""
SecretReader = Callable[[AccountCredentials], Awaitable[str]]
"""Reads one secret's value when a runner starts. A Secret reference is read with the namespace's
service account (the credentials it is given), wherever the run's scripts run: the operator's own
rights never read a tenant's Secret, so a namespace reads only what its account may."""


class UntrustedNamespace(Exception):
    """The run has scripts for this host, its namespace is not trusted, and Jobs are off."""


@dataclass(frozen=True)
class RunRequest:
    """One run of a workflow, as a kind describes it."""

    paths: RunPaths
    workflow: Mapping[str, Any]  # a pipelines Workflow, without its secrets
    secrets: Mapping[str, SecretReader] = field(default_factory=dict)
    hooks: str | None = None  # MODULE:ATTR of the runner's hooks (macro rendering, masking)
    scripts_on_runner: Sequence[str] = ()  # steps whose scripts would run on this host (names, for messages)
    kube_api: bool = False
    """The run has `kubernetes` steps: the runner gets a short-lived token of the namespace's service
    account (`runner_credentials`) and acts with its rights, wherever the scripts run."""


def in_jobs(ctx: StepContext, request: RunRequest) -> bool:
    """Whether the run's scripts run as Jobs in the object's namespace (True) or on this host.

    Raises `UntrustedNamespace` when they would have to run on this host and may not.
    """
    if not request.scripts_on_runner:
        return False
    settings = run_settings(ctx)
    if any(fnmatch.fnmatchcase(ctx.obj.namespace, pattern) for pattern in settings.trusted_local_namespaces):
        return False
    if settings.exec_in_jobs:
        return True
    where = ", ".join(request.scripts_on_runner)
    raise UntrustedNamespace(
        f"namespace {ctx.obj.namespace} is not trusted to run scripts on the operator's host (Local "
        f"substrates or the runner: {where}); the operator allows it with --trust-local-namespaces, "
        "or runs them as Jobs in the namespace with --exec-in-jobs")


@functools.cache
def _api_server() -> tuple[str, str | None]:
    """The API server's URL and CA (PEM) as the operator reaches it: the runner uses the same ones."""
    cfg = load_configuration(None)  # $KUBECONFIG (set by `stead run`) or the in-cluster service account
    ca = Path(cfg.ssl_ca_cert).read_text() if cfg.ssl_ca_cert else None
    return str(cfg.host).rstrip("/"), ca


async def runner_credentials(ctx: StepContext, paths: RunPaths) -> float:
    """Mint a short-lived token of the namespace's service account (TokenRequest) for the runner.

    Written to a 0600 file in the run's directory, whose path alone reaches the runner's (otherwise
    scrubbed) environment; the runner reads the file again when it changes. Returns when to refresh it.
    """
    settings = run_settings(ctx)
    namespace, account, seconds = ctx.obj.namespace, settings.job_service_account, settings.runner_token_seconds
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}}
    try:
        answer = await ctx.services.kube.request(
            "POST", core_path("serviceaccounts", namespace, account) + "/token", body)
    except ApiError as error:
        raise TemporaryError(
            "RunnerCredentials", f"cannot get a token of service account {namespace}/{account}: {error.message}",
            delay=10) from None
    server, ca = await asyncio.to_thread(_api_server)
    write_credentials(paths.run_dir / RUNNER_CREDENTIALS, server, str(answer["status"]["token"]), ca)
    return time.monotonic() + seconds / 2


def secret_forbidden(namespace: str, account: str, name: str) -> str:
    """What a run says when its account may not read a Secret: the grant that is missing, as commands."""
    role = f"read-{name}"[:253]
    return (f"Secret {name}: service account {namespace}/{account} may not read it: it needs get on secrets/{name} "
            f"in namespace {namespace} (kubectl -n {namespace} create role {role} --verb=get --resource=secrets "
            f"--resource-name={name}; kubectl -n {namespace} create rolebinding {role} --role={role} "
            f"--serviceaccount={namespace}:{account})")


async def read_account_secret(credentials: Path, namespace: str, account: str, name: str, key: str) -> str:
    """A key of a Secret of the run's namespace, read as the namespace's service account (`credentials`: a
    token of it, `runner_credentials`), never with the operator's rights: a namespace reads only what its
    own account may. A Secret that exists but may not be read is `SecretForbidden`, naming the missing
    grant (it was reported as not found, and nothing said what to grant); one that does not exist, or
    lacks the key, `SecretNotFound`; anything else `SecretUnreadable`. Messages never quote a value."""
    try:
        api = RestKubeApi.from_credentials_file(credentials)
        secret = await asyncio.to_thread(api.get, "v1", "Secret", namespace, name)
    except (KubeApiError, OSError, ValueError) as error:
        if getattr(error, "status", None) == 403:
            raise PermanentError("SecretForbidden", secret_forbidden(namespace, account, name)) from None
        raise PermanentError("SecretUnreadable", f"Secret {name}: {error}") from None
    if secret is None:
        raise PermanentError("SecretNotFound", f"Secret {name}: not found in namespace {namespace}")
    value = (secret.get("data") or {}).get(key)
    if value is None:
        raise PermanentError("SecretNotFound", f"Secret {name} has no key {key}")
    return base64.b64decode(value).decode()


async def start_runner(ctx: StepContext, request: RunRequest, jobs: bool) -> RunProcess:
    """Seal the secrets for this runner, write the workflow and start the runner (it skips what finished)."""
    paths = request.paths
    key = new_run_key()
    credentials = paths.run_dir / RUNNER_CREDENTIALS
    runner_needs = jobs or request.kube_api  # then `follow_run` minted it and keeps it fresh for the runner
    minted = runner_needs

    async def account() -> Path:
        nonlocal minted
        if not minted:
            await runner_credentials(ctx, paths)
            minted = True
        return credentials

    try:
        sealed = {name: seal(await read(account), key, name) for name, read in request.secrets.items()}
    finally:
        if minted and not runner_needs:  # read for the secrets only: the runner (and its scripts) never see it
            credentials.unlink(missing_ok=True)
    prepare_run(paths.state_dir, paths.uid, Workflow.model_validate({**request.workflow, "secrets": sealed}))
    settings = run_settings(ctx)
    command: dict[str, Any]
    env: dict[str, str] = {}
    if jobs:
        command = {"kube_api": "pipelines.kubeapi:from_environment", "exec_backend": "job",
                   "job_namespace": ctx.obj.namespace, "job_service_account": settings.job_service_account,
                   "job_image": settings.job_image}
        env = {CREDENTIALS_ENV: str(credentials)}
    else:
        command = {"script_user": local_script_user(settings, ctx.obj.namespace)}
        if request.kube_api:
            command["kube_api"] = "pipelines.kubeapi:from_environment"
            env = {CREDENTIALS_ENV: str(paths.run_dir / RUNNER_CREDENTIALS)}
    log_fd = open_runner_log(paths)
    try:
        return await start_run(paths, secret_key=key, hooks=request.hooks,
                               extra=["--events", "none", *settings.ssh.runner_args(), *settings.runner_deny_args()],
                               stderr=log_fd, env=env, http_allow=settings.http_allow, **command)
    finally:
        os.close(log_fd)


RUNNER_START = "--- runner started at "


def open_runner_log(paths: RunPaths) -> int:
    """The runner's stderr: ``runner.log`` in the run's directory (0600), appended to, a line marking
    each start; cut to its last quarter first when beyond `RUNNER_LOG_LIMIT`, so that a run restarted
    many times keeps a bounded file. The runner masks what it writes there (`pipelines.__main__`)."""
    path = paths.runner_log
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > RUNNER_LOG_LIMIT:
            with path.open("rb") as old:
                old.seek(-(RUNNER_LOG_LIMIT // 4), os.SEEK_END)
                kept = old.read()
            write_private(path, kept.decode("utf-8", "replace").partition("\n")[2])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(fd, f"{RUNNER_START}{utc_now()} ---\n".encode())
    return fd


def runner_log_tail(paths: RunPaths, lines: int = RESTART_TAIL_LINES) -> list[str]:
    """The last non-empty lines the latest runner wrote on its stderr (each cut to
    `RESTART_TAIL_CHARS`), oldest first."""
    try:
        with paths.runner_log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 16 * 1024))
            text = file.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    latest = text.rpartition(RUNNER_START)[2].partition("\n")[2] if RUNNER_START in text else text
    found = [line.rstrip() for line in latest.splitlines() if line.strip()]
    return [line if len(line) <= RESTART_TAIL_CHARS else line[:RESTART_TAIL_CHARS] + "..." for line in found[-lines:]]
