"""The operator runtime, and its one front door for the domains.

The domains (calm, config, environment, lsm, graphs) import the runtime only from here:
`from operators.runtime import Kind, StepContext, Objects, ...`. What is listed below is the
contract between the platform and its domains; a name not listed is the runtime's own business and
may change without a domain noticing (import-linter holds the domains to this door, see
pyproject.toml). Every name is imported on first use (`operators.runtime.lazy`), so that `stead`
commands that need a few of them do not pay for the rest.

The runtime is in layers (each may use the ones below it, never those above; checked by
import-linter):

- `domain`, `settings`: what a domain declares (`Domain`) and the operator's settings tree;
- `process`: the operator process (`run_operator`): builds the engine, starts the rest, in order;
- `kopfwiring` (the Kopf adapter, the only module that imports Kopf) and `api` (the HTTP API server
  of every domain's routes, its authentication and the extension mechanism);
- `engine`: reconcilers, the services steps use, Events, addons, workflow run supervision;
- `secrets` (the vault), `serving` (HTTP serving, TLS, workers, metrics) and `shard` (replicas
  that split projects);
- `cli` (the CLI kit: the API client, output, cluster commands) and `kube` (the API client, CRDs,
  admission webhook configurations);
- `core`: kinds, pipelines, conditions, the LMDB store, the ownership ring, the clock;
- `lazy`: the mechanism of the lazy front doors (this one's too).

docs/architecture.md describes each part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.runtime.lazy import front_door

if TYPE_CHECKING:
    from operators.runtime.api.auth import Access, Authenticator
    from operators.runtime.api.calls import (
        ApiProblem,
        Call,
        bad_request,
        dumps,
        flag,
        if_match,
        int_param,
        json_body,
        json_response,
        not_found,
        object_name_ok,
    )
    from operators.runtime.api.extension import ApiExtension, ExtensionBase, ExtensionSettings, HandlersBase, passed_on
    from operators.runtime.api.host import HOST_ROUTES, ApiHost
    from operators.runtime.api.routes import Operation, Route, RouteTable
    from operators.runtime.api.server import ApiServer
    from operators.runtime.cli import output
    from operators.runtime.cli.client import RequestFailed, UsageError, api_arguments, call
    from operators.runtime.cli.commands import (
        CommandError,
        cluster_arguments,
        pairs,
        pause,
        refusals_as_lines,
        run_to_end,
        with_cluster,
    )
    from operators.runtime.cli.nouns import command
    from operators.runtime.cli.output import dump, table
    from operators.runtime.core import conditions
    from operators.runtime.core.clock import parse_instant, utc_now, utc_seconds
    from operators.runtime.core.kinds import (
        AdmissionRequest,
        FirstSeen,
        Kind,
        Model,
        PrinterColumn,
        Refusal,
        Resource,
        StatusBase,
        field_path,
        named_after,
        spec_admission,
    )
    from operators.runtime.core.pipeline import (
        KIND_CONDITIONS,
        RUNTIME_FIELDS,
        Observed,
        PermanentError,
        Pipeline,
        StepContext,
        StepFn,
        StoredRecord,
        TemporaryError,
        parse_spec,
        spec_step,
        status_patch,
    )
    from operators.runtime.core.refs import SecretKeyRef
    from operators.runtime.core.regex import MAX_MEMORY, RegexError, compile_pattern
    from operators.runtime.core.ring import PROJECT_LABEL, project_key
    from operators.runtime.core.services import SecretVault, Services
    from operators.runtime.core.store import LocalStore, object_key
    from operators.runtime.domain import AddonContext, Domain
    from operators.runtime.engine.addons import Addon
    from operators.runtime.engine.runs import (
        FINAL_RUN_STATES,
        RUNNER_CREDENTIALS,
        Abort,
        AccountCredentials,
        Followed,
        RunObserver,
        RunRequest,
        SecretReader,
        UntrustedNamespace,
        follow_run,
        paths_for,
        read_account_secret,
        read_conclusion,
        run_pipeline,
        runner_credentials,
        write_conclusion,
    )
    from operators.runtime.engine.services import Services as ProcessServices
    from operators.runtime.kube.admission import denying_policy
    from operators.runtime.kube.api import ApiError, Requester, custom_path
    from operators.runtime.kube.client import (
        USER_AGENT,
        ClusterAccess,
        KubeClient,
        core_path,
        load_access,
        load_configuration,
    )
    from operators.runtime.kube.crds import crd_for
    from operators.runtime.kube.objects import Objects
    from operators.runtime.kube.watch import Watch
    from operators.runtime.lazy import front_door
    from operators.runtime.secrets import Entry, VaultError
    from operators.runtime.serving.http import Response

__all__ = [
    "FINAL_RUN_STATES",
    "HOST_ROUTES",
    "KIND_CONDITIONS",
    "MAX_MEMORY",
    "PROJECT_LABEL",
    "RUNNER_CREDENTIALS",
    "RUNTIME_FIELDS",
    "USER_AGENT",
    "Abort",
    "Access",
    "AccountCredentials",
    "Addon",
    "AddonContext",
    "AdmissionRequest",
    "ApiError",
    "ApiExtension",
    "ApiHost",
    "ApiProblem",
    "ApiServer",
    "Authenticator",
    "Call",
    "ClusterAccess",
    "CommandError",
    "Domain",
    "Entry",
    "ExtensionBase",
    "ExtensionSettings",
    "FirstSeen",
    "Followed",
    "HandlersBase",
    "Kind",
    "KubeClient",
    "LocalStore",
    "Model",
    "Objects",
    "Observed",
    "Operation",
    "PermanentError",
    "Pipeline",
    "PrinterColumn",
    "ProcessServices",
    "Refusal",
    "RegexError",
    "RequestFailed",
    "Requester",
    "Resource",
    "Response",
    "Route",
    "RouteTable",
    "RunObserver", "RunRequest",
    "SecretKeyRef",
    "SecretReader",
    "SecretVault",
    "Services",
    "StatusBase",
    "StepContext",
    "StepFn",
    "StoredRecord",
    "TemporaryError",
    "UntrustedNamespace",
    "UsageError",
    "VaultError",
    "Watch",
    "api_arguments",
    "bad_request",
    "call",
    "cluster_arguments",
    "command",
    "compile_pattern",
    "conditions",
    "core_path",
    "crd_for",
    "custom_path",
    "denying_policy",
    "dump",
    "dumps",
    "field_path",
    "flag",
    "follow_run",
    "front_door",
    "if_match",
    "int_param",
    "json_body",
    "json_response",
    "load_access",
    "load_configuration",
    "named_after",
    "not_found",
    "object_key",
    "object_name_ok",
    "output",
    "pairs",
    "parse_instant",
    "parse_spec",
    "passed_on",
    "paths_for",
    "pause",
    "project_key",
    "read_account_secret",
    "read_conclusion",
    "refusals_as_lines",
    "run_pipeline",
    "run_to_end",
    "runner_credentials",
    "spec_admission",
    "spec_step",
    "status_patch",
    "table",
    "utc_now",
    "utc_seconds",
    "with_cluster",
    "write_conclusion",
]

__getattr__, __dir__ = front_door(__name__, __file__, __all__)
