"""An in-memory Kubernetes API server for unit tests (see `FakeApi`)."""

from __future__ import annotations

import asyncio
import copy
import functools
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from operators.runtime.kube.client import ApiError, custom_path

MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
SELECTABLE_FIELDS = ("metadata.name", "metadata.namespace")


class Request(NamedTuple):
    """One request as the fake received it (the body as sent, not a copy)."""

    method: str
    path: str
    body: Any


Handler = Callable[[Request], dict[str, Any]]


@dataclass(frozen=True)
class Where:
    """A parsed API path: `<base>[/namespaces/<namespace>]/<plural>[/<name>[/<subresource>]]`."""

    base: str  # "/api/v1" or "/apis/<group>/<version>"
    group: str  # "" for the core group
    namespace: str | None
    plural: str
    name: str | None  # unescaped
    subresource: str | None

    @property
    def collection(self) -> str:
        namespace = f"/namespaces/{quote(self.namespace)}" if self.namespace is not None else ""
        return f"{self.base}{namespace}/{self.plural}"

    @property
    def resource(self) -> str:
        """The name of the kind as the API server's messages spell it: `configmaps`, `apps.stead.dev`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def parse(path: str) -> Where:
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        base, group, rest = "/api/v1", "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        base, group, rest = f"/apis/{parts[1]}/{parts[2]}", parts[1], parts[3:]
    else:
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = urllib.parse.unquote(rest[1]), rest[2:]
    if not rest or len(rest) > 3 or not all(rest):
        raise ApiError(404, f"the server could not find the requested resource ({path})")
    name = urllib.parse.unquote(rest[1]) if len(rest) > 1 else None
    return Where(base, group, namespace, rest[0], name, rest[2] if len(rest) > 2 else None)


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, `null` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge(merged.get(key), value)
    return merged


def _field(obj: Mapping[str, Any], dotted: str) -> Any:
    value: Any = obj
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def selector_matches(selector: str, values: Callable[[str], Any], param: str) -> bool:
    """Equality-based selectors: `k=v`, `k==v`, `k!=v`, `k` (exists) and `!k`, comma-separated (all must hold)."""
    if "(" in selector:
        raise ApiError(400, f"FakeApi: set-based {param} is not implemented: {selector}")
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, _, wanted = term.partition("!=")
            if values(key.strip()) == wanted.strip():
                return False
        elif "=" in term:
            key, _, wanted = term.replace("==", "=").partition("=")
            if values(key.strip()) != wanted.strip():
                return False
        elif term.startswith("!"):
            if values(term[1:].strip()) is not None:
                return False
        elif values(term) is None:
            return False
    return True


class FakeApi:
    """An in-memory stand-in for the Kubernetes API server, behind the `Requester` protocol
    (`request(method, path, body, content_type, params)`) plus `patch_status`, like `KubeClient`.

    What it models:
    - objects kept by their full path (`objects`, e.g. `/api/v1/namespaces/ns/configmaps/cm`), core
      (`/api/v1`) and group (`/apis/<group>/<version>`) kinds alike, namespaced or cluster-scoped,
      without knowing any schema: every path of that shape is a kind;
    - GET of an object (404 `<resource> "<name>" not found`, `<resource>` being `configmaps` or
      `apps.stead.dev` as the real server spells it), GET of a collection (`{"items": [...]}` sorted
      by path, across namespaces when the path names none), filtered by `labelSelector` (equality
      terms `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated) and `fieldSelector` (the same on
      `metadata.name` and `metadata.namespace` only);
    - POST to a collection creates `<collection>/<metadata.name>` (409 when it exists; `generateName`
      gets a suffix); PUT replaces (404 when absent, 409 when a `metadata.resourceVersion` sent is
      not the stored one); PATCH with `application/merge-patch+json` (or strategic merge, treated as
      a plain merge patch) merges; DELETE removes (404 when absent; `preconditions` on uid and
      resourceVersion give 409);
    - the `status` subresource: PATCH/PUT of `<object>/status` write only `status`, and writes to
      the object itself never change `status` (a create drops it), as with a CRD's status subresource;
    - `metadata.uid`, `namespace`, `creationTimestamp`, `generation` (1 on create, +1 when anything
      but metadata and status changes) and `resourceVersion` (one counter over all writes) filled in;
    - finalizers: DELETE of an object holding some sets `deletionTimestamp`; it goes once a write
      leaves its finalizers empty;
    - every request logged in `received` (method, path, body as sent) and `calls` (method, path);
      `count` tallies them; objects are stored and returned as deep copies; each request yields to
      the event loop once, as real I/O would, so concurrent callers interleave.

    What it does not: watches (a `watch` request raises NotImplementedError), pagination (`limit`
    and `continue` are ignored: one page holds everything), set-based selectors and other field
    selectors (400), JSON patch and server-side apply (415), `dryRun`, admission (no webhooks,
    no schema or name validation, no defaults), RBAC, owner references (no garbage collection),
    namespaces' existence or termination, and any kind-specific behaviour (Secrets' `stringData`,
    Services' cluster IPs...). What a test needs beyond that is injected: `fail_with` makes
    matching requests fail, `answer` serves a path (TokenReviews, SubjectAccessReviews) with a
    function, and `add` seeds objects without a request.
    """

    def __init__(self, objects: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.received: list[Request] = []
        self.headers: list[tuple[tuple[str, str], ...]] = []  # what each request added (impersonation), as received
        self._revision = 0
        self._uids = 0
        self._failures: dict[tuple[str | None, str | None], ApiError] = {}
        self._answers: dict[str, Handler] = {}
        for path, obj in (objects or {}).items():
            self.add(path, obj)

    # --- what tests set up and look at -----------------------------------------------------------

    @property
    def calls(self) -> list[tuple[str, str]]:
        """(method, path) of every request received, in order."""
        return [(r.method, r.path) for r in self.received]

    def count(self, method: str | None = None, path_suffix: str | None = None) -> int:
        """How many requests had this method (any when None) on a path ending with `path_suffix`."""
        return sum(1 for r in self.received if (method is None or r.method == method.upper())
                   and (path_suffix is None or r.path.endswith(path_suffix)))

    def add(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object as if it had been there all along (no request logged, status kept);
        the metadata it lacks is filled in, what it has is kept. Returns the stored object."""
        where = parse(path)
        if where.name is None or where.subresource is not None:
            raise ValueError(f"not an object's path: {path}")
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("name", where.name)
        if where.namespace is not None:
            meta.setdefault("namespace", where.namespace)
        meta.setdefault("uid", self._uid())
        meta.setdefault("resourceVersion", self._next_revision())
        meta.setdefault("generation", 1)
        self.objects[self._path(where, where.name)] = stored
        return stored

    def names(self, collection: str) -> list[str]:
        """The names of the objects stored directly in a collection, sorted."""
        return sorted(str(o["metadata"]["name"]) for p, o in self.objects.items()
                      if p.rsplit("/", 1)[0] == collection)

    def fail_with(self, error: ApiError | None, method: str | None = None, path_suffix: str | None = None) -> None:
        """Make the requests with this method (any when None) on a path ending with `path_suffix`
        (any when None) raise `error` (logged first, like a request the server refused). A later
        call for the same method and suffix replaces the error; `None` lifts it."""
        key = (method.upper() if method else None, path_suffix)
        if error is None:
            self._failures.pop(key, None)
        else:
            self._failures[key] = error

    def answer(self, path_suffix: str, handler: Handler) -> None:
        """Serve every request on a path ending with `path_suffix` with `handler` (whatever it
        returns, or raises), before the object store: endpoints that are not stored objects."""
        self._answers[path_suffix] = handler

    # --- the API ---------------------------------------------------------------------------------

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        method = method.upper()
        received = Request(method, path, body)
        self.received.append(received)
        self.headers.append(tuple(headers))
        await asyncio.sleep(0)  # a real request yields to the event loop: let concurrent callers interleave
        for (fail_method, suffix), error in self._failures.items():
            if (fail_method is None or fail_method == method) and (suffix is None or path.endswith(suffix)):
                raise error
        for suffix, handler in self._answers.items():
            if path.endswith(suffix):
                return copy.deepcopy(handler(received))
        params = params or {}
        if params.get("watch") not in (None, "", "0", "false"):
            raise NotImplementedError("FakeApi does not serve watches")
        where = parse(path)
        if where.subresource not in (None, "status"):
            raise ApiError(404, f"FakeApi: the {where.subresource} subresource is not implemented")
        if where.name is None:
            if method == "GET":
                return self._list(where, params)
            if method == "POST":
                return self._create(where, body)
        elif method == "GET":
            return copy.deepcopy(self._get(where))
        elif method == "PUT":
            return self._update(where, body, replace=True)
        elif method == "PATCH":
            if content_type not in MERGE_PATCHES:
                raise ApiError(415, f"FakeApi: {content_type} patches are not implemented (merge patches are)")
            return self._update(where, body, replace=False)
        elif method == "DELETE" and where.subresource is None:
            return self._delete(where, body)
        raise ApiError(405, "the server does not allow this method on the requested resource")

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """As `KubeClient.patch_status`: a merge patch of `status` through the status subresource."""
        return await self.request("PATCH", custom_path(plural, namespace, name) + "/status", {"status": status},
                                  content_type="application/merge-patch+json")

    # --- the store -------------------------------------------------------------------------------

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def _uid(self) -> str:
        self._uids += 1
        return f"00000000-0000-4000-8000-{self._uids:012d}"

    def _path(self, where: Where, name: str) -> str:
        return f"{where.collection}/{quote(name)}"

    def _get(self, where: Where) -> dict[str, Any]:
        assert where.name is not None
        stored = self.objects.get(self._path(where, where.name))
        if stored is None:
            raise ApiError(404, f'{where.resource} "{where.name}" not found')
        return stored

    def _list(self, where: Where, params: Mapping[str, str]) -> dict[str, Any]:
        labels = params.get("labelSelector") or ""
        fields = params.get("fieldSelector") or ""
        for term in filter(None, (t.strip() for t in fields.split(","))):
            key = term.lstrip("!").replace("!=", "=").replace("==", "=").partition("=")[0].strip()
            if key not in SELECTABLE_FIELDS:
                raise ApiError(400, f'field label not supported: {key}')
        items = []
        for path in sorted(self.objects):
            try:
                other = parse(path)
            except ApiError:
                continue
            if (other.base, other.plural) != (where.base, where.plural) or other.subresource is not None:
                continue
            if where.namespace is not None and other.namespace != where.namespace:
                continue
            obj = self.objects[path]
            obj_labels = (obj.get("metadata") or {}).get("labels") or {}
            if not selector_matches(labels, obj_labels.get, "labelSelector"):
                continue
            if not selector_matches(fields, functools.partial(_field, obj), "fieldSelector"):
                continue
            items.append(copy.deepcopy(obj))
        return {"metadata": {"resourceVersion": str(self._revision)}, "items": items}

    def _create(self, where: Where, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request is not an object")
        obj = copy.deepcopy(body)
        obj.pop("status", None)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, f"{where.resource} is invalid: metadata.name: Required value: name or "
                                    "generateName is required")
            meta["name"] = f"{meta['generateName']}{self._revision + 1:05x}"
        name = str(meta["name"])
        if where.namespace is not None:
            if meta.get("namespace", where.namespace) != where.namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                    "the request")
            meta["namespace"] = where.namespace
        path = self._path(where, name)
        if path in self.objects:
            raise ApiError(409, f'{where.resource} "{name}" already exists')
        meta.update(uid=self._uid(), resourceVersion=self._next_revision(), generation=1,
                    creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta.pop("deletionTimestamp", None)
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def _update(self, where: Where, body: Any, replace: bool) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request is not an object")
        current = self._get(where)
        sent_version = (body.get("metadata") or {}).get("resourceVersion")
        if sent_version is not None and str(sent_version) != current["metadata"].get("resourceVersion"):
            raise ApiError(409, f'Operation cannot be fulfilled on {where.resource} "{where.name}": the object '
                                "has been modified; please apply your changes to the latest version and try again")
        updated = copy.deepcopy(body) if replace else merge(current, body)
        if where.subresource == "status":  # only the status changes
            updated = {**copy.deepcopy(current), "status": updated.get("status")}
            if updated["status"] is None:
                del updated["status"]
        else:  # anything but the status
            updated.pop("status", None)
            if "status" in current:
                updated["status"] = copy.deepcopy(current["status"])
        meta = updated.setdefault("metadata", {})
        kept = current["metadata"]
        for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if key in kept:
                meta[key] = kept[key]
            else:
                meta.pop(key, None)
        if where.subresource is None and _content(updated) != _content(current):
            meta["generation"] = int(kept.get("generation") or 0) + 1
        meta["resourceVersion"] = self._next_revision()
        path = self._path(where, str(where.name))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[path]
        else:
            self.objects[path] = updated
        return copy.deepcopy(updated)

    def _delete(self, where: Where, body: Any) -> dict[str, Any]:
        current = self._get(where)
        meta = current["metadata"]
        preconditions = (body.get("preconditions") if isinstance(body, dict) else None) or {}
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(key)
            if wanted is not None and str(wanted) != str(meta.get(key)):
                raise ApiError(409, f"Precondition failed: {label} in precondition: {wanted}, {label} in object "
                                    f"meta: {meta.get(key)}")
        path = self._path(where, str(where.name))
        if meta.get("finalizers"):
            meta.setdefault("deletionTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["resourceVersion"] = self._next_revision()
            return copy.deepcopy(current)
        del self.objects[path]
        return copy.deepcopy(current)


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a change of bumps `metadata.generation`: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class FakeAuth:
    """An authenticator for the HTTP APIs' tests: the Bearer token `good` may do anything, `reader` may get
    and list, any other token is unknown (401); every authorization asked is recorded in `checked`."""

    scheme = "Bearer"

    def __init__(self) -> None:
        from operators.runtime.api.auth import Access

        self.checked: list[Access] = []

    async def authenticate(self, authorization: str, peer: str = "") -> Any:
        from operators.runtime.api.auth import Identity

        token = authorization.removeprefix("Bearer ")
        return Identity(user=token, scheme="Bearer") if token in ("good", "reader") else None

    async def authorize(self, identity: Any, access: Any) -> bool:
        self.checked.append(access)
        return bool(identity.user == "good" or access.verb in ("get", "list"))
