"""The console's forms as pure data: schemas from the models (the CRDs' own), the objects forms start from and
send, the YAML and commands shown beside them, and the API server's refusals placed at their fields."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import yaml

from operators.catalog import KINDS
from operators.console.views import forms_model as forms
from operators.runtime.kube import crds as crdgen


def _without_defaults(node: Any) -> Any:
    """A schema without its `default` keywords (a property named "default" stays: a ServiceEntity's attributes
    have one)."""
    if not isinstance(node, dict):
        return node
    out = {k: _without_defaults(v) for k, v in node.items() if k not in ("default", "properties")}
    if "properties" in node:
        out["properties"] = {name: _without_defaults(sub) for name, sub in node["properties"].items()}
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.plural)
def test_a_forms_schema_is_its_crds_spec_schema_with_the_models_defaults(kind: Any) -> None:
    crd = crdgen.crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _without_defaults(forms.spec_schema(kind.plural)) == crd
    json.dumps(forms.spec_schema(kind.plural))  # served as JSON


def test_defaults_come_back_from_the_models_nested_ones_too() -> None:
    app = forms.spec_schema("apps")["properties"]
    assert app["lockTtlSeconds"]["default"] == 3600
    assert app["softDelete"]["default"] is False
    auto = forms.spec_schema("environments")["properties"]["graphs"]["properties"]["autoRun"]["properties"]
    assert auto["debounceSeconds"]["default"] == 10
    assert auto["graphType"]["default"] == "default"
    assert "default" not in app["blueprint"]


def test_an_unknown_kind_or_action_is_refused_by_name() -> None:
    with pytest.raises(forms.FormRefused, match="no Stead kind 'pods'") as refused:
        forms.new_form("pods", "ns")
    assert refused.value.status == 404
    with pytest.raises(forms.FormRefused, match="no action 'frobnicate' on apps"):
        forms.action_form("apps", "frobnicate", {"metadata": {"name": "web"}})


def test_the_new_form_takes_spec_fields_and_the_name_from_the_link_but_nothing_else() -> None:
    form = forms.new_form("actionruns", "team", {"spec.app": "web", "metadata.labels": "x", "metadata.name": "r1"})
    assert form["mode"] == "create" and form["kind"] == "ActionRun"
    assert form["object"]["spec"] == {"app": "web"}
    assert form["object"]["metadata"] == {"name": "r1", "namespace": "team"}
    assert form["schema"]["required"] == ["app", "action"]
    assert "namespace" not in forms.new_form("clusterlifecycles", "team")["object"]["metadata"]


def test_the_run_form_names_its_app_fixed_and_suggests_system_and_blueprint_actions() -> None:
    app = {"metadata": {"name": "web", "namespace": "team"}, "spec": {"blueprint": "small"}}
    blueprint = {"status": {"actions": [{"name": "create", "level": "Application"},
                                        {"name": "backup", "level": "Application"},
                                        {"name": "svc_only", "level": "Service"}]}}
    form = forms.action_form("apps", "run", app, blueprint)
    assert form["plural"] == "actionruns" and form["mode"] == "create"
    assert form["object"]["spec"] == {"app": "web", "action": ""}
    assert form["object"]["metadata"]["namespace"] == "team"
    assert form["fixed"] == ["spec.app"]
    assert form["suggestions"]["spec.action"] == ["create", "start", "stop", "restart", "delete", "backup"]


def test_the_execute_form_runs_the_default_graph_on_its_environment() -> None:
    form = forms.action_form("environments", "execute", {"metadata": {"name": "env1", "namespace": "team"}})
    assert form["plural"] == "graphruns"
    assert form["object"]["spec"] == {"environment": "env1", "graphs": [{"type": "default"}]}
    assert form["fixed"] == ["spec.environment"]
    assert form["suggestions"] == {}


def test_the_execute_form_offers_the_environments_graph_types_and_nodes_in_every_item() -> None:
    env = {"metadata": {"name": "env1", "namespace": "team"},
           "spec": {"release": "r1", "nodes": [{"name": "ctl", "roles": ["controller"]}, {"name": "cmp-1"}]}}
    form = forms.action_form("environments", "execute", env, graph_types=["default", "netconfig"])
    assert form["suggestions"] == {"spec.graphs[].type": ["default", "netconfig"],
                                   "spec.graphs[].nodes[]": ["ctl", "cmp-1"]}


def test_the_state_request_form_is_a_patch_at_the_version_seen_offering_the_states_allowed_now() -> None:
    instance = {"metadata": {"name": "db1", "namespace": "team"},
                "status": {"version": 4, "waysOut": ["state request down", "update -> updating", "auto -> up",
                                                     "state request maintenance (validated)"]}}
    form = forms.action_form("serviceinstances", "set-state", instance)
    assert form["mode"] == "patch"
    assert list(form["schema"]["properties"]) == ["stateRequest"]
    assert form["schema"]["properties"]["stateRequest"]["required"] == ["target", "currentVersion"]
    assert form["object"]["spec"] == {"stateRequest": {"target": "", "currentVersion": 4}}
    assert "spec.stateRequest.currentVersion" in form["fixed"]
    assert form["suggestions"] == {"spec.stateRequest.target": ["down", "maintenance"]}


def test_what_a_form_sends_is_pruned_in_its_routes_namespace_and_a_nameless_run_gets_a_generated_name() -> None:
    sent = forms.outgoing("actionruns", "create", "team", {
        "kind": "ActionRun", "metadata": {"name": "", "namespace": "elsewhere", "uid": "u"},
        "spec": {"app": "Web_1", "action": "create", "arguments": {}, "abort": None}})
    assert sent == {"apiVersion": "stead.dev/v1alpha1", "kind": "ActionRun",
                    "metadata": {"generateName": "web-1-create-", "namespace": "team"},
                    "spec": {"app": "Web_1", "action": "create"}}
    with pytest.raises(forms.FormRefused, match="kind 'App' sent to the form of ActionRun"):
        forms.outgoing("actionruns", "create", "team", {"kind": "App", "spec": {}})
    assert forms.outgoing("apps", "create", "team", {"metadata": {"name": "x"}, "spec": {"blueprint": ""}})[
        "spec"] == {}  # a required field left empty is not sent: the API server says it is required
    edited = forms.outgoing("apps", "edit", "team", {"metadata": {"name": "x", "resourceVersion": "7"}, "spec": {}})
    assert edited["metadata"]["resourceVersion"] == "7"


def test_the_yaml_beside_the_form_is_what_is_sent_without_its_resource_version() -> None:
    obj = {"metadata": {"name": "web", "resourceVersion": "9"},
           "spec": {"blueprint": "small", "inputs": {"size": "2"}, "softDelete": True}}
    shown = forms.preview("apps", "edit", "team", obj)
    assert yaml.safe_load(shown["yaml"]) == {
        "apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"name": "web", "namespace": "team"},
        "spec": {"blueprint": "small", "inputs": {"size": "2"}, "softDelete": True}}
    assert list(yaml.safe_load(shown["yaml"])) == ["apiVersion", "kind", "metadata", "spec"]
    assert shown["kubectl"].startswith("kubectl apply -f - <<'EOF'\n") and shown["kubectl"].endswith("\nEOF")
    assert shown["stead"] is None  # softDelete: `stead app launch` has no flag for it


def test_commands_equivalent_to_each_form() -> None:
    app = forms.preview("apps", "create", "team", {"metadata": {"name": "web"},
                                                     "spec": {"blueprint": "small", "inputs": {"msg": "hi there"}}})
    assert app["stead"] == "stead app launch web --blueprint small --input 'msg=hi there' -n team"
    run = forms.preview("actionruns", "create", "team", {"spec": {"app": "web", "action": "backup"}})
    assert run["stead"] == "stead app run web backup -n team"
    assert run["kubectl"].startswith("kubectl create -f - <<'EOF'")  # apply needs a name; generateName is not one
    graph = forms.preview("graphruns", "create", "team", {"spec": {
        "environment": "env1", "graphs": [{"type": "default", "nodes": ["n1"]}, {"type": "netconfig", "nodes": ["n1"]}],
        "force": True}})
    assert graph["stead"] == "stead graph execute -e env1 -t default netconfig -N n1 --force -n team"
    uneven = forms.preview("graphruns", "create", "team", {"spec": {
        "environment": "env1", "graphs": [{"type": "default", "nodes": ["n1"]}, {"type": "netconfig"}]}})
    assert uneven["stead"] is None  # the CLI's nodes apply to every type
    instance = forms.preview("serviceinstances", "create", "team", {
        "metadata": {"name": "db1"}, "spec": {"entity": "db", "attributes": {"size": 3, "name": "a"}}})
    assert instance["stead"] == "stead service create db db1 --attr size=3 --attr name=a -n team"
    state = forms.preview("serviceinstances", "patch", "team", {
        "metadata": {"name": "db1"}, "spec": {"stateRequest": {"target": "down", "currentVersion": 4,
                                                              "message": "maintenance window"}}})
    assert state["stead"] == "stead service set-state db1 down --message 'maintenance window' -n team"
    words = shlex.split(state["kubectl"])
    assert words[:6] == ["kubectl", "patch", "serviceinstance", "db1", "-n", "team"]
    assert json.loads(words[-1]) == {"spec": {"stateRequest": {"target": "down", "currentVersion": 4,
                                                               "message": "maintenance window"}}}


def test_the_heredoc_ends_on_a_delimiter_no_line_of_the_yaml_is() -> None:
    shown = forms.preview("configvalues", "create", "team", {"metadata": {"name": "EOF"}, "spec": {}})
    assert "name: EOF" in shown["yaml"]
    text = forms.kubectl_command("create", {"kind": "X", "metadata": {"name": "a"}, "spec": {"k": "x\nEOF\ny"}})
    first, *_, last = text.splitlines()
    assert first == "kubectl apply -f - <<'EOF'" and last == "EOF"  # a block scalar indents "EOF": no clash
    clash = forms._heredoc("cat", "EOF\n")
    assert clash == "cat <<'EOF_'\nEOF\nEOF_"


def test_an_edit_is_a_merge_patch_of_spec_labels_and_annotations_at_the_version_seen() -> None:
    current = {"metadata": {"name": "web", "namespace": "team", "resourceVersion": "12", "finalizers": ["f"],
                            "labels": {"a": "1", "b": "2"},
                            "annotations": {forms.LAST_APPLIED: "{}", "note": "x"}},
               "spec": {"blueprint": "small", "inputs": {"size": "2", "old": "y"}}, "status": {"state": "Running"}}
    form = forms.edit_form("apps", current)
    assert form["object"]["metadata"] == {"name": "web", "namespace": "team", "labels": {"a": "1", "b": "2"},
                                          "annotations": {"note": "x"}, "resourceVersion": "12"}
    assert "status" not in form["object"]
    edited = {"metadata": {"name": "web", "labels": {"a": "1"}, "annotations": {"note": "x"},
                           "resourceVersion": "11"},
              "spec": {"blueprint": "small", "inputs": {"size": "3"}}}
    request = forms.request_for("apps", "edit", {**edited, "metadata": {**edited["metadata"], "namespace": "team"}},
                                current)
    assert request.method == "PATCH" and request.content_type == "application/merge-patch+json"
    assert request.path == "/apis/stead.dev/v1alpha1/namespaces/team/apps/web"
    assert request.body == {"metadata": {"labels": {"b": None}, "resourceVersion": "11"},
                            "spec": {"inputs": {"size": "3", "old": None}}}


def test_create_and_state_requests() -> None:
    created = forms.request_for("apps", "create", {"metadata": {"name": "web", "namespace": "team"}, "spec": {}})
    assert (created.method, created.path) == ("POST", "/apis/stead.dev/v1alpha1/namespaces/team/apps")
    cluster = forms.request_for("clusterlifecycles", "create", {"metadata": {"name": "x"}, "spec": {}})
    assert cluster.path == "/apis/stead.dev/v1alpha1/clusterlifecycles"
    state = forms.request_for("serviceinstances", "patch", {
        "metadata": {"name": "db1", "namespace": "team"}, "spec": {"stateRequest": {"target": "down"}}})
    assert (state.method, state.body) == ("PATCH", {"spec": {"stateRequest": {"target": "down"}}})
    with pytest.raises(forms.FormRefused, match=r"metadata\.name"):
        forms.request_for("serviceinstances", "patch", {"metadata": {"namespace": "team"}, "spec": {}})


SCHEMA_REFUSAL = (  # as kube-apiserver 1.3x answered a dry run (its Status message)
    'ActionRun.stead.dev "Web" is invalid: [metadata.name: Invalid value: "Web": a lowercase RFC 1123 subdomain must '
    "consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
    "(e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'),"
    ' spec.arguments.a: Invalid value: "integer": spec.arguments.a in body must be of type string: "integer", '
    "spec.action: Required value]")


def test_the_schemas_refusals_are_placed_at_their_fields() -> None:
    errors = forms.field_errors(SCHEMA_REFUSAL)
    assert forms.reported(errors) == ["metadata.name", "spec.arguments.a", "spec.action"]
    assert errors[0].message.startswith('Invalid value: "Web": a lowercase RFC 1123 subdomain')
    assert errors[0].message.endswith("[a-z0-9])?)*')")  # its commas and brackets are its own
    assert errors[1].message == 'Invalid value: "integer": spec.arguments.a in body must be of type string: "integer"'
    assert errors[1].fallbacks == ("spec.arguments.a", "spec.arguments[a]", "spec.arguments", "spec")
    assert errors[2].message == "Required value"  # the closing bracket is the list's


def test_cel_rules_not_checked_name_no_field() -> None:
    errors = forms.field_errors('X.stead.dev "x" is invalid: [spec.action: Required value, <nil>: Invalid value: '
                                '"null": some validation rules were not checked because the object was invalid; '
                                'correct the existing errors to complete validation]')
    assert [(e.path, e.message) for e in errors] == [
        ("spec.action", "Required value"),
        (None, 'Invalid value: "null": some validation rules were not checked because the object was invalid; '
               "correct the existing errors to complete validation")]


def test_one_problem_a_webhooks_problems_a_name_taken_and_a_message_naming_no_field() -> None:
    one = forms.field_errors('App.stead.dev "web" is invalid: spec.lockTtlSeconds: Invalid value: 0: '
                             'spec.lockTtlSeconds in body should be greater than or equal to 1')
    assert [(e.path, e.message) for e in one] == [
        ("spec.lockTtlSeconds", "Invalid value: 0: spec.lockTtlSeconds in body should be greater than or equal to 1")]
    hook = forms.field_errors(
        'admission webhook "blueprints.stead.dev" denied the request: spec.substrates[1].name: duplicate name "h" '
        "(first at spec.substrates[0].name; substrates, deployments, packages, services and credentials share one "
        'namespace); spec.substrates[0]: substrate "h" is in no deployment (list it in one, or it never runs)')
    assert [e.path for e in hook] == ["spec.substrates[1].name", "spec.substrates[0]"]
    assert hook[0].message.startswith('duplicate name "h" (first at spec.substrates[0].name; substrates')
    assert hook[1].message == 'substrate "h" is in no deployment (list it in one, or it never runs)'
    taken = forms.field_errors('apps.stead.dev "web" already exists')
    assert [(e.path, e.message) for e in taken] == [("metadata.name", 'apps.stead.dev "web" already exists')]
    named = forms.field_errors('App.stead.dev "Web" is invalid: metadata.name: Invalid value: "Web": a lowercase '
                               'RFC 1123 subdomain must consist of lower case alphanumeric characters')
    assert forms.reported(named) == ["metadata.name"]
    plain = forms.refusal(422, 'admission webhook "x" denied the request: blueprint "nope" is not Active')
    assert plain["errors"] == [{"path": None, "fallbacks": [],
                                "message": 'admission webhook "x" denied the request: blueprint "nope" is not Active'}]


def test_ancestors_nearest_first() -> None:
    assert forms.ancestors("spec.graphs[0].nodes[2]") == (
        "spec.graphs[0].nodes[2]", "spec.graphs[0].nodes", "spec.graphs[0]", "spec.graphs", "spec")
    assert forms.ancestors("spec.inputs.size") == ("spec.inputs.size", "spec.inputs[size]", "spec.inputs", "spec")
    assert forms.ancestors("spec.blueprint") == ("spec.blueprint", "spec")
    assert forms.ancestors("spec") == ("spec",)


def test_the_catalog_lists_every_kind_with_its_actions() -> None:
    listed = {entry["plural"]: entry for entry in forms.catalog()}
    assert set(listed) == {kind.plural for kind in KINDS}
    assert listed["apps"]["actions"] == ["run"] and listed["serviceinstances"]["actions"] == ["set-state"]
    assert listed["clusterlifecycles"]["namespaced"] is False
