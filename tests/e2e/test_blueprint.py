"""The Blueprint kind end to end, on the real local control plane with a real operator process.

Compiling, the system actions and their DAGs, cycles ending in Stalled, user-edited actions,
apply-time refusals, and inline secrets: moved into the vault by the mutating webhook and found
nowhere else (object, status, Events, the operator's log, its store).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import networkx as nx
import pytest
import yaml

from operators.calm.blueprint import DRY_RUN_VAULT_REF
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.kube.client import USER_AGENT
from operators.runtime.secrets import KEY_SECRET, VAULT_DB, MasterKey, decrypt, vault_secret_name
from tests.e2e.conftest import ROOT, AuditLog, Kubectl, OperatorProcess, wait_until

OPERATOR_NAMESPACE = "stead-system"  # `stead run`'s default: the vault key and ciphertexts live there
SYSTEM_ACTIONS = ("create", "start", "stop", "restart", "delete")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


# --- helpers -------------------------------------------------------------------------------------


def bp_manifest(name: str, namespace: str, spec: dict[str, Any], **metadata: Any) -> str:
    return json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "Blueprint",
        "metadata": {"name": name, "namespace": namespace, **metadata}, "spec": spec,
    })


def task(name: str, script: str, sets: list[str] | None = None) -> dict[str, Any]:
    """An exec task, or a setvar task when it `sets` variables."""
    if sets:
        return {"name": name, "type": "setvar", "script": script, "variables": sets}
    return {"name": name, "type": "exec", "script": script}


def simple_spec(services: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """One Local substrate and one deployment running every service."""
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "services": services,
        "deployments": [{"name": "tier", "substrate": "host", "services": [s["name"] for s in services]}],
        **spec,
    }


def three_tier(namespace: str) -> dict[str, Any]:
    """examples/blueprint-three-tier.yaml, into `namespace`, without `spec.active` (so it stays Compiled)."""
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    assert body["spec"].pop("active") is True
    return body


def get_bp(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", "blueprint", name, "-n", namespace, "-o", "json").stdout))


def ready(kubectl: Kubectl, namespace: str, *names: str, seconds: str = "30s") -> None:
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", seconds,
            *[f"blueprint/{n}" for n in names])


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == type_)


def observed(kubectl: Kubectl, namespace: str, name: str, generation: int) -> dict[str, Any]:
    """The status once it describes `generation` (Ready or Stalled)."""
    def status() -> dict[str, Any] | None:
        current = get_bp(kubectl, namespace, name).get("status") or {}
        if current.get("observedGeneration") != generation:
            return None
        settled = any(c["type"] in ("Ready", "Stalled") and c["status"] == "True"
                      for c in current.get("conditions") or [])
        return current if settled else None

    return dict(wait_until(status, 30, f"blueprint {name} at generation {generation}"))


def events(kubectl: Kubectl, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
    args = ["get", "events", "-n", namespace, "-o", "json"]
    if name is not None:
        args += ["--field-selector", f"involvedObject.name={name}"]
    return list(json.loads(kubectl(*args).stdout)["items"])


def wait_event(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = wait_until(lambda: [e for e in events(kubectl, namespace, name) if e["reason"] == reason],
                       15, f"a {reason} Event of {name}")
    return list(found)


def action(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in status["actions"] if a["name"] == name)


def top_edges(compiled: dict[str, Any]) -> set[tuple[str, str]]:
    """The edges between the action's top-level tasks (the entities' callRunbook tasks)."""
    parents = {t["id"]: t.get("parent") for t in compiled["tasks"]}
    return {(e["from"], e["to"]) for e in compiled["edges"] if parents[e["from"]] is None}


def assert_dag(compiled: dict[str, Any]) -> None:
    """Every edge joins two tasks of the action in the same runbook, and there is no cycle."""
    tasks = {t["id"]: t for t in compiled["tasks"]}
    assert compiled["taskCount"] == len(tasks) and compiled["edgeCount"] == len(compiled["edges"])
    for t in tasks.values():
        assert t.get("parent") is None or tasks[t["parent"]]["type"] == "callRunbook", t
    graph = nx.DiGraph()
    graph.add_nodes_from(tasks)
    for edge in compiled["edges"]:
        assert edge["from"] in tasks and edge["to"] in tasks, edge
        assert tasks[edge["from"]].get("parent") == tasks[edge["to"]].get("parent"), edge
        graph.add_edge(edge["from"], edge["to"])
    assert nx.is_directed_acyclic_graph(graph), compiled["name"]


def vault_data(kubectl: Kubectl, namespace: str) -> tuple[str | None, dict[str, str]]:
    """The resourceVersion and data of the project's vault Secret (None, {} while it has none)."""
    result = kubectl("get", "secret", vault_secret_name(namespace), "-n", OPERATOR_NAMESPACE, "-o", "json",
                     check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None, {}
    secret = json.loads(result.stdout)
    return secret["metadata"]["resourceVersion"], dict(secret.get("data") or {})


def forms(value: str) -> list[str]:
    """How a value could show up in text: as is, in base64, JSON-escaped."""
    return [value, base64.b64encode(value.encode()).decode(), json.dumps(value)[1:-1]]


def assert_absent(value: str, text: str, where: str) -> None:
    """Fail without quoting `text`: pytest would print the value it found."""
    found = [i for i, form in enumerate(forms(value)) if form in text]
    if found:
        pytest.fail(f"the secret value reached {where} (forms {found}: as is, base64, JSON-escaped)", pytrace=False)


# --- the three-tier example ----------------------------------------------------------------------


def test_three_tier_example_compiles_then_becomes_active(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    # What the example asks a newcomer to create first (compiling does not need its value).
    kubectl("create", "secret", "generic", "three-tier-db", "-n", namespace, "--from-literal=password=pw-3t")
    kubectl("apply", "-f", "-", input=json.dumps(three_tier(namespace)))
    ready(kubectl, namespace, "three-tier")
    status = get_bp(kubectl, namespace, "three-tier")["status"]
    assert status["state"] == "Compiled" and status["phase"] == "Provisioned" and status["observedGeneration"] == 1
    assert status["errors"] == [] and status["warnings"] == []
    assert (status["serviceCount"], status["actionCount"]) == (3, 6)
    assert status["taskCount"] == sum(len(a["tasks"]) for a in status["actions"])
    table = kubectl("get", "bp", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "READY", "STATE", "SERVICES", "ACTIONS", "AGE"]
    assert table[1].split()[:6] == ["three-tier", "Provisioned", "True", "Compiled", "3", "6"]

    kubectl("patch", "bp", "three-tier", "-n", namespace, "--type", "merge", "-p", '{"spec":{"active":true}}')
    status = observed(kubectl, namespace, "three-tier", 2)
    ready(kubectl, namespace, "three-tier")
    assert status["state"] == "Active" and condition(status, "Ready")["observedGeneration"] == 2
    # one table per kind; the cluster's ClusterLifecycles are listed too (`kubectl get stead` is every kind)
    tables = kubectl("get", "stead", "-n", namespace).stdout.strip().split("\n\n")
    table = next(t.split("\n") for t in tables if "blueprint.stead.dev/" in t)
    assert table[0].split() == ["NAME", "PHASE", "READY", "STATE", "SERVICES", "ACTIONS", "AGE"]
    row = table[1].split()
    assert row[0].endswith("three-tier") and row[1:6] == ["Provisioned", "True", "Active", "3", "6"]
    assert wait_event(kubectl, namespace, "three-tier", "Provisioned")[0]["type"] == "Normal"

    # The generated system actions, each with its DAG, marked system-generated; the user action apart.
    assert [a["name"] for a in status["actions"]] == [*SYSTEM_ACTIONS, "scale-report"]
    for compiled in status["actions"]:
        assert_dag(compiled)
        generated = compiled["name"] in SYSTEM_ACTIONS
        flags = (compiled["system"], compiled["systemGenerated"], compiled["userEdited"])
        assert flags == (generated, generated, False), compiled["name"]
        assert compiled["level"] == "Application"
    create = action(status, "create")
    assert {t["id"] for t in create["tasks"] if t.get("parent") is None} == {"db_pkg", "DB", "app_host", "App", "Web"}
    assert top_edges(create) == {("db_pkg", "DB"), ("app_host", "App"), ("DB", "App"), ("App", "Web")}
    assert ("DB/init", "DB/publish") in {(e["from"], e["to"]) for e in create["edges"]}  # the runbook's own edge
    assert top_edges(action(status, "start")) == {("DB", "App"), ("App", "Web")}
    assert top_edges(action(status, "stop")) == {("App", "DB"), ("Web", "App")}  # dependents first
    assert [t["id"] for t in action(status, "delete")["tasks"]] == ["db_pkg", "db_pkg/uninstall"]
    assert action(status, "scale-report")["edges"] == []

    # App's configure reads @@{DB.db_url}@@, which DB's publish sets in create: an implicit
    # dependency, listed, and the macro kept for run time.
    implicit = [d for d in status["dependencyList"] if d["type"] == "implicit"]
    assert {
        "type": "implicit", "getterResourceKind": "Service", "getterResourceName": "App",
        "setterResourceKind": "Service", "setterResourceName": "DB", "setterResourceAttr": "db_url",
        "actionResourceKind": "Application", "actionName": "create",
        "getterTask": "App/configure", "setterTask": "DB/publish",
        "source": "spec.services[1].actions[0].tasks[0].script",
    } in implicit
    assert {(d["getterResourceName"], d["setterResourceName"], d["setterResourceAttr"]) for d in implicit} == {
        ("App", "DB", "db_url"), ("Web", "App", "app_url")}
    explicit = {(d["getterResourceName"], d["setterResourceName"], d["source"])
                for d in status["dependencyList"] if d["type"] == "explicit"}
    assert explicit == {("App", "DB", "spec.services[1].dependsOn[0]"), ("Web", "App", "spec.services[2].dependsOn[0]")}
    tasks = {t["id"]: t for t in create["tasks"]}
    assert "@@{DB.db_url}@@" in tasks["App/configure"]["runtimeMacros"]
    assert "@@{db_cred.secret}@@" in tasks["DB/init"]["runtimeMacros"]  # secrets are fetched at run time


def test_an_implicit_dependency_alone_orders_every_system_action(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    def service(name: str, create: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "actions": [{"name": "create", "tasks": [create]},
                                          {"name": "start", "tasks": [task("up", "true")]},
                                          {"name": "stop", "tasks": [task("down", "true")]}]}

    spec = simple_spec([service("DB", task("publish", "echo db_url=pg://db", ["db_url"])),
                        service("App", task("configure", "echo @@{DB.db_url}@@"))])  # no dependsOn
    kubectl("apply", "-f", "-", input=bp_manifest("implicit", namespace, spec))
    ready(kubectl, namespace, "implicit")
    status = get_bp(kubectl, namespace, "implicit")["status"]
    reasons = {a["name"]: {(e["from"], e["to"]): e["reason"] for e in a["edges"]} for a in status["actions"]}
    assert reasons["create"] == {("DB", "App"): "implicit"}
    assert reasons["start"] == {("DB", "App"): "implicit"}  # promoted: holds for every system action
    assert reasons["stop"] == {("App", "DB"): "implicit"}
    assert [(d["getterTask"], d["setterTask"]) for d in status["dependencyList"] if d["type"] == "implicit"] == [
        ("App/configure", "DB/publish")]


# --- cycles --------------------------------------------------------------------------------------


CYCLES = [
    pytest.param(
        [{"name": "S1", "dependsOn": ["S2"]}, {"name": "S2", "dependsOn": ["S1"]}],
        "spec.services[0].dependsOn[0]: dependency cycle: S1 -> S2 -> S1 (S1 dependsOn S2; S2 dependsOn S1)",
        id="explicit"),
    pytest.param(
        [{"name": "S1", "dependsOn": ["S2"], "actions": [{"name": "create", "tasks": [task("p", "echo u=1", ["u"])]}]},
         {"name": "S2", "actions": [{"name": "create", "tasks": [task("r", "echo @@{S1.u}@@")]}]}],
        "spec.services[0].dependsOn[0]: dependency cycle: S1 -> S2 -> S1 "
        "(S1 dependsOn S2; S2 reads @@{S1.u}@@ that S1 sets in create)",
        id="through-an-implicit-dependency"),
]


@pytest.mark.parametrize("services,message", CYCLES)
def test_a_cycle_ends_in_error_naming_it_and_the_operator_keeps_serving(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, audit: AuditLog,
    services: list[dict[str, Any]], message: str,
) -> None:
    mark = audit.mark()
    kubectl("apply", "-f", "-", input=bp_manifest("cyclic", namespace, simple_spec(services)))
    status = observed(kubectl, namespace, "cyclic", 1)
    assert status["state"] == "Error" and status["errors"] == [message]
    stalled, ready_ = condition(status, "Stalled"), condition(status, "Ready")
    assert (stalled["status"], stalled["reason"], stalled["message"]) == ("True", "DependencyCycle", message)
    assert (ready_["status"], ready_["reason"]) == ("False", "DependencyCycle")
    assert condition(status, "Reconciling")["status"] == "False"
    assert status["actions"] == [] and status["dependencyList"] == []
    warning = wait_event(kubectl, namespace, "cyclic", "DependencyCycle")
    assert [(e["type"], e["message"]) for e in warning] == [("Warning", message)]
    row = kubectl("get", "bp", "cyclic", "-n", namespace, "--no-headers").stdout.split()
    assert row[2:5] == ["False", "Error", "2"]

    # No crash, no retry loop: the operator serves the next blueprint, and the stalled one
    # got exactly one status write.
    kubectl("apply", "-f", "-", input=bp_manifest("fine", namespace, simple_spec([{"name": "S1"}])))
    ready(kubectl, namespace, "fine")
    assert operator.process is not None and operator.process.poll() is None
    writes = [e for e in audit.since(mark) if e.resource == "blueprints" and e.name == "cyclic"
              and e.user_agent.startswith(USER_AGENT)]
    assert [(e.verb, e.subresource) for e in writes] == [("patch", "status")]

    # Fixing the spec recovers it, with nothing left of the error.
    fixed = [{k: v for k, v in s.items() if k != "dependsOn"} for s in services]
    kubectl("apply", "-f", "-", input=bp_manifest("cyclic", namespace, simple_spec(fixed)))
    status = observed(kubectl, namespace, "cyclic", 2)
    assert status["state"] == "Compiled" and status["errors"] == []
    assert condition(status, "Stalled")["status"] == "False"
    # Between the two generations (longer than the first backoff step), the stalled one was never
    # retried: the operator logs every retry with the object's key.
    assert f"Blueprint/{namespace}/cyclic:" not in operator.log_path.read_text()


# --- user-edited actions -------------------------------------------------------------------------


def test_a_user_edited_create_is_dropped_when_the_dependency_list_changes(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    edit = {"name": "create", "tasks": [task("notify", "echo created")],
            "edges": [{"from": "A", "to": "notify"}, {"from": "notify", "to": "B"}]}

    def spec(b_depends_on: list[str], notify: str = "echo created") -> dict[str, Any]:
        services = [{"name": "A", "actions": [{"name": "create", "tasks": [task("a", "echo a")]}]},
                    {"name": "B", "dependsOn": b_depends_on,
                     "actions": [{"name": "create", "tasks": [task("b", "echo b")]}]}]
        return simple_spec(services, actions=[{**edit, "tasks": [task("notify", notify)]}])

    def flags(status: dict[str, Any]) -> set[tuple[str, bool, bool]]:
        return {(a["name"], a["systemGenerated"], a["userEdited"]) for a in status["actions"]}

    kubectl("apply", "-f", "-", input=bp_manifest("edited", namespace, spec([])))
    status = observed(kubectl, namespace, "edited", 1)
    assert status["state"] == "Compiled"
    # The edit is in force; the other system actions are rebuilt from it, user-edited as well.
    assert flags(status) == {(name, False, True) for name in SYSTEM_ACTIONS}
    assert top_edges(action(status, "create")) == {("A", "notify"), ("notify", "B")}
    assert [e["reason"] for e in action(status, "create")["edges"]] == ["user", "user"]
    assert [r["accepted"] for r in status["compiledState"]["edits"]] == [True]

    # A spec change that leaves the dependency list alone keeps the edit.
    kubectl("patch", "bp", "edited", "-n", namespace, "--type", "merge", "-p", '{"spec":{"description":"v2"}}')
    status = observed(kubectl, namespace, "edited", 2)
    assert flags(status) == {(name, False, True) for name in SYSTEM_ACTIONS}

    # B now dependsOn A: the dependency list changed, the edit is thrown away, everything is
    # rebuilt as system-generated, with a Warning Event and a warning naming the ignored edit.
    kubectl("apply", "-f", "-", input=bp_manifest("edited", namespace, spec(["A"])))
    status = observed(kubectl, namespace, "edited", 3)
    assert status["state"] == "Compiled" and condition(status, "Ready")["status"] == "True"
    assert flags(status) == {(name, True, False) for name in SYSTEM_ACTIONS}
    assert top_edges(action(status, "create")) == {("A", "B")}
    assert "notify" not in {t["id"] for t in action(status, "create")["tasks"]}
    assert status["warnings"] == ["spec.actions[0]: ignored: this edit of create was made before the dependency list "
                                  "changed; edit it again to apply it, or remove it"]
    assert [r["accepted"] for r in status["compiledState"]["edits"]] == [False]
    rebuilt = wait_event(kubectl, namespace, "edited", "ActionsRebuilt")
    assert len(rebuilt) == 1 and rebuilt[0]["type"] == "Warning"
    assert "user-edited actions (create) were thrown away" in rebuilt[0]["message"]
    assert "spec.actions[0]" in rebuilt[0]["message"]

    # Editing it again applies it again (and no second ActionsRebuilt).
    kubectl("apply", "-f", "-", input=bp_manifest("edited", namespace, spec(["A"], notify="echo created again")))
    status = observed(kubectl, namespace, "edited", 4)
    assert flags(status) == {(name, False, True) for name in SYSTEM_ACTIONS}
    assert status["warnings"] == []
    assert len([e for e in events(kubectl, namespace, "edited") if e["reason"] == "ActionsRebuilt"]) == 1


# --- apply-time refusals -------------------------------------------------------------------------


def _valid_services() -> list[dict[str, Any]]:
    return [{"name": "S1", "actions": [{"name": "create", "tasks": [task("t", "echo @@{S1.x}@@")]}],
             "variables": [{"name": "x", "value": "1"}]},
            {"name": "S2"}]


def _bad(change: str) -> dict[str, Any]:
    spec = simple_spec(_valid_services())
    if change == "missing-dependency":
        spec["services"][1]["dependsOn"] = ["S9"]
    elif change == "unknown-substrate":
        spec["deployments"][0]["substrate"] = "nohost"
    elif change == "duplicate-name":
        spec["services"][1]["name"] = "S1"
    elif change == "macro-syntax":
        spec["services"][0]["actions"][0]["tasks"][0]["script"] = "echo @@{S1.x"
    elif change == "edge-to-missing-task":
        spec["services"][0]["actions"][0]["edges"] = [{"from": "t", "to": "missing"}]
    elif change == "hyphen-in-name":
        spec["services"][1]["name"] = "my-db"
    elif change == "two-secret-sources":
        spec["credentials"] = [{"name": "c", "type": "password", "username": "u",
                                "secret": {"value": "two-sources-Q7x", "secretRef": {"name": "s", "key": "k"}}}]
    else:
        raise AssertionError(change)
    return spec


BAD_SPECS = [
    pytest.param("missing-dependency", 'spec.services[1].dependsOn[0]: no service "S9"', id="missing-dependency"),
    pytest.param("unknown-substrate", 'spec.deployments[0].substrate: no substrate "nohost"', id="unknown-substrate"),
    pytest.param("duplicate-name", 'spec.services[1].name: duplicate name "S1" (first at spec.services[0].name',
                 id="duplicate-name"),
    pytest.param("macro-syntax", "spec.services[0].actions[0].tasks[0].script: macro syntax error at position 5",
                 id="macro-syntax"),
    pytest.param("edge-to-missing-task", 'spec.services[0].actions[0].edges[0].to: no task "missing" in this runbook',
                 id="edge-to-missing-task"),
    pytest.param("hyphen-in-name", "spec.services[1].name", id="hyphen-in-name"),
    pytest.param("two-secret-sources",
                 "spec.credentials[0].secret: exactly one of secretRef, value, vaultRef must be set",
                 id="two-secret-sources"),
]


@pytest.mark.parametrize("change,message", BAD_SPECS)
def test_bad_specs_are_refused_at_apply_time_naming_the_field(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, change: str, message: str
) -> None:
    before = vault_data(kubectl, namespace)
    result = kubectl("apply", "-f", "-", input=bp_manifest("bad", namespace, _bad(change)), check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert_absent("two-sources-Q7x", result.stderr, "an admission error")
    assert kubectl("get", "bp", "bad", "-n", namespace, check=False).returncode != 0  # nothing stored
    assert vault_data(kubectl, namespace) == before


# --- inline secrets ------------------------------------------------------------------------------

CREDENTIAL = "cred-Xq7!pw\"0f3c9a"  # a quote: it would show JSON-escaped in a JSON dump
VARIABLE = "var-token-5e1d77b2"


def secret_spec(credential: str = CREDENTIAL, variable: str = VARIABLE) -> dict[str, Any]:
    return simple_spec(
        [{"name": "DB", "actions": [{"name": "create", "tasks": [
            task("init", "echo @@{db_cred.username}@@ @@{db_cred.secret}@@ @@{token}@@")]}]}],
        credentials=[{"name": "db_cred", "type": "password", "username": "shop", "secret": {"value": credential}}],
        variables=[{"name": "token", "type": "secret", "secret": {"value": variable}}],
    )


def test_an_inline_secret_goes_into_the_vault_and_nowhere_else(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, audit: AuditLog
) -> None:
    mark = audit.mark()
    # `kubectl create` here; `kubectl apply` (and its last-applied annotation) has its own test below.
    kubectl("create", "-f", "-", input=bp_manifest("sec", namespace, secret_spec()))
    ready(kubectl, namespace, "sec")
    body = get_bp(kubectl, namespace, "sec")
    cred_ref = body["spec"]["credentials"][0]["secret"]
    var_ref = body["spec"]["variables"][0]["secret"]
    assert set(cred_ref) == {"vaultRef", "sealed"} and set(var_ref) == {"vaultRef", "sealed"}
    refs = {cred_ref["vaultRef"]: CREDENTIAL, var_ref["vaultRef"]: VARIABLE}
    assert len(refs) == 2 and all(UUID.match(ref) for ref in refs) and DRY_RUN_VAULT_REF not in refs
    assert body["status"]["state"] == "Compiled"

    # Nowhere: the object (YAML and JSON), its status, any Event, the operator's log, its store.
    yaml_text = kubectl("get", "bp", "sec", "-n", namespace, "-o", "yaml").stdout
    assert cred_ref["vaultRef"] in yaml_text
    wait_event(kubectl, namespace, "sec", "Provisioned")
    store = LocalStore(operator.store, readonly=True)
    try:
        stored = store.get(object_key("Blueprint", namespace, "sec"))
        assert stored is not None
        stored_text = json.dumps({"spec": stored.spec, "status": stored.status})
        env, db = store.open_db(VAULT_DB)
        with env.begin(db=db) as txn:
            local = {ref: txn.get(f"{namespace}/{ref}".encode()) for ref in refs}
    finally:
        store.close()
    for value in refs.values():
        assert_absent(value, yaml_text, "the object")
        assert_absent(value, json.dumps(body), "the object")
        assert_absent(value, json.dumps(events(kubectl, namespace)), "an Event")
        assert_absent(value, operator.log_path.read_text(errors="replace"), "the operator's log")
        assert_absent(value, stored_text, "the operator's store")

    # The vault has each value: its project's Secret holds a ciphertext under each uuid (the same
    # bytes as the operator's LMDB), which the vault's master key, and only that, opens.
    _, data = vault_data(kubectl, namespace)
    assert set(refs) <= set(data)
    key_secret = json.loads(kubectl("get", "secret", KEY_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "json").stdout)
    keys = MasterKey.from_secret_data(key_secret["data"])
    for ref, value in refs.items():
        blob = base64.b64decode(data[ref])
        assert value.encode() not in blob
        assert local[ref] == blob
        assert decrypt(keys, namespace, ref, blob) == value.encode()
    vault_text = kubectl("get", "secret", vault_secret_name(namespace), "-n", OPERATOR_NAMESPACE, "-o", "yaml").stdout
    for value in refs.values():
        assert_absent(value, vault_text, "the vault Secret")
    writes = {(e.verb, e.name) for e in audit.since(mark) if e.resource == "secrets"
              and e.namespace == OPERATOR_NAMESPACE and e.user_agent.startswith(USER_AGENT)
              # another namespace's vault copy: an earlier test's namespace being collected
              and not (e.name.startswith("stead-vault-") and e.name != vault_secret_name(namespace))}
    assert writes and {name for _, name in writes} == {vault_secret_name(namespace)}

    # A server-side dry run shows the placeholder and writes nothing to the vault.
    version, data = vault_data(kubectl, namespace)
    dry = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                  input=bp_manifest("dry", namespace, secret_spec("dry-cred-8e2b", "dry-var-1c4f")))
    dry_spec = json.loads(dry.stdout)["spec"]
    assert dry_spec["credentials"][0]["secret"] == {"vaultRef": DRY_RUN_VAULT_REF}
    assert dry_spec["variables"][0]["secret"] == {"vaultRef": DRY_RUN_VAULT_REF}
    assert_absent("dry-cred-8e2b", json.dumps(dry_spec), "a dry run's spec")
    assert vault_data(kubectl, namespace) == (version, data)
    assert kubectl("get", "bp", "dry", "-n", namespace, check=False).returncode != 0


def test_the_operator_never_writes_spec(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, audit: AuditLog
) -> None:
    mark = audit.mark()
    kubectl("create", "-f", "-", input=bp_manifest("w", namespace, secret_spec("w-cred-3a9d", "w-var-77c1")))
    ready(kubectl, namespace, "w")
    kubectl("patch", "bp", "w", "-n", namespace, "--type", "merge", "-p", '{"spec":{"active":true}}')
    assert observed(kubectl, namespace, "w", 2)["state"] == "Active"
    cyclic = simple_spec([{"name": "S1", "dependsOn": ["S2"]}, {"name": "S2", "dependsOn": ["S1"]}])
    kubectl("apply", "-f", "-", input=bp_manifest("c", namespace, cyclic))
    assert observed(kubectl, namespace, "c", 1)["state"] == "Error"
    # The inline secrets became vaultRefs inside the user's own create (the mutating webhook),
    # not through a write of the operator's.
    assert "vaultRef" in get_bp(kubectl, namespace, "w")["spec"]["credentials"][0]["secret"]

    entries = [e for e in audit.since(mark) if e.resource == "blueprints" and e.namespace == namespace]
    ours = [e for e in entries if e.user_agent.startswith((USER_AGENT, "kopf"))
            and e.verb in ("patch", "update", "create", "delete")]
    assert ours and all(e.subresource == "status" for e in ours), ours
    assert [e.name for e in ours].count("w") == 2  # one status PATCH per generation
    assert [e.name for e in ours].count("c") == 1
    spec_writers = {e.user_agent.split("/")[0] for e in entries
                    if e.verb in ("patch", "update", "create") and e.subresource == ""}
    assert spec_writers == {"kubectl"}


# --- inline secrets: every copy of the manifest, every place a secret can be, nothing on refusal ----


def test_kubectl_apply_keeps_no_inline_secret_in_the_last_applied_annotation(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-f", "-", input=bp_manifest("applied", namespace, secret_spec("applied-cred-6b0e", "applied-v")))
    assert "vaultRef" in get_bp(kubectl, namespace, "applied")["spec"]["credentials"][0]["secret"]
    assert_absent("applied-cred-6b0e", kubectl("get", "bp", "applied", "-n", namespace, "-o", "yaml").stdout,
                  "the object's last-applied annotation")


def test_an_inline_secret_variable_of_a_service_goes_into_the_vault_too(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    service = {"name": "S1", "variables": [{"name": "pw", "type": "secret", "secret": {"value": "svc-var-2d8a"}}],
               "actions": [{"name": "create", "tasks": [task("t", "echo @@{pw}@@")]}]}
    kubectl("create", "-f", "-", input=bp_manifest("nested", namespace, simple_spec([service])))
    body = get_bp(kubectl, namespace, "nested")
    assert_absent("svc-var-2d8a", json.dumps(body), "the object")
    assert set(body["spec"]["services"][0]["variables"][0]["secret"]) == {"vaultRef", "sealed"}


def test_a_blank_inline_secret_is_refused(operator: OperatorProcess, kubectl: Kubectl, namespace: str) -> None:
    spec = secret_spec("   ", VARIABLE)
    result = kubectl("create", "-f", "-", input=bp_manifest("blank", namespace, spec), check=False)
    assert result.returncode != 0
    assert "spec.credentials[0].secret.value: must not be empty" in result.stderr


def test_a_refused_blueprint_leaves_nothing_in_the_vault(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    before = vault_data(kubectl, namespace)
    spec = secret_spec("refused-cred-4c2e", "refused-var-9a1b")
    spec["services"][0]["dependsOn"] = ["S9"]
    result = kubectl("create", "-f", "-", input=bp_manifest("refused", namespace, spec), check=False)
    assert result.returncode != 0 and 'spec.services[0].dependsOn[0]: no service "S9"' in result.stderr
    assert vault_data(kubectl, namespace) == before


def test_a_deleted_blueprint_is_deleted_while_apps_use_it_then_its_secrets_go(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("create", "-f", "-", input=bp_manifest("used", namespace, secret_spec("used-cred-51f0", "used-var-7e2c")))
    ready(kubectl, namespace, "used")
    refs = {s["vaultRef"] for s in (get_bp(kubectl, namespace, "used")["spec"]["credentials"][0]["secret"],
                                    get_bp(kubectl, namespace, "used")["spec"]["variables"][0]["secret"])}
    assert refs <= set(vault_data(kubectl, namespace)[1])
    # An App that names it (its launch need not succeed here: being named is what keeps the blueprint).
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"name": "user", "namespace": namespace},
        "spec": {"blueprint": "used"}}))
    kubectl("delete", "bp", "used", "-n", namespace, "--wait=false")
    state = wait_until(lambda: get_bp(kubectl, namespace, "used").get("status", {}).get("state") == "Deleted",
                       30, "the blueprint to show Deleted")
    assert state
    reconciling = condition(get_bp(kubectl, namespace, "used")["status"], "Reconciling")
    assert reconciling["reason"] == "InUse" and "user" in reconciling["message"]
    assert refs <= set(vault_data(kubectl, namespace)[1])  # the app's snapshot still needs them
    app = json.loads(kubectl("get", "app", "user", "-n", namespace, "-o", "json").stdout)
    if app["metadata"].get("finalizers"):  # its delete action must not wait on scripts in this test
        kubectl("patch", "app", "user", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("delete", "app", "user", "-n", namespace, "--wait=true", "--timeout=30s")
    wait_until(lambda: kubectl("get", "bp", "used", "-n", namespace, check=False).returncode != 0, 40,
               "the blueprint to go once no app uses it")
    assert not refs & set(vault_data(kubectl, namespace)[1])
