"""The forms' routes with a fake API server: schemas served without reading CRDs, actions read as the user, and a
submission that is a dry run first and the request itself only if the API server let the dry run through."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from operators.console.views import forms
from operators.console.web import ConsoleCall, ConsoleError
from operators.runtime.kube.api import ApiError, custom_path
from tests.unit.fakeapi import FakeApi

Sent = tuple[str, str, dict[str, str], str, Any]


class DryRunning:
    """The fake API server, plus what it does not model: `dryRun=All` answers the object without storing it (or
    `refuse`s it, as the real API server's schema or a webhook would)."""

    def __init__(self, fake: FakeApi, refuse: ApiError | None = None) -> None:
        self.fake = fake
        self.refuse = refuse
        self.sent: list[Sent] = []

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        self.sent.append((method, path, dict(params or {}), content_type, copy.deepcopy(body)))
        if (params or {}).get("dryRun") == "All":
            if self.refuse is not None:
                raise self.refuse
            return dict(copy.deepcopy(body))
        return await self.fake.request(method, path, body, content_type, params)


def _call(kube: Any, params: Mapping[str, str], body: Any = None, query: Mapping[str, str] | None = None
          ) -> ConsoleCall:
    return ConsoleCall(kube=kube, stead=None, user="alice", params=params, query=query or {}, body=body)


def _route(method: str, suffix: str) -> Callable[[ConsoleCall], Awaitable[Any]]:
    found = [r for r in forms.ROUTES if r.method == method and r.path == forms.PREFIX + suffix]
    assert len(found) == 1, suffix
    return found[0].handler


def _run(handler: Callable[[ConsoleCall], Awaitable[Any]], call: ConsoleCall) -> Any:
    async def main() -> Any:
        return await handler(call)

    return asyncio.run(main())


APPS = custom_path("apps", "team")


def test_schemas_come_from_the_models_not_from_the_cluster() -> None:
    kube = DryRunning(FakeApi())
    answer = _run(_route("GET", "/schema/{plural}"), _call(kube, {"plural": "apps"}))
    assert answer["kind"] == "App" and answer["schema"]["required"] == ["blueprint"]
    assert _run(_route("GET", ""), _call(kube, {}))[0]["plural"] == "environments"
    assert kube.sent == []  # a user who may not read CRDs gets the same forms


def test_an_unknown_kind_is_the_consoles_404() -> None:
    with pytest.raises(ConsoleError) as refused:
        _run(_route("GET", "/schema/{plural}"), _call(DryRunning(FakeApi()), {"plural": "pods"}))
    assert refused.value.status == 404


def test_a_submission_is_a_dry_run_as_the_user_then_the_request() -> None:
    kube = DryRunning(FakeApi())
    body = {"plural": "apps", "mode": "create",
            "object": {"metadata": {"name": "web"}, "spec": {"blueprint": "small", "inputs": {"who": "me"}}}}
    answer = _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, body))
    assert answer["ok"] is True and answer["object"]["metadata"]["name"] == "web"
    assert [(m, p, params) for m, p, params, _, _ in kube.sent] == [
        ("POST", APPS, {"dryRun": "All"}), ("POST", APPS, {})]
    assert kube.sent[0][4] == kube.sent[1][4]  # the dry run was of the very object then sent
    assert kube.fake.names(APPS) == ["web"]


def test_a_refusal_of_the_dry_run_is_placed_in_the_form_and_nothing_is_sent() -> None:
    refusal = ApiError(422, 'App.stead.dev "web" is invalid: [spec.blueprint: Required value, spec.lockTtlSeconds: '
                            'Invalid value: 0: spec.lockTtlSeconds in body should be greater than or equal to 1]')
    kube = DryRunning(FakeApi(), refuse=refusal)
    body = {"plural": "apps", "mode": "create", "object": {"metadata": {"name": "web"},
                                                           "spec": {"blueprint": "", "lockTtlSeconds": 0}}}
    answer = _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, body))
    assert answer["ok"] is False and answer["stage"] == "dry-run" and answer["status"] == 422
    assert [e["path"] for e in answer["errors"]] == ["spec.blueprint", "spec.lockTtlSeconds"]
    assert len(kube.sent) == 1 and kube.fake.names(APPS) == []


def test_a_token_no_longer_valid_is_not_a_form_error() -> None:
    kube = DryRunning(FakeApi(), refuse=ApiError(401, "Unauthorized"))
    body = {"plural": "apps", "mode": "create", "object": {"metadata": {"name": "web"}, "spec": {}}}
    with pytest.raises(ApiError) as raised:
        _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, body))
    assert raised.value.status == 401


def test_an_edit_patches_what_changed_at_the_version_the_user_saw() -> None:
    fake = FakeApi()
    stored = fake.add(f"{APPS}/web", {"apiVersion": "stead.dev/v1alpha1", "kind": "App",
                                      "spec": {"blueprint": "small", "inputs": {"a": "1", "b": "2"}}})
    kube = DryRunning(fake)
    form = _run(_route("GET", "/edit/{namespace}/{plural}/{name}"),
                _call(kube, {"namespace": "team", "plural": "apps", "name": "web"}))
    assert form["mode"] == "edit" and form["object"]["metadata"]["resourceVersion"] == stored["metadata"][
        "resourceVersion"]
    edited = copy.deepcopy(form["object"])
    edited["spec"]["inputs"] = {"a": "1"}
    answer = _run(_route("POST", "/submit/{namespace}"),
                  _call(kube, {"namespace": "team"}, {"plural": "apps", "mode": "edit", "object": edited}))
    assert answer["ok"] is True
    patch = kube.sent[-1]
    assert patch[0] == "PATCH" and patch[3] == "application/merge-patch+json"
    assert patch[4]["spec"] == {"inputs": {"b": None}}
    assert fake.objects[f"{APPS}/web"]["spec"]["inputs"] == {"a": "1"}


def _edit_of_web(fake: FakeApi) -> tuple[DryRunning, dict[str, Any]]:
    fake.add(f"{APPS}/web", {"apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"labels": {"t": "1"}},
                             "spec": {"blueprint": "small", "inputs": {"a": "1"}}})
    kube = DryRunning(fake)
    form = _run(_route("GET", "/edit/{namespace}/{plural}/{name}"),
                _call(kube, {"namespace": "team", "plural": "apps", "name": "web"}))
    return kube, form["object"]


def test_an_edit_is_sent_at_the_present_version_when_only_status_and_finalizers_moved_it() -> None:
    fake = FakeApi()
    kube, base = _edit_of_web(fake)
    _run(lambda call: fake.patch_status("apps", "team", "web", {"phase": "Ready"}), _call(kube, {}))
    fake.objects[f"{APPS}/web"]["metadata"]["finalizers"] = ["stead.dev/app"]
    edited = copy.deepcopy(base)
    edited["spec"]["softDelete"] = True
    body = {"plural": "apps", "mode": "edit", "object": edited, "base": base}
    answer = _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, body))
    assert answer["ok"] is True, answer
    stored = fake.objects[f"{APPS}/web"]
    assert stored["spec"]["softDelete"] is True and stored["metadata"]["finalizers"] == ["stead.dev/app"]
    assert kube.sent[-1][4]["metadata"]["resourceVersion"] != base["metadata"]["resourceVersion"]

    # Without `base` (a client of the route that does not send it) the edit stays at the version it names.
    again = {"plural": "apps", "mode": "edit", "object": edited}
    stale = _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, again))
    assert stale["ok"] is False and stale["status"] == 409


class StatusWriterBetween(DryRunning):
    """A status write landing between the console's dry run and its request, `times` times."""

    def __init__(self, fake: FakeApi, times: int) -> None:
        super().__init__(fake)
        self.times = times

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        answer = await super().request(method, path, body, content_type, params)
        if (params or {}).get("dryRun") == "All" and self.times:
            self.times -= 1
            await self.fake.patch_status("apps", "team", "web", {"writes": self.times})
        return answer


@pytest.mark.parametrize(("writes", "ok"), [(2, True), (3, False)])
def test_an_edit_raced_by_status_writes_is_sent_again_a_bounded_number_of_times(writes: int, ok: bool) -> None:
    fake = FakeApi()
    _, base = _edit_of_web(fake)
    kube = StatusWriterBetween(fake, writes)
    edited = copy.deepcopy(base)
    edited["spec"]["softDelete"] = True
    body = {"plural": "apps", "mode": "edit", "object": edited, "base": base}
    answer = _run(_route("POST", "/submit/{namespace}"), _call(kube, {"namespace": "team"}, body))
    assert answer["ok"] is ok and fake.objects[f"{APPS}/web"]["spec"].get("softDelete", False) is ok
    assert [s[0] for s in kube.sent if not s[2]].count("PATCH") == min(writes + 1, forms.EDIT_ATTEMPTS)
    if not ok:
        assert answer["status"] == 409 and answer["stage"] == "submit"


def test_an_edit_keeps_what_someone_else_changed_elsewhere_and_is_refused_where_they_changed_the_same_field(
        ) -> None:
    fake = FakeApi()
    kube, base = _edit_of_web(fake)
    stored = fake.objects[f"{APPS}/web"]
    stored["spec"]["inputs"] = {"a": "2"}
    stored["metadata"]["labels"] = {"t": "1", "owner": "bob"}
    submit = _route("POST", "/submit/{namespace}")

    # Another field than theirs: sent as the user's change alone; their input and label stay.
    edited = copy.deepcopy(base)
    edited["spec"]["softDelete"] = True
    answer = _run(submit, _call(kube, {"namespace": "team"}, {"plural": "apps", "mode": "edit", "object": edited,
                                                              "base": base}))
    assert answer["ok"] is True, answer
    assert kube.sent[-1][4]["spec"] == {"softDelete": True} and "labels" not in kube.sent[-1][4]["metadata"]
    stored = fake.objects[f"{APPS}/web"]
    assert stored["spec"] == {"blueprint": "small", "inputs": {"a": "2"}, "softDelete": True}
    assert stored["metadata"]["labels"] == {"t": "1", "owner": "bob"}

    # The same fields as theirs: refused, naming each, and nothing sent.
    edited["spec"]["inputs"] = {"a": "3"}
    edited["metadata"]["labels"] = {"owner": "carol"}
    sent_before = len(kube.sent)
    answer = _run(submit, _call(kube, {"namespace": "team"}, {"plural": "apps", "mode": "edit", "object": edited,
                                                              "base": base}))
    assert answer["ok"] is False and answer["status"] == 409 and answer["stage"] == "conflict"
    assert [e["path"] for e in answer["errors"]] == ["metadata.labels.owner", "spec.inputs.a"]
    assert "open the form again" in answer["message"]
    assert [s[0] for s in kube.sent[sent_before:]] == ["GET"]
    stored = fake.objects[f"{APPS}/web"]
    assert stored["spec"]["inputs"] == {"a": "2"} and stored["metadata"]["labels"]["owner"] == "bob"


def test_the_run_form_suggests_system_actions_when_the_blueprint_is_not_readable() -> None:
    fake = FakeApi()
    fake.add(f"{APPS}/web", {"kind": "App", "spec": {"blueprint": "small"}})
    fake.fail_with(ApiError(403, "forbidden"), "GET", "/blueprints/small")
    form = _run(_route("GET", "/action/{namespace}/{plural}/{name}/{action}"),
                _call(DryRunning(fake), {"namespace": "team", "plural": "apps", "name": "web", "action": "run"}))
    assert form["object"]["spec"]["app"] == "web"
    assert form["suggestions"]["spec.action"] == ["create", "start", "stop", "restart", "delete"]


def test_the_execute_form_suggests_the_graph_types_the_environment_has_as_the_user_may_list_them() -> None:
    fake = FakeApi()
    env = custom_path("environments", "team", "env1")
    nodes = [{"name": name, "roles": ["compute"]} for name in ("ctl", "cmp-1")]
    fake.add(env, {"kind": "Environment", "spec": {"release": "r1", "nodes": nodes}})
    for name, owner in (("r1-default", {"release": "r1"}), ("env1-net", {"environment": "env1", "type": "net"}),
                        ("r2-other", {"release": "r2", "type": "other"})):  # r2's graph is not env1's
        fake.add(custom_path("deploymentgraphs", "team", name),
                 {"kind": "DeploymentGraph", "spec": {**owner, "tasks": []}})
    params = {"namespace": "team", "plural": "environments", "name": "env1", "action": "execute"}
    form = _run(_route("GET", "/action/{namespace}/{plural}/{name}/{action}"), _call(DryRunning(fake), params))
    assert form["suggestions"] == {"spec.graphs[].type": ["default", "net"], "spec.graphs[].nodes[]": ["ctl", "cmp-1"]}

    fake.fail_with(ApiError(403, "forbidden"), "GET", "/deploymentgraphs")
    form = _run(_route("GET", "/action/{namespace}/{plural}/{name}/{action}"), _call(DryRunning(fake), params))
    assert form["suggestions"] == {"spec.graphs[].nodes[]": ["ctl", "cmp-1"]}  # its nodes still: they are its own


def test_the_preview_is_the_yaml_and_commands_of_what_would_be_sent() -> None:
    body = {"plural": "actionruns", "mode": "create", "object": {"spec": {"app": "web", "action": "greet"}}}
    shown = _run(_route("POST", "/preview/{namespace}"), _call(DryRunning(FakeApi()), {"namespace": "team"}, body))
    assert "generateName: web-greet-" in shown["yaml"]
    assert shown["stead"] == "stead app run web greet -n team"
    with pytest.raises(ConsoleError, match="mode"):
        _run(_route("POST", "/preview/{namespace}"), _call(DryRunning(FakeApi()), {"namespace": "team"}, {}))
