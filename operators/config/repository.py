"""Where the HTTP API reads and writes configuration: the `ConfigRepository` protocol and its
implementation over the Kubernetes API.

Kubernetes stays the source of truth: a write through the HTTP API creates or updates a
ConfigValues object, exactly what `kubectl apply` or a GitOps tool would do, so every path in
sees the same data, the admission webhook checks all of them alike, and the operator records
the versions of all of them. The HTTP layer depends on the protocol only.

`KubeConfigRepository` reads from the API server on each call (three concurrent GETs for a
snapshot of one environment); it is the simple, always-correct implementation.
`operators.config.cache.CachedConfigRepository` extends it with reads from a watch-fed cache;
the operator process serves the API with that one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from pydantic import ValidationError

from operators import API_VERSION
from operators.config.history import History, HistoryError, Owner, Version
from operators.config.levels import LevelError, Point
from operators.config.merge import Layer
from operators.config.models import CONFIG_COMPONENT, CONFIG_VALUES, ConfigComponentSpec, ConfigValuesSpec, values_point
from operators.environment.models import ENVIRONMENT, EnvironmentSpec
from operators.runtime import ApiError, Requester, custom_path

log = logging.getLogger(__name__)

COMPONENTS = CONFIG_COMPONENT.plural
VALUES = CONFIG_VALUES.plural
ENVIRONMENTS = ENVIRONMENT.plural
LABEL_ENVIRONMENT = "stead.dev/environment"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class RepositoryError(Exception):
    """Base of the errors a repository reports to the HTTP layer."""


class Conflict(RepositoryError):
    """The write lost a race or its precondition (HTTP 409)."""


class Invalid(RepositoryError):
    """The API server (schema or admission webhook) refused the object (HTTP 400)."""


class Unavailable(RepositoryError):
    """The store could not be reached (HTTP 503)."""


@dataclass(frozen=True)
class StoredValues:
    """One ConfigValues object as the API sees it: its spec and the data in force."""

    name: str
    uid: str
    resource_version: str
    spec: ConfigValuesSpec
    point: Point
    data: dict[str, Any]
    version: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    generation: int = 0

    @property
    def etag(self) -> str:
        """Which spec this is: its generation and incarnation. Unlike the resourceVersion, it does not
        change when the operator writes the status, so a client's If-Match fails only when the data
        (or anything else in the spec) changed since it read them."""
        return f"{self.generation}-{self.uid[:8]}" if self.generation else self.resource_version

    def layer(self) -> Layer:
        return Layer(point=self.point, kind=self.spec.kind, data=self.data, version=self.version, source=self.name)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Everything one environment's lookups need, read together.

    Immutable, and compared by identity: a repository that serves lookups from memory returns
    the same Snapshot until something in the environment changes, and the HTTP API caches
    effective values per Snapshot object (a new object is a new cache).
    """

    name: str
    environment: EnvironmentSpec
    components: Mapping[str, ConfigComponentSpec]
    values: Sequence[StoredValues]

    def find(self, resource: str, kind: str, point: Point) -> StoredValues | None:
        for stored in self.values:
            if stored.spec.resource == resource and stored.spec.kind == kind and stored.point == point:
                return stored
        return None

    def layers(self, resource: str) -> list[Layer]:
        return [stored.layer() for stored in self.values if stored.spec.resource == resource]


@dataclass(frozen=True)
class ValuesTarget:
    """Where a write goes: the point (canonical) and, when one exists, the object holding it."""

    environment: str
    resource: str
    kind: str
    point: Point
    existing: StoredValues | None


class ConfigRepository(Protocol):
    """Reads and writes of the configuration store, for the HTTP API."""

    async def list_components(self, namespace: str) -> dict[str, ConfigComponentSpec]: ...

    async def create_component(self, namespace: str, name: str, spec: ConfigComponentSpec) -> None: ...

    async def list_environments(self, namespace: str) -> dict[str, EnvironmentSpec]: ...

    async def create_environment(self, namespace: str, name: str, spec: EnvironmentSpec) -> None: ...

    async def snapshot(self, namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
        """Everything one environment's lookups need; `fresh`: read past any cache (after a lost race)."""
        ...

    async def write_values(
        self, namespace: str, target: ValuesTarget, data: dict[str, Any], expect: str | None
    ) -> StoredValues: ...

    async def delete_values(self, namespace: str, stored: StoredValues, expect: str | None) -> None: ...

    async def versions(self, namespace: str, stored: StoredValues) -> list[Version]: ...


def object_name(environment: str, resource: str, kind: str, point: Point) -> str:
    """A readable, valid and unique name for a ConfigValues the API creates.

    The hash of the exact coordinates keeps two points whose slugs collide (`a.b` and `a-b`)
    apart; the slug is only for humans reading `kubectl get cv`.
    """
    coordinates = "\x00".join([environment, resource, kind, *(f"{n}={v}" for n, v in point)])
    digest = hashlib.sha256(coordinates.encode()).hexdigest()[:8]
    words = [environment, resource, *(v for _, v in point), kind]
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join(words).lower()).strip("-")[:200].strip("-")
    return f"{slug}-{digest}" if slug else f"cv-{digest}"


def values_body(namespace: str, name: str, target: ValuesTarget, data: dict[str, Any]) -> dict[str, Any]:
    """A new ConfigValues object for `target`."""
    level = dict(target.point)
    spec: dict[str, Any] = {"environment": target.environment, "resource": target.resource, "kind": target.kind,
                            "level": level, "data": data}
    labels = {"app.kubernetes.io/managed-by": "stead-config-api"}
    if len(target.environment) <= 63 and _LABEL_VALUE.match(target.environment):
        labels[LABEL_ENVIRONMENT] = target.environment
    return {"apiVersion": API_VERSION, "kind": "ConfigValues",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}


def updated_body(raw: Mapping[str, Any], data: dict[str, Any], resource_version: str) -> dict[str, Any]:
    """`raw` with new data in force: spec.data replaced, spec.revertTo dropped (a write wins over a revert)."""
    meta = {k: v for k, v in (raw.get("metadata") or {}).items() if k != "managedFields"}
    meta["resourceVersion"] = resource_version
    spec = {k: v for k, v in (raw.get("spec") or {}).items() if k != "revertTo"}
    spec["data"] = data
    return {"apiVersion": raw.get("apiVersion", API_VERSION), "kind": "ConfigValues", "metadata": meta, "spec": spec}


class KubeConfigRepository:
    """`ConfigRepository` over the Kubernetes API (reads and writes go to the API server)."""

    def __init__(self, kube: Requester) -> None:
        self._kube = kube

    async def _call(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None
                    ) -> dict[str, Any]:
        try:
            return await self._kube.request(method, path, body, params=params)
        except ApiError:
            raise
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            raise Unavailable(f"the Kubernetes API is unreachable: {type(error).__name__}") from error

    async def _items(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        try:
            page = await self._call("GET", custom_path(plural, namespace))
        except ApiError as error:
            if error.status == 404:
                return []  # the CRD is not installed: nothing of that kind exists
            raise Unavailable(f"cannot list {plural}: {error.message}") from error
        return list(page.get("items") or [])

    async def list_components(self, namespace: str) -> dict[str, ConfigComponentSpec]:
        out: dict[str, ConfigComponentSpec] = {}
        for item in await self._items(COMPONENTS, namespace):
            name = str((item.get("metadata") or {}).get("name"))
            try:
                out[name] = ConfigComponentSpec.model_validate(item.get("spec") or {})
            except ValidationError:
                log.warning("ConfigComponent %s/%s has an invalid spec; ignored", namespace, name)
        return out

    async def list_environments(self, namespace: str) -> dict[str, EnvironmentSpec]:
        out: dict[str, EnvironmentSpec] = {}
        for item in await self._items(ENVIRONMENTS, namespace):
            name = str((item.get("metadata") or {}).get("name"))
            try:
                out[name] = EnvironmentSpec.model_validate(item.get("spec") or {})
            except ValidationError:
                log.warning("Environment %s/%s has an invalid spec; ignored", namespace, name)
        return out

    async def _create(self, plural: str, kind: str, namespace: str, name: str, spec: Mapping[str, Any]
                      ) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, "namespace": namespace},
                "spec": spec}
        try:
            return await self._call("POST", custom_path(plural, namespace), body)
        except ApiError as error:
            if error.status == 409:
                raise Conflict(f'{kind} "{name}" already exists in namespace "{namespace}"') from error
            if error.status in (400, 403, 422):
                raise Invalid(error.message) from error
            raise Unavailable(error.message) from error

    async def create_component(self, namespace: str, name: str, spec: ConfigComponentSpec) -> None:
        await self._create(COMPONENTS, CONFIG_COMPONENT.kind, namespace, name,
                           spec.model_dump(by_alias=True, exclude_none=True))

    async def create_environment(self, namespace: str, name: str, spec: EnvironmentSpec) -> None:
        await self._create(ENVIRONMENTS, ENVIRONMENT.kind, namespace, name,
                           spec.model_dump(by_alias=True, exclude_none=True))

    async def snapshot(self, namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
        try:
            env_raw, components, values = await asyncio.gather(
                self._call("GET", custom_path(ENVIRONMENTS, namespace, environment)),
                self.list_components(namespace),
                self._items(VALUES, namespace),
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise Unavailable(f"cannot read environment {environment}: {error.message}") from error
        try:
            env = EnvironmentSpec.model_validate(env_raw.get("spec") or {})
        except ValidationError as error:
            raise Invalid(f'Environment "{environment}" has an invalid spec: {error.errors()[0]["msg"]}') from error
        stored: list[StoredValues] = []
        for item in values:
            parsed = await self._stored(namespace, item, env, environment)
            if parsed is not None:
                stored.append(parsed)
        return Snapshot(name=environment, environment=env, components=components, values=stored)

    async def _stored(self, namespace: str, item: Mapping[str, Any], env: EnvironmentSpec,
                      environment: str | None) -> StoredValues | None:
        meta = item.get("metadata") or {}
        try:
            spec = ConfigValuesSpec.model_validate(item.get("spec") or {})
            point = values_point(spec, env)
        except (ValidationError, LevelError):
            return None
        if environment is not None and spec.environment != environment:
            return None
        data = dict(spec.data)
        if spec.revert_to is not None:
            version = await self._read_version(Owner(namespace, str(meta.get("name")), str(meta.get("uid"))),
                                               spec.revert_to)
            if version is not None:
                data = version.data
        status = item.get("status") or {}
        version_number = status.get("version")
        return StoredValues(
            name=str(meta.get("name")), uid=str(meta.get("uid")), resource_version=str(meta.get("resourceVersion")),
            spec=spec, point=point, data=data,
            version=int(version_number) if isinstance(version_number, int) else None, raw=item,
            generation=int(meta.get("generation") or 0),
        )

    async def _read_version(self, owner: Owner, number: int) -> Version | None:
        """One kept version (the data a `spec.revertTo` puts in force), None when not kept or unreadable."""
        try:
            return await History(self._kube, owner).read(number)
        except HistoryError:
            return None

    async def write_values(
        self, namespace: str, target: ValuesTarget, data: dict[str, Any], expect: str | None
    ) -> StoredValues:
        """Create or update the object at the target; any lost race is a `Conflict` (never a blind
        overwrite): the caller decides whether to re-read and retry. `expect` is a resourceVersion
        the object must still have (default: the one `target.existing` was read at)."""
        existing = target.existing
        if existing is None:
            if expect is not None:
                raise Conflict("the values do not exist (any more), but If-Match was given")
            name = object_name(target.environment, target.resource, target.kind, target.point)
            try:
                created = await self._call("POST", custom_path(VALUES, namespace),
                                           values_body(namespace, name, target, data))
            except ApiError as error:
                if error.status == 409:
                    raise Conflict(f'ConfigValues "{name}" was created meanwhile') from error
                raise self._refused(error) from error
            return self._after_write(created, target, data)
        precondition = expect or existing.resource_version
        try:
            updated = await self._call("PUT", custom_path(VALUES, namespace, existing.name),
                                       updated_body(existing.raw, data, precondition))
        except ApiError as error:
            if error.status in (404, 409):
                raise Conflict(
                    f'ConfigValues "{existing.name}" changed since resourceVersion {precondition}'
                ) from error
            raise self._refused(error) from error
        return self._after_write(updated, target, data)

    @staticmethod
    def _refused(error: ApiError) -> RepositoryError:
        if error.status in (400, 403, 422):
            return Invalid(error.message)
        if error.status == 409:
            return Conflict(error.message)
        return Unavailable(error.message)

    @staticmethod
    def _after_write(raw: Mapping[str, Any], target: ValuesTarget, data: dict[str, Any]) -> StoredValues:
        meta = raw.get("metadata") or {}
        spec = ConfigValuesSpec.model_validate(raw.get("spec") or {})
        version = (raw.get("status") or {}).get("version")
        return StoredValues(
            name=str(meta.get("name")), uid=str(meta.get("uid")), resource_version=str(meta.get("resourceVersion")),
            spec=spec, point=target.point, data=data, version=version if isinstance(version, int) else None, raw=raw,
            generation=int(meta.get("generation") or 0),
        )

    async def delete_values(self, namespace: str, stored: StoredValues, expect: str | None) -> None:
        body: dict[str, Any] = {"propagationPolicy": "Background", "preconditions": {"uid": stored.uid}}
        if expect is not None:
            body["preconditions"]["resourceVersion"] = expect
        try:
            await self._call("DELETE", custom_path(VALUES, namespace, stored.name), body)
        except ApiError as error:
            if error.status == 404:
                return
            if error.status == 409:
                raise Conflict(f'ConfigValues "{stored.name}" changed since resourceVersion {expect}') from error
            raise self._refused(error) from error

    async def versions(self, namespace: str, stored: StoredValues) -> list[Version]:
        try:
            return await History(self._kube, Owner(namespace, stored.name, stored.uid)).versions()
        except HistoryError as error:
            raise Unavailable(str(error)) from error
