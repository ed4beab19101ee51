"""`stead service`: the service catalog and its instances, through the API server (ServiceEntity and
ServiceInstance objects, as `kubectl` would write them; docs/services.md).

    stead service catalog [-o json|yaml]           the namespace's ServiceEntities (lifecycle, attributes,
                                                   Ready) and the built-in lifecycles
    stead service list ENTITY [-o json|yaml]       its instances: name, identity, state, version, age
    stead service create ENTITY NAME --attr k=v... values read by the attribute's type (int, float,
                                                   bool; dict and list as JSON; `create --help`)
    stead service get ID [-o json|yaml]            state, version, the attribute sets, ways out
    stead service update ID --attr k=v...          the client's attributes with these changed, sent with
                                                   the version read (spec.currentVersion)
    stead service set-state ID TARGET [--message M]  a state request (spec.stateRequest) at the version read
    stead service migrate ID VERSION STATE [--attr k=v] [--remove k]  to another entity version
                                                   (spec.entityVersion, spec.migration) at the version read
    stead service delete ID
    stead service log ID                           the transfers: from, to, trigger, version, time, message
    stead service diff ID [-o json|yaml]           what the waiting candidate set would change (status.diff)
    stead service diagnose ID [-o json|yaml]       its failures, newest first, across versions and App runs
    stead service expert set-state|edit|destroy ID ...  expert mode (verb expert; `expert --help`)

An ID is the instance's name, its uid, or `<identity>=<value>` (the entity's identity attribute). Every
action takes `-n NAMESPACE` and `--kubeconfig`. A refusal (the admission webhook's 409 or 422, a 404)
is one line on stderr and exit code 1.

This module is the parser, and what reads the values and formats the objects; each action is run from its
own module, named ("module:function") and imported only when it runs (`operators.runtime.cli.nouns`, the
CLI's one lazy point): `cli_actions` (the instances: the API client's paths and errors), `cli_catalog`
(catalog: the built-in lifecycles' models). Parsing imports the standard library only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from operators.runtime import (
    CommandError,
    cluster_arguments,
    output,
    pairs,
    refusals_as_lines,
    run_to_end,
    with_cluster,
)
from operators.runtime import command as lazy

if TYPE_CHECKING:
    from operators.runtime import Requester

ENTITIES = "serviceentities"
INSTANCES = "serviceinstances"
"""The kinds' plurals in API paths, as `operators.lsm.models` declares them (a test checks that they agree)."""

class Kube(Protocol):
    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]: ...


CliError = CommandError
"""A one-line refusal of the CLI itself (no such instance, a malformed --attr)."""


# --- reading values ---------------------------------------------------------------------------------


def parse_attrs(items: Sequence[str]) -> dict[str, str]:
    return pairs(items, "--attr")


def typed_value(text: str, kind: str | None) -> Any:
    """A value given on the command line, read as the attribute's type says (unknown: as it is)."""
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            lowered = text.lower()
            if lowered in ("true", "yes", "1", "on"):
                return True
            if lowered in ("false", "no", "0", "off"):
                return False
            raise ValueError(text)
        if kind in ("dict", "list"):
            value = json.loads(text)
            if not isinstance(value, dict if kind == "dict" else list):
                raise ValueError(text)
            return value
        if kind is None:
            return text
    except ValueError:
        raise CliError(f"{text!r} is not {_READ_AS.get(str(kind), kind)}") from None
    return text


_READ_AS = {"int": "an int", "float": "a float (a number)", "bool": "a bool (true/yes/1/on or false/no/0/off)",
            "dict": "a dict (a JSON object)", "list": "a list (a JSON array)"}

ATTR_HELP = """--attr NAME=VALUE, once per attribute (split at the first '='). VALUE is read by the type the entity
gives the attribute (`stead service catalog -o yaml` shows the types):

  string       as written                            --attr who=world
  int, float   a number                              --attr replicas=3 --attr size=1.5
  bool         true, yes, 1, on / false, no, 0, off  --attr public=yes
  dict, list   JSON (quoted for the shell)           --attr tags='["web","eu"]' --attr limits='{"cpu":2}'

An empty VALUE of a non-string attribute is null: not set (update: removed). A VALUE that does not read
as its type is refused here, before anything is sent; a NAME the entity does not have is sent as a
string, and the admission webhook refuses it (422, naming spec.attributes.NAME)."""
"""How `--attr` values are read, as `create --help` and `update --help` print it (a test keeps it true)."""


def typed_attrs(given: Mapping[str, str], entity: Mapping[str, Any] | None) -> dict[str, Any]:
    types = {str(a.get("name")): a.get("type") for a in ((entity or {}).get("spec") or {}).get("attributes") or []}
    out: dict[str, Any] = {}
    for key, text in given.items():
        if text == "" and types.get(key) not in (None, "string"):
            out[key] = None  # null: not set, or removed by an update
            continue
        try:
            out[key] = typed_value(text, types.get(key))
        except CliError as error:
            raise CliError(f"--attr {key}: {error}") from None
    return out


# --- formatting -------------------------------------------------------------------------------------


def as_text(value: Any) -> str:
    """A value as a table cell or a line shows it (None: empty)."""
    return "" if value is None else str(value)


def age(created: Any, now: datetime | None = None) -> str:
    if not created:
        return ""
    try:
        moment = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return ""
    seconds = int(((now or datetime.now(UTC)) - moment).total_seconds())
    seconds = max(0, seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The kit's table (`operators.runtime.cli.output`), and nothing, not even the headers, without rows."""
    return output.table(headers, rows) if rows else ""


def _ready(obj: Mapping[str, Any]) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status"))
    return "Unknown"


def format_catalog(entities: Sequence[Mapping[str, Any]], builtins: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    rows = [(str(e["metadata"]["name"]), str((e.get("status") or {}).get("lifecycle") or _lifecycle_ref(e)),
             str(len((e.get("spec") or {}).get("attributes") or [])), str((e.get("spec") or {}).get("identity") or ""),
             _ready(e), str((e.get("spec") or {}).get("description") or "")) for e in entities]
    lines.append(table(("ENTITY", "LIFECYCLE", "ATTRIBUTES", "IDENTITY", "READY", "DESCRIPTION"), rows)
                 if rows else "no service entities in this namespace")
    lines.append("")
    lines.append("built-in lifecycles (lifecycle: {builtin: NAME}):")
    lines.append(table(("NAME", "INITIAL", "STATES", "TRANSFERS", "DESCRIPTION"),
                       [(name, str(spec.get("initialState")), str(len(spec.get("states") or [])),
                         str(len(spec.get("transfers") or [])), str(spec.get("description") or ""))
                        for name, spec in builtins.items()]))
    return "\n".join(lines)


def _lifecycle_ref(entity: Mapping[str, Any]) -> str:
    ref = (entity.get("spec") or {}).get("lifecycle") or {}
    if ref.get("builtin"):
        return f"builtin:{ref['builtin']}"
    return f"cluster:{ref['cluster']}" if ref.get("cluster") else str(ref.get("name") or "")


def format_list(items: Sequence[Mapping[str, Any]], now: datetime | None = None) -> str:
    rows = [(str(i["metadata"]["name"]), as_text((i.get("status") or {}).get("identity")),
             as_text((i.get("status") or {}).get("state")), as_text((i.get("status") or {}).get("version")),
             _ready(i), age((i.get("metadata") or {}).get("creationTimestamp"), now)) for i in items]
    return table(("NAME", "IDENTITY", "STATE", "VERSION", "READY", "AGE"), rows)


def _attrs(values: Any) -> str:
    if not values:
        return "-"
    return ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in dict(values).items())


def format_instance(obj: Mapping[str, Any]) -> str:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    on = f" version {status['entityVersion']}" if status.get("entityVersion") is not None else ""
    lines = [f"serviceinstance/{meta.get('name')}  entity {spec.get('entity')}{on}  uid {meta.get('uid')}",
             f"state:      {status.get('state') or '-'} ({status.get('modelState') or '-'})  version "
             f"{status.get('version') or '-'}  ready {_ready(obj)}",
             f"identity:   {status.get('identity') or '-'}",
             f"app:        {status.get('app') or '-'}",
             f"candidate:  {_attrs(status.get('candidateAttributes'))}",
             f"active:     {_attrs(status.get('activeAttributes'))}",
             f"rollback:   {_attrs(status.get('rollbackAttributes'))}"]
    for problem in status.get("validationProblems") or []:
        lines.append(f"invalid:    {problem}")
    refused = status.get("refused")
    if refused:
        lines.append(f"refused:    {refused.get('trigger')}: {refused.get('message')}")
    for way in status.get("waysOut") or []:
        lines.append(f"way out:    {way}")
    for condition in status.get("conditions") or []:
        if (condition.get("status") == "True" and condition.get("type") != "Ready") or (
                condition.get("type") == "Ready" and condition.get("status") != "True"):
            lines.append(f"condition:  {condition.get('type')}={condition.get('status')} "
                         f"{condition.get('reason') or ''}: {condition.get('message') or ''}".rstrip(": "))
    return "\n".join(lines)


def format_log(obj: Mapping[str, Any]) -> str:
    """One line per transfer: FROM -> TO  TRIGGER  version V  TIME  MESSAGE."""
    entries = list((obj.get("status") or {}).get("log") or [])
    if not entries:
        return f"serviceinstance/{obj['metadata']['name']}: no transfers yet"
    rows = []
    for entry in entries:
        extra = []
        if entry.get("operation"):
            extra.append(f"[{entry['operation']}]")
        if entry.get("error"):
            extra.append("(error)")
        if entry.get("message"):
            extra.append(str(entry["message"]))
        rows.append((as_text(entry.get("from")) or "-", "->", as_text(entry.get("to")), as_text(entry.get("trigger")),
                     f"v{as_text(entry.get('version'))}", as_text(entry.get("time")), " ".join(extra)))
    return table(("FROM", "", "TO", "TRIGGER", "VERSION", "TIME", "MESSAGE"), rows)


# --- running a command ------------------------------------------------------------------------------


async def dispatch(kube: Requester | Kube, args: argparse.Namespace) -> int:
    """Run the action with `kube`; a refusal (API errors, CliError) is one line on stderr and exit code 1."""
    return await refusals_as_lines("stead service", args.handler(kube, args))


def _run_command(args: argparse.Namespace) -> int:
    return run_to_end(with_cluster("stead service", args.kubeconfig, lambda kube: args.handler(kube, args)))


# --- the parser -------------------------------------------------------------------------------------




def add_service_actions(service: argparse.ArgumentParser) -> None:
    """`stead service catalog|list|create|get|update|set-state|migrate|delete|log|diff|diagnose|expert`."""
    sub = service.add_subparsers(metavar="ACTION")
    raw = argparse.RawDescriptionHelpFormatter
    ident = "the instance: its name, its uid, or IDENTITY=VALUE"
    catalog = sub.add_parser("catalog", help="the namespace's service entities and the built-in lifecycles")
    cluster_arguments(catalog, _run_command, output=True)
    catalog.set_defaults(handler=lazy("operators.lsm.cli_catalog:catalog"))
    listing = sub.add_parser("list", help="the instances of an entity")
    listing.add_argument("entity")
    cluster_arguments(listing, _run_command, output=True)
    listing.set_defaults(handler=lazy("operators.lsm.cli_actions:list_instances"))
    create = sub.add_parser("create", help="create an instance of an entity", formatter_class=raw,
                            description="Create a ServiceInstance of ENTITY named NAME with the attributes given.",
                            epilog=f"{ATTR_HELP}\n\nexample:\n  stead service create greeter hello -n demo "
                            "--attr name=hello --attr who=world")
    create.add_argument("entity", metavar="ENTITY", help="the ServiceEntity (stead service catalog lists them)")
    create.add_argument("name", metavar="NAME", help="the ServiceInstance's name")
    create.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                        help="an attribute's value, read by its type (below); repeat for each attribute")
    cluster_arguments(create, _run_command)
    create.set_defaults(handler=lazy("operators.lsm.cli_actions:create"))
    get = sub.add_parser("get", help="an instance: state, version, attribute sets, ways out")
    get.add_argument("id", help=ident)
    cluster_arguments(get, _run_command, output=True)
    get.set_defaults(handler=lazy("operators.lsm.cli_actions:get"))
    update = sub.add_parser("update", help="change attributes (sent with the current version)", formatter_class=raw,
                            description="Send the instance's attributes with these changed (spec.attributes), "
                            "at the version read (spec.currentVersion).",
                            epilog=f"{ATTR_HELP}\n\nexample:\n  stead service update hello -n demo --attr who=everyone")
    update.add_argument("id", help=ident)
    update.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                        help="an attribute's new value, read by its type (below; empty: removed, for a non-string "
                        "one); repeat for each attribute")
    cluster_arguments(update, _run_command)
    update.set_defaults(handler=lazy("operators.lsm.cli_actions:update"))
    set_state = sub.add_parser("set-state", help="request a state (an apiSetState transfer), at the current version")
    set_state.add_argument("id", help=ident)
    set_state.add_argument("target")
    set_state.add_argument("--message", help="why, for the log")
    cluster_arguments(set_state, _run_command)
    set_state.set_defaults(handler=lazy("operators.lsm.cli_actions:set_state"))
    migrate = sub.add_parser("migrate", help="move an instance to another entity version, landing in a state",
                             formatter_class=raw,
                             description="Set spec.entityVersion and spec.migration (at the version read): the "
                             "operator validates the instance's attribute sets under that entity version and moves "
                             "it to TARGET_STATE; a set that does not fit is refused, naming the attribute.",
                             epilog=f"{ATTR_HELP}\n\nexample:\n  stead service migrate hello 2 up -n demo "
                             "--attr tier=gold")
    migrate.add_argument("id", help=ident)
    migrate.add_argument("version", type=int, metavar="VERSION", help="the entity version to move to")
    migrate.add_argument("state", metavar="TARGET_STATE", help="a state of that version's lifecycle")
    migrate.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                         help="a value for an attribute the new version needs (read by its type there); repeat")
    migrate.add_argument("--remove", action="append", default=[], metavar="NAME",
                         help="an attribute the new version no longer has, taken out of the sets; repeat")
    migrate.add_argument("--message", help="why, for the log")
    cluster_arguments(migrate, _run_command)
    migrate.set_defaults(handler=lazy("operators.lsm.cli_actions:migrate"))
    delete = sub.add_parser("delete", help="delete an instance (its on_delete transfer)")
    delete.add_argument("id", help=ident)
    cluster_arguments(delete, _run_command)
    delete.set_defaults(handler=lazy("operators.lsm.cli_actions:delete"))
    log = sub.add_parser("log", help="the transfer log: from, to, trigger, version, time, message")
    log.add_argument("id", help=ident)
    cluster_arguments(log, _run_command)
    log.set_defaults(handler=lazy("operators.lsm.cli_actions:log"))
    diff = sub.add_parser("diff", help="what the waiting candidate set would change: the state request that "
                          "approves it, the App action, the attributes and App inputs that change")
    diff.add_argument("id", help=ident)
    cluster_arguments(diff, _run_command, output=True)
    diff.set_defaults(handler=lazy("operators.lsm.cli_diff:diff"))
    diagnose = sub.add_parser("diagnose", help="the instance's failures, newest first: failed validations and "
                              "deployments across its versions, its App's failed runs and their failing tasks")
    diagnose.add_argument("id", help=ident)
    cluster_arguments(diagnose, _run_command, output=True)
    diagnose.set_defaults(handler=lazy("operators.lsm.cli_diff:diagnose"))
    add_expert_actions(sub.add_parser(
        "expert", help="expert mode: force a state, edit an attribute set, destroy (needs verb expert)",
        description="Expert mode bypasses the lifecycle; it needs the verb `expert` on serviceinstances.stead.dev "
        "(ClusterRole stead-expert) and is audited (log entry and Event) under your name."), ident)


def add_expert_actions(expert: argparse.ArgumentParser, ident: str) -> None:
    """`stead service expert set-state|edit|destroy` (`operators.lsm.cli_expert`)."""
    sub = expert.add_subparsers(metavar="OPERATION")
    force = sub.add_parser("set-state", help="force a state: no transfer, no validation")
    force.add_argument("id", help=ident)
    force.add_argument("state", help="any state of the lifecycle")
    edit = sub.add_parser("edit", help="change attributes of one set (candidate, active, rollback), unvalidated",
                          formatter_class=argparse.RawDescriptionHelpFormatter, epilog=ATTR_HELP)
    edit.add_argument("id", help=ident)
    edit.add_argument("set", choices=("candidate", "active", "rollback"), help="the attribute set")
    edit.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                      help="an attribute's new value in that set, read by its type; repeat for each")
    destroy = sub.add_parser("destroy", help="delete the instance and its App without the lifecycle's delete")
    destroy.add_argument("id", help=ident)
    for parser, action in ((force, "set_state"), (edit, "edit"), (destroy, "destroy")):
        parser.add_argument("--message", help="why, for the log and the Event")
        cluster_arguments(parser, _run_command)
        parser.set_defaults(handler=lazy(f"operators.lsm.cli_expert:{action}"))


__all__ = ["add_service_actions", "as_text", "dispatch", "format_catalog", "format_instance", "format_list",
           "format_log", "typed_value"]
