"""`exec` and `setvar`: run a shell or Python script, locally or as a Kubernetes Job.

Who runs a script is a deployment decision, not a workflow's: the same step runs through a
pluggable `ScriptBackend`. `LocalProcess` runs it on the runner's host (allowed by the operator
only for namespaces its configuration trusts); `KubernetesJob` runs it as a Job in the workflow's
namespace under that namespace's service account, through a client the caller injects, so the
runner never acts with the operator's rights.

Parameters (both types): ``script`` (text), ``interpreter`` (``sh`` | ``bash`` | ``python``, default
``sh``), ``env`` (name -> value, rendered like everything else), ``exportVariables`` (default true:
every non-secret variable whose name is a valid environment name is exported; secrets only reach a
script through ``env`` or a macro). `setvar` also takes ``variables``: the names its output lines
``name=value`` may set; every named variable must be set or the step fails.

The local backend never puts the script on disk or on a command line (both outlive or leak the
secrets a rendered script may hold): the interpreter reads it from a pipe (``/dev/fd/N``).
"""

from pipelines.executors.script.jobs import KubernetesJob
from pipelines.executors.script.local import LocalProcess, ScriptUser, kill_leftover, kill_marked
from pipelines.executors.script.steps import INTERPRETERS, ScriptBackend, ScriptExecutor, SetVarExecutor, script_env

__all__ = [
    "INTERPRETERS", "KubernetesJob", "LocalProcess", "ScriptBackend", "ScriptExecutor", "ScriptUser", "SetVarExecutor",
    "kill_leftover", "kill_marked", "script_env",
]
