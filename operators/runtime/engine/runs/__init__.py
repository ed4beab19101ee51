"""Supervising a workflow run from a kind's step: what every kind that runs workflows shares.

A kind that runs a workflow (ActionRun today; a graph run or a lifecycle's realization next)
describes the run (`RunRequest`: the workflow, where its scripts run, how to read its secrets)
and what its object shows of it (`RunObserver`), then calls `follow_run` from its step.
`follow_run` starts the runner (`python -m pipelines run`, a process of its own), follows it
through the files it writes, starts it again when it dies (it skips the steps that finished),
aborts it when the observer says so, and asks the observer for a status patch at most once a
second, only when what a user sees changed. It returns when the run is over.

Everything a run needs to survive an operator restart is on disk under the run's directory:
the workflow, the run store, and, once the outcome has reached the kind's objects, its
conclusion (`write_conclusion`): a restarted operator finds the run, follows a runner still
alive or starts it again, and a concluded run is never concluded twice. Runners live in sessions
of their own, so an operator that stops (SIGTERM, a new version) leaves them running; an operator
that the user interrupts on a terminal (`make run`, then Ctrl-C) stops them with it (`stop_runs`)
and the next operator resumes them.

A runner's stderr is kept in ``runner.log`` in the run's directory (bounded, masked by the runner),
and a runner that has to be started again is explained on the run (`restart_reason`: its exit code
or signal, or that the operator stopped it, and its last stderr lines) as a `RunnerRestarted` Event.

Where scripts run is decided here, from the operator's settings: on this host (namespaces it
trusts; when the operator is root, as a uid of the namespace's own, `script_uid`, or as
`script_user`) or as Jobs in the object's namespace, with a
short-lived token of that namespace's service account (`runner_credentials`), never the
operator's own rights. A run with `kubernetes` steps (`RunRequest.kube_api`) gets that token
wherever its scripts run, and the Secrets a run names are read with it in every case
(`SecretReader`). Every runner gets the operator's ssh settings (`SshOptions`: the
networks ssh steps may reach although they are this host's, the files root, the reboot command).

Four modules, one per job; what the rest of the operator uses is imported from here:
- `settings`: how this operator runs workflows (`RunSettings`, `SshOptions`) and what follows from
  the settings alone (a namespace's script uid, the Service CIDRs, a run's directory);
- `launch`: starting a runner (where its scripts run, its credentials and secrets, its log);
- `follow`: following a run to its end (`follow_run`: restarts, aborts, status writes);
- `records`: what survives the operator in a run's directory (conclusions, `stop_runs`).
"""

from operators.runtime.engine.runs.follow import (
    CONTROL_INTERVAL,
    ENDED_RUN_PHASES,
    FINAL_RUN_STATES,
    MAX_RUNNER_STARTS,
    PATCH_INTERVAL,
    POLL_INTERVAL,
    Abort,
    Followed,
    RunObserver,
    follow_run,
    restart_reason,
    run_pipeline,
)
from operators.runtime.engine.runs.launch import (
    RESTART_TAIL_CHARS,
    RESTART_TAIL_LINES,
    RUNNER_CREDENTIALS,
    RUNNER_LOG_LIMIT,
    RUNNER_START,
    AccountCredentials,
    RunRequest,
    SecretReader,
    UntrustedNamespace,
    in_jobs,
    open_runner_log,
    read_account_secret,
    runner_credentials,
    runner_log_tail,
    secret_forbidden,
    start_runner,
)
from operators.runtime.engine.runs.records import (
    CONCLUSION,
    INTERRUPTED,
    STOPPED,
    read_conclusion,
    stop_runs,
    write_conclusion,
)
from operators.runtime.engine.runs.settings import (
    DEFAULT_SCRIPT_UIDS,
    SERVICE_CIDRS_PATH,
    TOKEN_SECONDS,
    RunSettings,
    SshOptions,
    cidrs_of,
    discover_service_cidrs,
    local_script_user,
    parse_uid_range,
    paths_for,
    run_settings,
    script_uid,
)

__all__ = [
    "CONCLUSION",
    "CONTROL_INTERVAL",
    "DEFAULT_SCRIPT_UIDS",
    "ENDED_RUN_PHASES",
    "FINAL_RUN_STATES",
    "INTERRUPTED",
    "MAX_RUNNER_STARTS",
    "PATCH_INTERVAL",
    "POLL_INTERVAL",
    "RESTART_TAIL_CHARS",
    "RESTART_TAIL_LINES",
    "RUNNER_CREDENTIALS",
    "RUNNER_LOG_LIMIT",
    "RUNNER_START",
    "SERVICE_CIDRS_PATH",
    "STOPPED",
    "TOKEN_SECONDS",
    "Abort",
    "AccountCredentials",
    "Followed",
    "RunObserver",
    "RunRequest",
    "RunSettings",
    "SecretReader",
    "SshOptions",
    "UntrustedNamespace",
    "cidrs_of",
    "discover_service_cidrs",
    "follow_run",
    "in_jobs",
    "local_script_user",
    "open_runner_log",
    "parse_uid_range",
    "paths_for",
    "read_account_secret",
    "read_conclusion",
    "restart_reason",
    "run_pipeline",
    "run_settings",
    "runner_credentials",
    "runner_log_tail",
    "script_uid",
    "secret_forbidden",
    "start_runner",
    "stop_runs",
    "write_conclusion",
]
