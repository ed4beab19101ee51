"""The forms' routes: the kinds' form schemas (served by the console from the models, so that a user who may not
read CRDs still gets forms), the form of a new object, of an edit and of an action, the YAML and commands beside
a form, and its submission: sent AS THE USER with dryRun=All first, so that what is refused is refused by the API
server itself (schema, admission webhooks, ValidatingAdmissionPolicies), then for real. The shaping is
`forms_model`'s; these handlers only read and send."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError

from operators.console.views import forms_model as model
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute
from operators.graphs.api import environment_graph_types
from operators.graphs.objects import graph_items
from operators.runtime import ApiError, custom_path

UNANSWERABLE = frozenset({0, 401})
"""Refusals a form does not show as its own: no API server (0) and a token no longer valid (401: the page
signs out). Every other refusal (403 included: the user's own request, which holds no data) is shown."""


def _path(plural: str, namespace: str, name: str | None = None) -> str:
    kind = model.kind_of(plural)
    return custom_path(plural, None if kind.cluster_scoped else namespace, name)


def _body(call: ConsoleCall) -> tuple[str, model.Mode, Any]:
    body = call.body if isinstance(call.body, Mapping) else {}
    mode = body.get("mode")
    if mode not in ("create", "edit", "patch"):
        raise model.FormRefused(f"mode {mode!r}: create, edit or patch")
    return str(body.get("plural") or ""), mode, body.get("object")


Handler = Callable[[ConsoleCall], Awaitable[Any]]


def _refused(handler: Handler) -> Handler:
    """A handler whose `FormRefused` is the console's error with the same status and message."""

    async def wrapped(call: ConsoleCall) -> Any:
        try:
            return await handler(call)
        except model.FormRefused as refused:
            raise ConsoleError(refused.status, refused.message) from None

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def catalog(call: ConsoleCall) -> Any:
    return model.catalog()


async def schema(call: ConsoleCall) -> Any:
    """One kind's form schema: the CRD's spec schema with the models' defaults."""
    plural = call.params["plural"]
    return {**model.kind_summary(model.kind_of(plural)), "schema": model.spec_schema(plural)}


async def new(call: ConsoleCall) -> Any:
    return model.new_form(call.params["plural"], call.params["namespace"], call.query)


async def edit(call: ConsoleCall) -> Any:
    plural = call.params["plural"]
    current = await call.kube.request("GET", _path(plural, call.params["namespace"], call.params["name"]))
    return model.edit_form(plural, current)


async def action(call: ConsoleCall) -> Any:
    """The form of an action on an object, read as the user; an App's run form suggests its blueprint's actions
    when the user may read the blueprint (if not, the system actions only), an Environment's execute form the
    graph types it has when the user may list DeploymentGraphs (if not, its nodes only)."""
    on, namespace = call.params["plural"], call.params["namespace"]
    model.action_of(on, call.params["action"])
    target = await call.kube.request("GET", _path(on, namespace, call.params["name"]))
    blueprint = None
    graph_types: list[str] = []
    try:
        if on == "apps" and (target.get("spec") or {}).get("blueprint"):
            blueprint = await call.kube.request("GET", _path("blueprints", namespace, target["spec"]["blueprint"]))
        elif on == "environments":
            items = await graph_items(call.kube, namespace)
            with contextlib.suppress(ValidationError):  # an invalid Environment has no types (its status says why)
                graph_types = environment_graph_types(items, call.params["name"], target)
    except ApiError as error:
        if error.status in UNANSWERABLE:
            raise
    return model.action_form(on, call.params["action"], target, blueprint, graph_types)


async def preview(call: ConsoleCall) -> Any:
    plural, mode, obj = _body(call)
    return model.preview(plural, mode, call.params["namespace"], obj)


EDIT_ATTEMPTS = 3
"""How many times an edit whose fields nobody else changed is re-sent when the object's version moved between
the console's read and its write (a status write landing in those milliseconds), as `kubectl edit` retries."""


async def submit(call: ConsoleCall) -> Any:
    """Dry run, then the request itself; a refusal of either is the form's answer (`model.refusal`), with each
    problem at the field it names. An edit carries `base`, the object its form was opened on: it is sent as
    the user's changes alone, at the present resourceVersion, unless someone else changed one of the same
    fields since (`model.rebased`)."""
    plural, mode, obj = _body(call)
    namespace = call.params["namespace"]
    sent = model.outgoing(plural, mode, namespace, obj)
    base = call.body.get("base") if mode == "edit" and isinstance(call.body, Mapping) else None
    for attempt in range(1, EDIT_ATTEMPTS + 1):
        before = None
        if mode == "edit":
            current = await call.kube.request("GET", _path(plural, namespace, str(sent["metadata"].get("name") or "")))
            try:
                sent, before = model.rebased(sent, base if isinstance(base, Mapping) else None, current)
            except model.EditConflict as conflict:
                return {**conflict.refusal(), "stage": "conflict"}
        request = model.request_for(plural, mode, sent, before)
        for stage, params in (("dry-run", {"dryRun": "All"}), ("submit", None)):
            try:
                made = await call.kube.request(request.method, request.path, request.body,
                                               content_type=request.content_type, params=params)
            except ApiError as error:
                if error.status in UNANSWERABLE:
                    raise
                if error.status == 409 and isinstance(base, Mapping) and attempt < EDIT_ATTEMPTS:
                    break  # read again: if its fields are still as the form saw them, send it at the new version
                return {**model.refusal(error.status, error.message), "stage": stage}
        else:
            return {"ok": True, "plural": plural, "object": made}
    raise AssertionError("unreachable: the last attempt returns")


PREFIX = "/console/api/forms"

ROUTES: tuple[ConsoleRoute, ...] = tuple(ConsoleRoute(method, PREFIX + path, _refused(handler))
                                         for method, path, handler in (
    ("GET", "", catalog),
    ("GET", "/schema/{plural}", schema),
    ("GET", "/new/{namespace}/{plural}", new),
    ("GET", "/edit/{namespace}/{plural}/{name}", edit),
    ("GET", "/action/{namespace}/{plural}/{name}/{action}", action),
    ("POST", "/preview/{namespace}", preview),
    ("POST", "/submit/{namespace}", submit),
))
