"""The HTTP layer of the configuration API, with in-memory fakes of its two dependencies."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import ClientSession
from yarl import URL

from operators.config.api import ConfigApi, parse_values_path
from operators.config.history import Version, data_hash
from operators.config.models import ConfigComponentSpec, ConfigValuesSpec
from operators.config.repository import Conflict, Snapshot, StoredValues, ValuesTarget
from operators.environment.models import EnvironmentSpec
from operators.runtime.api.auth import Access, BasicAuthenticator, ChainAuthenticator, Identity, static_credentials
from operators.runtime.serving.http import HttpServer
from tests.unit.fakeapi import FakeAuth

P = "/api/v1/config"
TOKEN = {"Authorization": "Bearer good"}
READER = {"Authorization": "Bearer reader"}


class FakeRepository:
    """Environments, components and values in memory; each write records a version, as the operator would."""

    def __init__(self) -> None:
        self.environments: dict[str, EnvironmentSpec] = {}
        self.components: dict[str, ConfigComponentSpec] = {}
        self.values: dict[str, StoredValues] = {}
        self.history: dict[str, list[Version]] = {}
        self.counter = 0
        self.conflicts_to_inject = 0

    async def list_components(self, namespace: str) -> dict[str, ConfigComponentSpec]:
        return dict(self.components)

    async def create_component(self, namespace: str, name: str, spec: ConfigComponentSpec) -> None:
        if name in self.components:
            raise Conflict(f'ConfigComponent "{name}" already exists')
        self.components[name] = spec

    async def list_environments(self, namespace: str) -> dict[str, EnvironmentSpec]:
        return dict(self.environments)

    async def create_environment(self, namespace: str, name: str, spec: EnvironmentSpec) -> None:
        if name in self.environments:
            raise Conflict(f'Environment "{name}" already exists')
        self.environments[name] = spec

    async def snapshot(self, namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
        env = self.environments.get(environment)
        if env is None:
            return None
        mine = [v for v in self.values.values() if v.spec.environment == environment]
        return Snapshot(environment, env, dict(self.components), mine)

    async def write_values(self, namespace: str, target: ValuesTarget, data: dict[str, Any],
                           expect: str | None) -> StoredValues:
        if self.conflicts_to_inject:
            self.conflicts_to_inject -= 1
            raise Conflict("injected")
        existing = target.existing
        if existing is not None:
            current = self.values.get(existing.name)
            if current is None or current.resource_version != (expect or existing.resource_version):
                raise Conflict(f'ConfigValues "{existing.name}" changed')
            name, uid = existing.name, existing.uid
        else:
            if expect is not None:
                raise Conflict("gone")
            name, uid = f"cv-{len(self.values) + 1}", f"uid-{len(self.values) + 1}"
        self.counter += 1
        versions = self.history.setdefault(name, [])
        if not versions or versions[-1].data_hash != data_hash(data):
            number = len(versions) + 1
            versions.append(Version(number, data, data_hash(data), "spec", "t", f"{name}-v{number}"))
        spec = ConfigValuesSpec.model_validate({"environment": target.environment, "resource": target.resource,
                                                "kind": target.kind, "level": dict(target.point), "data": data})
        generation = (existing.generation + 1) if existing is not None else 1
        if existing is not None and existing.data == data:
            generation = existing.generation  # the API server keeps the generation of an unchanged spec
        stored = StoredValues(name, uid, str(self.counter), spec, target.point, data, versions[-1].number,
                              generation=generation)
        self.values[name] = stored
        return stored

    async def delete_values(self, namespace: str, stored: StoredValues, expect: str | None) -> None:
        current = self.values.get(stored.name)
        if current is None or (expect is not None and current.resource_version != expect):
            raise Conflict(f'ConfigValues "{stored.name}" changed')
        del self.values[stored.name]

    def touch_status(self, name: str) -> None:
        """What the operator's status write does: a new resourceVersion, the same generation."""
        self.counter += 1
        self.values[name] = replace(self.values[name], resource_version=str(self.counter))

    async def versions(self, namespace: str, stored: StoredValues) -> list[Version]:
        return list(self.history.get(stored.name, []))


def make_repo() -> FakeRepository:
    repo = FakeRepository()
    repo.components["fuel"] = ConfigComponentSpec.model_validate({"resources": [
        {"name": "astute", "schema": {"type": "object", "properties": {"deployment_id": {"type": "integer"}}}},
        {"name": "override/plugins"}, {"name": "globals"}]})
    repo.environments["1"] = EnvironmentSpec.model_validate({
        "release": "mitaka-9.0", "hierarchyLevels": ["node"], "components": ["fuel"],
        "nodes": [{"name": "node-1", "fqdn": "node-1.domain.tld", "roles": ["controller"]}]})
    repo.environments["2"] = EnvironmentSpec.model_validate({
        "release": "mitaka-9.0", "hierarchyLevels": ["role", "node"], "components": ["fuel"],
        "nodes": [{"name": "node-7", "fqdn": "node-7.domain.tld", "roles": ["compute"]}]})
    return repo


Scenario = Callable[[ClientSession, FakeRepository], Awaitable[None]]


def run(scenario: Scenario, repo: FakeRepository | None = None, auth: Any = None) -> None:
    repository = repo or make_repo()

    async def main() -> None:
        api = ConfigApi(repository, auth or FakeAuth())
        server = HttpServer(api, errors=api.problem)
        await server.start("127.0.0.1", 0)
        try:
            async with ClientSession(f"http://127.0.0.1:{server.port}") as client:
                await scenario(client, repository)
        finally:
            await server.stop()

    asyncio.run(main())


NODE1 = f"{P}/environments/1/nodes/node-1.domain.tld/resources"


def test_paths_parse_levels_resources_with_slashes_and_the_seed_override_alias() -> None:
    parsed = parse_values_path("1", "nodes/n1/resources/override/plugins/override")
    assert parsed is not None and parsed.pairs == (("nodes", "n1"),)
    assert parsed.resource == "override/plugins" and parsed.kind == "overrides"
    root = parse_values_path("1", "resources/astute/values")
    assert root is not None and root.pairs == () and root.kind == "values"
    for bad in ["resources/astute", "resources/values", "nodes//resources/a/values", "nodes/n1/astute/values"]:
        assert parse_values_path("1", bad) is None, bad


def test_use_cases_put_get_key_and_effective_with_trace() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        put = await client.put(f"{NODE1}/astute/values", json={"deployment_id": 1, "nova": {"debug": False}},
                               headers=TOKEN)
        assert put.status == 200 and await put.json() == {"deployment_id": 1, "nova": {"debug": False}}
        # use case 2: one key
        got = await client.get(f"{NODE1}/astute/values", params={"effective": "", "key": "deployment_id"},
                               headers=TOKEN)
        assert got.status == 200 and await got.json() == 1
        # use case 3: set one key, the rest stays
        setkey = await client.put(f"{NODE1}/astute/values", params={"key": "deployment_id"}, json=2, headers=TOKEN)
        assert setkey.status == 200 and (await setkey.json())["nova"] == {"debug": False}
        # Fuel's override path, and the general root level
        ov = await client.put(f"{NODE1}/astute/override", json={"nova": {"debug": True}}, headers=TOKEN)
        assert ov.status == 200
        root = await client.put(f"{P}/environments/1/resources/astute/values", json={"root": "r", "deployment_id": 0},
                                headers=TOKEN)
        assert root.status == 200
        eff = await client.get(f"{NODE1}/astute/values?effective&trace", headers=TOKEN)
        body = await eff.json()
        assert body["values"] == {"root": "r", "deployment_id": 2, "nova": {"debug": True}}
        assert body["lookup"]["nova.debug"]["kind"] == "overrides"
        assert body["lookup"]["root"]["level"] == "(root)"
        # by node name, the same point
        same = await client.get(f"{P}/environments/1/nodes/node-1/resources/astute/values", headers=TOKEN)
        assert (await same.json())["deployment_id"] == 2 and same.headers["X-Stead-Version"] == "2"
        assert same.headers["ETag"].startswith('"')

    run(scenario)


@pytest.mark.parametrize("path,what,message", [
    (f"{P}/environments/9/nodes/node-1/resources/astute/values", "environment",
     'environment "9" not found in namespace "default"'),
    (f"{NODE1}/nope/values", "resource",
     'resource "nope" is not defined by any component enabled in environment "1" (enabled components: fuel)'),
    (f"{P}/environments/1/nodes/ghost/resources/astute/values", "node",
     'node "ghost" not found: no environment in namespace "default" has a node with this FQDN or name'),
    (f"{P}/environments/1/nodes/node-7.domain.tld/resources/astute/values", "node",
     'node "node-7.domain.tld" is not assigned to environment "1"'),
    (f"{NODE1}/astute/values?version=3", "version",
     'version 3 of the values of resource "astute" at node=node-1.domain.tld in environment "1" not found '
     "(kept: 1)"),
    (f"{P}/environments/1/racks/r1/resources/astute/values", "level",
     'environment "1" has no level "racks" (levels: node)'),
    (f"{NODE1}/globals/values", "values", 'no values of resource "globals" at node=node-1.domain.tld'),
    (f"{NODE1}/astute/values?key=a.b", "key", 'key "a.b": no "a" in the top level'),
    (f"{P}/components/zzz", "component", 'component "zzz" not found'),
    (f"{P}/environments/1/whatever", "route", "no such route"),
])
def test_every_404_names_what_was_not_found(path: str, what: str, message: str) -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        await client.put(f"{NODE1}/astute/values", json={"x": 1}, headers=TOKEN)
        response = await client.get(path, headers=TOKEN)
        body = await response.json()
        assert response.status == 404, body
        assert body["notFound"] == what and body["error"] == "NotFound"
        assert body["message"].startswith(message), body["message"]

    run(scenario)


def test_without_valid_credentials_every_path_is_401_with_the_same_body() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        bodies = set()
        for method, path, headers in [
            ("GET", f"{NODE1}/astute/values", {}),
            ("GET", f"{P}/environments/nope/nodes/x/resources/y/values", {"Authorization": "Bearer bad"}),
            ("PUT", f"{NODE1}/astute/values", {"Authorization": "Basic Zm9vOmJhcg=="}),
            ("GET", f"{P}/openapi.json", {}),
            ("GET", "/not/even/a/route", {}),
        ]:
            response = await client.request(method, path, headers=headers, json={})
            assert response.status == 401
            assert "Bearer" in response.headers["WWW-Authenticate"]
            bodies.add(await response.text())
        assert len(bodies) == 1

    run(scenario)


def test_basic_auth_against_credentials_and_chain() -> None:
    auth = ChainAuthenticator(FakeAuth(), BasicAuthenticator(static_credentials("admin", "s3cret")))

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        assert (await client.get(f"{P}/environments", headers=basic("admin", "s3cret"))).status == 200
        assert (await client.get(f"{P}/environments", headers=basic("admin", "wrong"))).status == 401
        assert (await client.get(f"{P}/environments", headers=basic("root", "s3cret"))).status == 401
        assert (await client.get(f"{P}/environments", headers={"Authorization": "Basic !!"})).status == 401
        assert (await client.get(f"{P}/environments", headers=TOKEN)).status == 200

    run(scenario, auth=auth)


def test_forbidden_writes_and_schema_and_malformed_bodies() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        forbidden = await client.put(f"{NODE1}/astute/values", json={}, headers=READER)
        assert forbidden.status == 403 and 'user "reader" may not create configvalues' in (await forbidden.json())[
            "message"]
        for body, message in [
            ("{not json", "body: not valid JSON"),
            ("[1, 2]", "body: the data of a resource is a JSON object"),
            ("", "body: expected a JSON document"),
            ('{"deployment_id": "x"}', 'resource "astute" refuses the data: data.deployment_id: expected integer'),
        ]:
            response = await client.put(f"{NODE1}/astute/values", data=body, headers=TOKEN)
            assert response.status == 400, body
            assert (await response.json())["message"].startswith(message)
        bad_key = await client.put(f"{NODE1}/astute/values?key=a..b", json=1, headers=TOKEN)
        assert bad_key.status == 400 and "segment 2 is empty" in (await bad_key.json())["message"]
        assert (await client.get(f"{NODE1}/astute/values?version=x", headers=TOKEN)).status == 400
        assert (await client.get(f"{NODE1}/astute/values?namespace=Bad_NS", headers=TOKEN)).status == 400
        order = await client.get(f"{P}/environments/2/nodes/node-7/roles/compute/resources/astute/values",
                                 headers=TOKEN)
        assert order.status == 400 and "must follow the hierarchy" in (await order.json())["message"]

    run(scenario)


def test_if_match_conflicts_and_key_writes_retry_lost_races() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        first = await client.put(f"{NODE1}/astute/values", json={"a": 1}, headers=TOKEN)
        etag = first.headers["ETag"]
        await client.put(f"{NODE1}/astute/values", params={"key": "b"}, json=2, headers=TOKEN)
        stale = await client.put(f"{NODE1}/astute/values", json={"a": 9}, headers={**TOKEN, "If-Match": etag})
        assert stale.status == 409 and (await stale.json())["error"] == "Conflict"
        # the operator writing the status does not make an ETag stale; a data change does
        current = await client.get(f"{NODE1}/astute/values", headers=TOKEN)
        name = next(iter(repo.values))
        repo.touch_status(name)
        ok = await client.put(f"{NODE1}/astute/values?key=b", json=5,
                              headers={**TOKEN, "If-Match": current.headers["ETag"]})
        assert ok.status == 200 and ok.headers["ETag"] != current.headers["ETag"]
        repo.touch_status(name)
        gone = await client.delete(f"{NODE1}/astute/values", headers={**TOKEN, "If-Match": current.headers["ETag"]})
        assert gone.status == 409
        repo.touch_status(name)
        assert (await client.delete(f"{NODE1}/astute/values", headers={**TOKEN, "If-Match": ok.headers["ETag"]})
                ).status == 204
        await client.put(f"{NODE1}/astute/values", json={"a": 1, "b": 2}, headers=TOKEN)
        repo.conflicts_to_inject = 2
        retried = await client.put(f"{NODE1}/astute/values", params={"key": "c"}, json=3, headers=TOKEN)
        assert retried.status == 200 and await retried.json() == {"a": 1, "b": 2, "c": 3}
        repo.conflicts_to_inject = 10
        assert (await client.put(f"{NODE1}/astute/values", json={}, headers=TOKEN)).status == 409

    run(scenario)


def test_history_versions_revert_and_delete() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        for n in (1, 2, 3):
            await client.put(f"{NODE1}/astute/values", json={"deployment_id": n}, headers=TOKEN)
        history = await (await client.get(f"{NODE1}/astute/values?history", headers=TOKEN)).json()
        assert [v["version"] for v in history["versions"]] == [1, 2, 3] and history["current"] == 3
        v1 = await client.get(f"{NODE1}/astute/values?version=1", headers=TOKEN)
        assert await v1.json() == {"deployment_id": 1} and v1.headers["X-Stead-Version"] == "1"
        eff1 = await client.get(f"{NODE1}/astute/values?effective&version=1", headers=TOKEN)
        assert await eff1.json() == {"deployment_id": 1}
        reverted = await client.post(f"{NODE1}/astute/values?revert=1", headers=TOKEN)
        assert reverted.status == 200 and await reverted.json() == {"deployment_id": 1}
        history = await (await client.get(f"{NODE1}/astute/values?history", headers=TOKEN)).json()
        assert history["current"] == 4
        assert (await client.post(f"{NODE1}/astute/values", headers=TOKEN)).status == 400
        assert (await client.post(f"{NODE1}/astute/values?revert=99", headers=TOKEN)).status == 404
        removed = await client.delete(f"{NODE1}/astute/values?key=deployment_id", headers=TOKEN)
        assert removed.status == 200 and await removed.json() == {}
        assert (await client.delete(f"{NODE1}/astute/values?key=deployment_id", headers=TOKEN)).status == 404
        assert (await client.delete(f"{NODE1}/astute/values", headers=TOKEN)).status == 204
        assert (await client.get(f"{NODE1}/astute/values", headers=TOKEN)).status == 404
        assert await (await client.get(f"{NODE1}/astute/values?effective", headers=TOKEN)).json() == {}

    run(scenario)


def test_components_environments_and_openapi() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        created = await client.post(f"{P}/components", headers=TOKEN, json={
            "name": "lcm", "resource_definitions": {"override/node": {}, "hiera": {"schema": {"type": "object"}}}})
        assert created.status == 200
        assert await created.json() == {"id": "lcm", "name": "lcm", "resource_definitions": {
            "override/node": {}, "hiera": {"schema": {"type": "object"}}}}
        again = await client.post(f"{P}/components", headers=TOKEN, json={"name": "lcm"})
        assert again.status == 409
        bad = await client.post(f"{P}/components", headers=TOKEN, json={
            "name": "x", "resource_definitions": {"a b": {}}})
        assert bad.status == 400 and (await bad.json())["message"].startswith("body.resources[0].name")
        assert [c["name"] for c in await (await client.get(f"{P}/components", headers=TOKEN)).json()] == [
            "fuel", "lcm"]
        env = await client.post(f"{P}/environments", headers=TOKEN, json={
            "id": "3", "release": "r", "components": ["lcm"], "hierarchy_levels": ["node"]})
        assert env.status == 200 and (await env.json())["hierarchy_levels"] == ["node"]
        noenv = await client.post(f"{P}/environments", headers=TOKEN, json={"id": "4", "hierarchy_levels": []})
        msg = (await noenv.json())["message"]
        assert noenv.status == 400 and "body.release: Field required" in msg and "body.hierarchyLevels" in msg
        got = await (await client.get(f"{P}/environments/3", headers=TOKEN)).json()
        assert got["components"] == ["lcm"]
        doc = await (await client.get(f"{P}/openapi.json", headers=TOKEN)).json()
        assert doc["openapi"].startswith("3.") and f"{P}/environments/{{env}}" in doc["paths"]

    run(scenario)


def test_a_node_alone_is_under_its_role_and_a_role_it_lacks_is_404() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        under_role = f"{P}/environments/2/roles/compute/nodes/node-7/resources/globals/values"
        assert (await client.put(under_role, headers=TOKEN, json={"a": 1})).status == 200
        alone = await client.get(f"{P}/environments/2/nodes/node-7.domain.tld/resources/globals/values",
                                 headers=TOKEN)
        assert alone.status == 200 and await alone.json() == {"a": 1}
        wrong = await client.get(f"{P}/environments/2/roles/controller/nodes/node-7/resources/globals/values",
                                 headers=TOKEN)
        body = await wrong.json()
        assert wrong.status == 404 and body["notFound"] == "node"
        assert body["message"] == ('node "node-7" does not have role "controller" (its roles: compute) '
                                   'in environment "2"')

    run(scenario)


class KeepingRepository(FakeRepository):
    """Returns the same Snapshot object until something is written, as the watch-fed cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, Snapshot | None] = {}

    async def snapshot(self, namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
        if fresh or environment not in self.kept:
            self.kept[environment] = await super().snapshot(namespace, environment)
        return self.kept[environment]

    async def write_values(self, namespace: str, target: ValuesTarget, data: dict[str, Any],
                           expect: str | None) -> StoredValues:
        self.kept.clear()
        return await super().write_values(namespace, target, data, expect)


def test_lookups_against_an_unchanged_snapshot_merge_once_and_answer_again_until_it_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from operators.config.api import handlers as api

    merges: list[Any] = []

    def counting(point: Any, layers: Any) -> Any:
        merges.append(point)
        return api_effective(point, layers)

    api_effective = api.effective
    monkeypatch.setattr(api, "effective", counting)
    repo = KeepingRepository()
    repo.components, repo.environments = make_repo().components, make_repo().environments

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        await client.put(f"{NODE1}/astute/values", json={"deployment_id": 1, "nova": {"debug": False}},
                         headers=TOKEN)
        for _ in range(3):
            for key, value in (("deployment_id", 1), ("nova.debug", False)):
                got = await client.get(f"{NODE1}/astute/values?effective&key={key}", headers=TOKEN)
                assert got.status == 200 and await got.json() == value
        assert len(merges) == 1  # six lookups of two keys at one point: one merge
        # an answer given before is still only given to valid credentials
        denied = await client.get(f"{NODE1}/astute/values?effective&key=deployment_id",
                                  headers={"Authorization": "Bearer nobody"})
        assert denied.status == 401
        # a write makes a new snapshot: the new value, from a new merge
        await client.put(f"{NODE1}/astute/values", params={"key": "deployment_id"}, json=5, headers=TOKEN)
        got = await client.get(f"{NODE1}/astute/values?effective&key=deployment_id", headers=TOKEN)
        assert await got.json() == 5 and len(merges) == 2

    run(scenario, repo)


def test_a_path_holding_an_escaped_question_mark_is_not_answered_from_another_lookups_cache() -> None:
    """Answers are cached by (decoded path, query): joined into one string, this path would be the
    lookup before it and get its answer."""
    repo = KeepingRepository()
    repo.components, repo.environments = make_repo().components, make_repo().environments

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        await client.put(f"{NODE1}/astute/values", json={"deployment_id": 1}, headers=TOKEN)
        got = await client.get(f"{NODE1}/astute/values?effective&key=deployment_id", headers=TOKEN)
        assert got.status == 200 and await got.json() == 1
        twin = await client.get(URL(f"{NODE1}/astute/values%3Feffective&key=deployment_id", encoded=True),
                                headers=TOKEN)
        assert twin.status == 404, await twin.text()

    run(scenario, repo)


def test_query_parameters_take_the_first_of_repeated_names_and_decode_plus_as_space() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        await client.put(f"{NODE1}/astute/values", json={"a b": 1}, headers=TOKEN)
        got = await client.get(f"{NODE1}/astute/values?effective&key=a+b&key=zzz", headers=TOKEN)
        assert got.status == 200 and await got.json() == 1
        bad = await client.get(f"{NODE1}/astute/values?namespace=Not_Valid&namespace=default", headers=TOKEN)
        assert bad.status == 400 and "Not_Valid" in (await bad.json())["message"]

    run(scenario)


def test_head_answers_like_get_without_the_body_and_server_refusals_use_the_api_error_body() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        head = await client.head(f"{P}/environments/1", headers=TOKEN)
        get = await client.get(f"{P}/environments/1", headers=TOKEN)
        assert head.status == 200 and await head.read() == b""
        assert head.headers["Content-Length"] == str(len(await get.read()))
        assert (await client.head(f"{P}/environments/nope", headers=TOKEN)).status == 404

    run(scenario)

    async def refused() -> None:
        api = ConfigApi(make_repo(), FakeAuth())
        server = HttpServer(api, errors=api.problem)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"PUT {NODE1}/astute/values HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer good\r\n"
                     f"Content-Length: {2 << 20}\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(-1), 5)  # refused on the headers, before any body
        writer.close()
        await server.stop()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 ") and b"content-type: application/json" in head.lower()
        assert json.loads(body) == {"code": 413, "error": "RequestEntityTooLarge",
                                    "message": f"the request body is over {1 << 20} bytes"}

    asyncio.run(refused())


class RecordingAuth(FakeAuth):
    """Says yes to `good` only for the verbs in `verbs`, and records every question asked."""

    def __init__(self, verbs: set[str]) -> None:
        self.verbs = verbs
        self.asked: list[Access] = []

    async def authorize(self, identity: Identity, access: Access) -> bool:
        self.asked.append(access)
        return access.verb in self.verbs


def test_a_put_that_creates_is_authorized_as_create_and_an_update_by_object_name() -> None:
    update_only = RecordingAuth({"get", "list", "update"})

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        created = await client.put(f"{NODE1}/astute/values", json={"deployment_id": 2}, headers=TOKEN)
        assert created.status == 403 and "may not create configvalues" in (await created.json())["message"]
        assert Access("create", "configvalues", "default") in update_only.asked
        update_only.verbs.add("create")
        created = await client.put(f"{NODE1}/astute/values", json={"deployment_id": 2}, headers=TOKEN)
        assert created.status == 200
        name = created.headers["X-Stead-Object"]
        update_only.verbs.discard("create")
        updated = await client.put(f"{NODE1}/astute/values", json={"deployment_id": 3}, headers=TOKEN)
        assert updated.status == 200
        assert Access("update", "configvalues", "default", name) in update_only.asked
        environment = await client.get(f"{P}/environments/1", headers=TOKEN)
        assert environment.status == 200 and Access("get", "environments", "default", "1") in update_only.asked

    run(scenario, auth=update_only)


@pytest.mark.parametrize("name", ["1%3Fwatch%3Dtrue", "1%3F", "..", "1%252F", "1%23x", "UPPER"])
def test_names_from_urls_that_cannot_be_object_names_are_not_found(name: str) -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        asked: list[str] = []
        snapshot = repo.snapshot

        async def recording(namespace: str, environment: str, fresh: bool = False) -> Snapshot | None:
            asked.append(environment)
            return await snapshot(namespace, environment, fresh)

        repo.snapshot = recording  # type: ignore[method-assign]
        for path in (f"{P}/environments/{name}", f"{P}/environments/{name}/resources/astute/values"):
            response = await client.get(path, headers=TOKEN)
            # `environments/..` is resolved by the client to the API's root, which lists the routes
            assert response.status == 404 or (name == ".." and "routes" in await response.json()), path
        assert asked == []  # never handed on towards an API-server path

    run(scenario)


def test_object_paths_escape_names() -> None:
    from operators.runtime.kube.client import core_path, custom_path

    assert custom_path("environments", "ns", "a?b=c") == "/apis/stead.dev/v1alpha1/namespaces/ns/environments/a%3Fb%3Dc"
    assert core_path("secrets", "ns", "../../x/secrets/y") == "/api/v1/namespaces/ns/secrets/..%2F..%2Fx%2Fsecrets%2Fy"
    for bad in ("", ".", ".."):
        with pytest.raises(ValueError, match="not a Kubernetes object name"):
            core_path("secrets", "ns", bad)


def test_a_client_over_its_review_budget_gets_429_with_retry_after() -> None:
    from operators.runtime.api.auth import TooManyAttempts

    peers: list[str] = []

    class Limited(FakeAuth):
        async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
            peers.append(peer)
            raise TooManyAttempts("too many unknown credentials from this client; retry later")

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        response = await client.get(f"{P}/environments", headers={"Authorization": "Bearer junk"})
        assert response.status == 429 and response.headers["Retry-After"] == "1"
        assert (await response.json())["error"] == "TooManyRequests"
        assert peers == ["127.0.0.1"]

    run(scenario, auth=Limited())


def test_a_role_no_node_has_is_404_naming_the_roles_that_exist() -> None:
    """A typo in a role (`role=controler`) used to read the root's values, with 200."""

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        root = f"{P}/environments/2/resources/astute/values"
        assert (await client.put(root, json={"deployment_id": 1}, headers=TOKEN)).status == 200
        for path in (f"{P}/environments/2/roles/controler/resources/astute/values?effective",
                     f"{P}/environments/2/role/controler/resources/astute/values?effective&key=deployment_id"):
            response = await client.get(path, headers=TOKEN)
            body = await response.json()
            assert response.status == 404 and body["notFound"] == "role", body
            assert body["message"] == 'environment "2" has no node with role "controler" (roles: compute)'
        # writing there is refused the same way: a typo would otherwise create values nobody reads
        typo = await client.put(f"{P}/environments/2/roles/controler/resources/astute/values", json={"a": 1},
                                headers=TOKEN)
        assert typo.status == 404 and (await typo.json())["notFound"] == "role"
        # a role that nodes have is fine, with or without values of its own
        compute = await client.get(f"{P}/environments/2/roles/compute/resources/astute/values?effective",
                                    headers=TOKEN)
        assert compute.status == 200 and await compute.json() == {"deployment_id": 1}

    run(scenario)


def test_a_role_whose_nodes_are_gone_is_still_readable_while_values_are_stored_at_it() -> None:
    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        path = f"{P}/environments/2/roles/compute/resources/globals/values"
        assert (await client.put(path, json={"a": 1}, headers=TOKEN)).status == 200
        repo.environments["2"] = EnvironmentSpec.model_validate({
            "release": "mitaka-9.0", "hierarchyLevels": ["role", "node"], "components": ["fuel"], "nodes": []})
        response = await client.get(path, headers=TOKEN)
        assert response.status == 200 and await response.json() == {"a": 1}
        missing = await client.get(f"{P}/environments/2/roles/cinder/resources/globals/values", headers=TOKEN)
        assert (await missing.json())["message"].endswith("(roles: none, it has no nodes)")

    run(scenario)


def test_the_root_lists_every_route_one_per_line() -> None:
    from operators.config.api import ROUTES

    async def scenario(client: ClientSession, repo: FakeRepository) -> None:
        answers = set()
        for path in ("/", "/api/v1", "/api/v1/", f"{P}", f"{P}/"):
            response = await client.get(path, headers=READER)
            assert response.status == 200, path
            answers.add(await response.text())
        assert len(answers) == 1
        text = answers.pop()
        listed = json.loads(text)["routes"]
        assert [(r["method"], r["path"]) for r in listed] == [(m, p) for m, p, _ in ROUTES]
        assert all(line.startswith('{"method"') for line in text.splitlines()[1:len(listed) + 1])  # one a line
        assert (await client.get("/", headers={})).status == 401  # credentials first, as everywhere

    run(scenario)


def test_every_route_listed_is_routed_and_every_route_is_listed() -> None:
    from operators.config.api import ROUTES
    from operators.runtime.serving.http import Request as HttpRequest

    api = ConfigApi(make_repo(), FakeAuth())
    example = {"{name}": "fuel", "{env}": "2", "[/{level}/{value}...]": "/roles/compute", "{resource}": "astute"}
    listed: set[tuple[str, str]] = set()
    for methods, template, description in ROUTES:
        assert description
        path = template
        for placeholder, value in example.items():
            path = path.replace(placeholder, value)
        for method in methods.split("|"):
            handler, _ = api._route(HttpRequest(method, path, "", {}))
            listed.add((method, handler.__name__))
    routed = {(method, handler.__name__) for _, methods in api._table for method, handler in methods.items()
              if method != "HEAD"}
    assert routed == listed


def test_a_verified_client_certificate_is_the_identity_and_a_refused_one_is_401_saying_why() -> None:
    from operators.runtime.serving.clientca import PeerCertificate
    from operators.runtime.serving.http import Request as HttpRequest

    class Recording(FakeAuth):
        def __init__(self) -> None:
            self.asked: list[tuple[Identity, Access]] = []

        async def authorize(self, identity: Identity, access: Access) -> bool:
            self.asked.append((identity, access))
            return identity.user == "alice" and access.verb == "get"

    async def scenario() -> None:
        auth = Recording()
        api = ConfigApi(make_repo(), auth)
        alice = PeerCertificate("alice", ("dev", "system:authenticated"))
        # a good certificate wins over a header (as in Kubernetes: x509 first)
        ok = await api(HttpRequest("GET", f"{P}/environments/2", "", {"authorization": "Bearer nobody"},
                                   certificate=alice))
        assert ok.status == 200
        identity, access = auth.asked[-1]
        assert identity == Identity("alice", "x509", groups=("dev", "system:authenticated"))
        assert access == Access("get", "environments", "default", "2")
        denied = await api(HttpRequest("GET", f"{P}/environments", "", {}, certificate=alice))
        assert denied.status == 403 and b'user \\"alice\\" may not list environments' in denied.body
        refused = PeerCertificate("", (), "the client certificate expired on 2026-01-01 00:00:00 UTC")
        answer = await api(HttpRequest("GET", f"{P}/environments/2", "", {"authorization": "Bearer good"},
                                       certificate=refused))
        assert answer.status == 401 and json.loads(answer.body)["message"] == (
            "client certificate refused: the client certificate expired on 2026-01-01 00:00:00 UTC")

    asyncio.run(scenario())
