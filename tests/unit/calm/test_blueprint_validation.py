"""Apply-time checks of a Blueprint spec: each problem starts with its field path, none quotes a value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from operators.calm.validation import spec_problems

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hunter2-do-not-print"


def good() -> dict[str, Any]:
    """A small valid spec: two deployments, three services, a package, a credential, a runbook."""
    return {
        "variables": [{"name": "port", "type": "int", "value": "80"}],
        "credentials": [{"name": "cred", "type": "key", "username": "admin",
                         "secret": {"secretRef": {"name": "s", "key": "password"}}}],
        "substrates": [{"name": "SUB1", "type": "Local"},
                       {"name": "vm", "type": "Existing", "address": "10.0.0.5", "credential": "cred",
                        "knownHosts": {"secretRef": {"name": "vm-host-keys", "key": "known_hosts"}}}],
        "packages": [{"name": "P1", "install": {"tasks": [{"name": "i", "type": "exec", "script": "true"}]}}],
        "services": [
            {"name": "S1", "actions": [{"name": "create", "tasks": [
                {"name": "a", "type": "setvar", "variables": ["x"], "script": "echo x=1"},
                {"name": "b", "type": "callRunbook", "runbook": "common"}],
                "edges": [{"from": "a", "to": "b"}]}]},
            {"name": "S2", "dependsOn": ["S1"]},
            {"name": "S3", "dependsOn": ["S2"], "actions": [{"name": "backup", "tasks": [
                {"name": "wait", "type": "delay", "delaySeconds": 1}]}]},
        ],
        "deployments": [
            {"name": "D1", "substrate": "SUB1", "packages": ["P1"], "services": ["S1", "S2"]},
            {"name": "D2", "substrate": "vm", "services": ["S3"], "minReplicas": 1, "maxReplicas": 3},
        ],
        "actions": [{"name": "report", "tasks": [
            {"name": "r", "type": "callRunbook", "action": "backup", "target": "S3"}]}],
        "runbooks": [{"name": "common", "tasks": [{"name": "t", "type": "exec", "script": "echo @@{x}@@"}]}],
    }


def test_a_good_spec_and_the_example_have_no_problems() -> None:
    assert spec_problems(good()) == []
    example = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())
    assert spec_problems(example["spec"]) == []


def with_(change: Any) -> list[str]:
    spec = copy.deepcopy(good())
    change(spec)
    return spec_problems(spec)


def test_a_depends_on_naming_a_missing_service() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][2]["dependsOn"] = ["S9"]
    assert with_(change) == ['spec.services[2].dependsOn[0]: no service "S9"']


def test_depends_on_self_twice_and_on_a_credential() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][1]["dependsOn"] = ["S2", "S1", "S1", "cred"]
    assert with_(change) == [
        'spec.services[1].dependsOn[0]: "S2" cannot depend on itself',
        'spec.services[1].dependsOn[2]: "S1" is listed twice',
        'spec.services[1].dependsOn[3]: "cred" is a credential, not an entity',
    ]


def test_duplicate_names_share_one_namespace() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["packages"].append({"name": "S1"})
        spec["deployments"][0]["packages"].append("S1")
    problems = with_(change)
    assert problems[0].startswith('spec.services[0].name: duplicate name "S1" (first at spec.packages[1].name; '
                                  "substrates, deployments, packages, services and credentials share one namespace)")


def test_duplicate_tasks_variables_actions_and_runbooks() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["variables"].append({"name": "port", "value": "81"})
        spec["services"][0]["actions"][0]["tasks"].append({"name": "a", "type": "exec", "script": "true"})
        spec["services"][2]["actions"].append({"name": "backup"})
        spec["runbooks"].append({"name": "common"})
    assert with_(change) == [
        'spec.runbooks[1].name: duplicate runbook "common" (first at spec.runbooks[0].name)',
        'spec.variables[1].name: duplicate variable "port" (first at spec.variables[0])',
        'spec.services[0].actions[0].tasks[2].name: duplicate task "a" (first at spec.services[0].actions[0].tasks[0])',
        'spec.services[2].actions[1].name: duplicate action "backup" (first at spec.services[2].actions[0])',
    ]


def test_kind_names_are_reserved() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][2]["name"] = "Service"
    assert with_(change)[0].startswith('spec.services[2].name: "Service" is reserved')


def test_references_of_deployments() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["deployments"][0]["substrate"] = "P1"
        spec["deployments"][0]["packages"] = ["P9"]
        spec["deployments"][1]["services"] = ["S3", "S1"]
    assert with_(change) == [
        'spec.deployments[1].services[1]: "S1" is already in deployment "D1" (each entity is in one)',
        'spec.substrates[0]: substrate "SUB1" is in no deployment (list it in one, or it never runs)',
        'spec.deployments[0].substrate: "P1" is a package, not a substrate',
        'spec.deployments[0].packages[0]: no package "P9"',
    ]


def test_replicas_must_be_ordered() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["deployments"][1].update(minReplicas=3, defaultReplicas=2, maxReplicas=4)
    assert with_(change) == [
        "spec.deployments[1]: replicas must satisfy minReplicas <= defaultReplicas <= maxReplicas (got 3 <= 2 <= 4)"
    ]

    def defaults(spec: dict[str, Any]) -> None:
        spec["deployments"][1] = {**spec["deployments"][1], "minReplicas": 2, "maxReplicas": None}
    assert with_(defaults) == []  # default = min, max = default


def test_edges_must_name_tasks_of_their_runbook() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][0]["actions"][0]["edges"] = [{"from": "a", "to": "zz"}, {"from": "b", "to": "b"}]
    assert with_(change) == [
        'spec.services[0].actions[0].edges[0].to: no task "zz" in this runbook',
        'spec.services[0].actions[0].edges[1]: an edge from "b" to itself',
    ]


def test_a_setvar_must_name_its_variables() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][0]["actions"][0]["tasks"][0]["variables"] = []
    assert with_(change) == [
        "spec.services[0].actions[0].tasks[0].variables: a setvar task must name the variables it sets"
    ]


def test_task_fields_follow_the_type() -> None:
    def change(spec: dict[str, Any]) -> None:
        tasks = spec["services"][0]["actions"][0]["tasks"]
        tasks.append({"name": "c", "type": "exec", "delaySeconds": 3})
        tasks.append({"name": "d", "type": "http"})
        tasks.append({"name": "e", "type": "callRunbook", "runbook": "common", "action": "create"})
        tasks.append({"name": "f", "type": "callRunbook", "runbook": "nope"})
        tasks.append({"name": "g", "type": "callRunbook", "action": "backup", "target": "S1"})
        tasks.append({"name": "h", "type": "exec", "script": "true", "target": "S7"})
    assert with_(change) == [
        "spec.services[0].actions[0].tasks[2].delaySeconds: not used by a task of type exec",
        "spec.services[0].actions[0].tasks[2].script: required for a task of type exec",
        "spec.services[0].actions[0].tasks[3].http: required for a task of type http",
        "spec.services[0].actions[0].tasks[4]: a callRunbook task names exactly one of runbook and action",
        'spec.services[0].actions[0].tasks[5].runbook: no runbook "nope" in spec.runbooks',
        'spec.services[0].actions[0].tasks[6].action: service "S1" has no action "backup" '
        "(it has: create, delete, restart, start, stop)",
        'spec.services[0].actions[0].tasks[7].target: no service, package, substrate or deployment "S7"',
    ]


def test_substrate_fields_follow_the_type() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["substrates"][0].update(address="1.2.3.4")
        spec["substrates"][1].update(type="Kubernetes")
    assert with_(change) == [
        "spec.substrates[0].address: not used by a substrate of type Local",
        "spec.substrates[1].manifest: required for a substrate of type Kubernetes",
        "spec.substrates[1].address: not used by a substrate of type Kubernetes",
        "spec.substrates[1].credential: not used by a substrate of type Kubernetes",
        "spec.substrates[1].knownHosts: not used by a substrate of type Kubernetes",
    ]


def test_a_macro_syntax_error_is_refused_at_apply_time() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["runbooks"][0]["tasks"][0]["script"] = "echo @@{x"
    assert with_(change) == [
        "spec.runbooks[0].tasks[0].script: macro syntax error at position 5: "
        "unterminated macro: '@@{' has no matching '}@@'"
    ]


def test_variable_values_are_checked_without_being_quoted() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["variables"] = [
            {"name": "n", "type": "int", "value": SECRET},
            {"name": "r", "value": SECRET, "regex": "[0-9]+"},
            {"name": "o", "value": SECRET, "options": ["a", "b"]},
            {"name": "d", "type": "dict", "value": "[1]"},
            {"name": "m", "mandatory": True},
            {"name": "calm_x", "value": "1"},
        ]
    problems = with_(change)
    assert problems == [
        "spec.variables[0].value: not a valid int",
        "spec.variables[1].value: does not match regex",
        "spec.variables[2].value: not one of options",
        "spec.variables[3].value: not a JSON object (type dict)",
        "spec.variables[4].value: required (mandatory, and not set at launch)",
        'spec.variables[5].name: names starting with "calm_" are for built-in macros',
    ]
    assert SECRET not in str(problems)


def test_secrets_are_one_of_three_and_never_echoed() -> None:
    def both(spec: dict[str, Any]) -> None:
        spec["credentials"][0]["secret"] = {"value": SECRET, "secretRef": {"name": "s", "key": "k"}}
    problems = with_(both)
    assert problems == [
        "spec.credentials[0].secret: Value error, exactly one of secretRef, value, vaultRef must be set "
        "(got secretRef, value)"
    ]

    def wrong_type(spec: dict[str, Any]) -> None:
        spec["variables"].append({"name": "pw", "type": "secret", "value": SECRET})
        spec["variables"].append({"name": "pw2", "value": "x", "secret": {"value": SECRET}})
        spec["credentials"][0]["secret"] = {"value": SECRET, "vaultRef": "not-a-uuid"}
    problems = with_(wrong_type)
    assert SECRET not in str(problems)
    assert problems[0].startswith("spec.credentials[0].secret.vaultRef: String should match pattern")

    def inline(spec: dict[str, Any]) -> None:
        spec["variables"].append({"name": "pw", "type": "secret", "value": SECRET})
        spec["variables"].append({"name": "pw2", "value": "x", "secret": {"value": SECRET}})
    assert with_(inline) == [
        "spec.variables[1].value: a secret variable takes its value from `secret`, never `value`",
        "spec.variables[2].secret: only for variables of type secret",
    ]


def test_an_inline_secret_is_not_in_the_models_repr() -> None:
    from operators.calm.models import SecretSource

    assert SECRET not in repr(SecretSource.model_validate({"value": SECRET}))


def test_schema_errors_name_the_field() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["services"][0]["actions"][0]["tasks"][0]["type"] = "shell"
        spec["services"][1]["name"] = "my-service"
    problems = with_(change)
    assert problems[0].startswith("spec.services[0].actions[0].tasks[0].type: Input should be ")
    assert problems[1].startswith("spec.services[1].name: String should match pattern")


def big_spec(services: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"substrates": [], "services": [], "deployments": []}
    for i in range(services):
        spec["substrates"].append({"name": f"sub{i}", "type": "Local"})
        spec["services"].append({
            "name": f"s{i}", "dependsOn": [f"s{i - 1}"] if i else [],
            "actions": [{"name": "create", "tasks": [
                {"name": "set", "type": "setvar", "variables": ["v"], "script": "echo v=1"},
                {"name": "use", "type": "exec", "script": f"echo @@{{s{max(i - 1, 0)}.v}}@@"}]}],
        })
        spec["deployments"].append({"name": f"d{i}", "substrate": f"sub{i}", "services": [f"s{i}"]})
    return spec


def test_a_blueprint_of_800_chained_services_is_valid() -> None:
    """The webhook's size: how long it takes is bench/compile.py's (`spec_problems` at 800 services), not a test's."""
    assert spec_problems(big_spec(800)) == []
