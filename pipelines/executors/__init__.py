"""Step types behind one interface (`Executor`), and the registry a run uses.

`default_executors` gives the built-in types, the ssh ones included (`ssh`); a caller adds or
replaces types by passing its own mapping to the runner (a cloud API...). The `exec` and `setvar` types share a
`ScriptBackend`: local processes by default, Kubernetes Jobs when the caller says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipelines.executors.base import (
    Executor,
    ParameterError,
    StepAborted,
    StepContext,
    StepFailed,
    StepResult,
)
from pipelines.executors.delay import DelayExecutor, NoopExecutor
from pipelines.executors.egress import EgressPolicy
from pipelines.executors.http_request import HttpExecutor
from pipelines.executors.kube import KubernetesExecutor
from pipelines.executors.script import (
    KubernetesJob,
    LocalProcess,
    ScriptBackend,
    ScriptExecutor,
    ScriptUser,
    SetVarExecutor,
)
from pipelines.executors.ssh import SshSettings, ssh_executors
from pipelines.kubeapi import KubeApi

__all__ = [
    "Executor", "KubernetesJob", "LocalProcess", "ParameterError", "ScriptBackend", "ScriptUser", "SshSettings",
    "StepAborted", "StepContext", "StepFailed", "StepResult", "default_executors",
]


def default_executors(
    script_backend: ScriptBackend | None = None, kube_api: KubeApi | None = None,
    http_allow: Sequence[str] = (), *, ssh: SshSettings | None = None, http_deny: Sequence[str] = (),
) -> dict[str, Executor]:
    """The built-in step types. Without a `kube_api`, `kubernetes` steps fail with a clear message.
    `http_allow`: networks `http` steps may reach although not public, `http_deny` networks they never
    reach, allowed or not (the cluster's Service CIDRs; see `egress`).
    `ssh`: the ssh step types' settings (networks they may reach although loopback or this host's,
    the files root of copy_files and sync...); by default none of those and no files root."""
    backend = script_backend or LocalProcess()
    registry: Mapping[str, Executor] = {
        "exec": ScriptExecutor(backend),
        "setvar": SetVarExecutor(backend),
        "http": HttpExecutor(EgressPolicy(http_allow, deny=http_deny)),
        "delay": DelayExecutor(),
        "noop": NoopExecutor(),
        "kubernetes": KubernetesExecutor(kube_api),
        **ssh_executors(ssh or SshSettings()),
    }
    return dict(registry)
