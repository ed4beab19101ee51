"""`stead service`: each action against the shared fake API server (what it reads, what it writes, what it
prints), ids by name, uid and identity, refusals as one line on stderr, and a start-up without heavy imports."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cli import _parser, canonical_argv
from operators.lsm import cli as service_cli
from operators.lsm.models import SERVICE_ENTITY, SERVICE_INSTANCE
from operators.runtime.kube.client import ApiError, custom_path
from tests.unit.fakeapi import FakeApi

NS = "demo"
ROOT = Path(__file__).resolve().parents[3]
ENTITY = {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceEntity", "metadata": {"name": "greeter"},
          "spec": {"attributes": [{"name": "name", "type": "string"},
                                  {"name": "who", "type": "string", "modifier": "rw+"},
                                  {"name": "replicas", "type": "int", "modifier": "rw+"},
                                  {"name": "tags", "type": "list", "optional": True},
                                  {"name": "fast", "type": "bool", "optional": True}],
                   "identity": "name", "lifecycle": {"builtin": "simple"}},
          "status": {"lifecycle": "builtin:simple", "conditions": [{"type": "Ready", "status": "True"}]}}


def instance(name: str, ident: str, state: str = "up", version: int = 4, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance", "metadata": {"name": name},
            "spec": {"entity": "greeter", "attributes": {"name": ident, "who": "world", "replicas": 1}},
            "status": {"state": state, "version": version, "identity": ident, "modelState": "active",
                       "activeAttributes": {"name": ident, "who": "world", "replicas": 1}, **status}}


def path(name: str | None = None) -> str:
    return custom_path(SERVICE_INSTANCE.plural, NS, name)


@pytest.fixture
def seeded(kube: FakeApi) -> FakeApi:
    kube.add(custom_path(SERVICE_ENTITY.plural, NS, "greeter"), ENTITY)
    kube.add(path("hello"), instance("hello", "hello-id", log=[
        {"to": "start", "trigger": "create", "version": 1, "time": "2026-01-01T00:00:00Z"},
        {"from": "start", "to": "acknowledged", "trigger": "auto", "version": 2, "time": "2026-01-01T00:00:01Z"},
        {"from": "acknowledged", "to": "creating", "trigger": "auto", "version": 3, "time": "2026-01-01T00:00:01Z",
         "operation": "promote"},
        {"from": "creating", "to": "up", "trigger": "resource_based", "version": 4, "time": "2026-01-01T00:00:09Z",
         "message": "the App reached its goal"}]))
    kube.add(path("other"), instance("other", "other-id", state="update_rejected", version=7))
    return kube


def run(kube: FakeApi, *argv: str) -> int:
    words = canonical_argv(["service", *argv])
    args = _parser(words).parse_args(words)
    assert args.func.__name__ == "_run_command"
    return asyncio.run(service_cli.dispatch(kube, args))


def test_the_plurals_agree_with_the_models() -> None:
    assert (SERVICE_ENTITY.plural, SERVICE_INSTANCE.plural) == (service_cli.ENTITIES, service_cli.INSTANCES)


def test_catalog_lists_the_entities_and_the_builtin_lifecycles(seeded: FakeApi,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "catalog", "-n", NS) == 0
    out = capsys.readouterr().out
    assert "greeter" in out and "builtin:simple" in out
    for name in ("simple", "service", "testing_basic_lifecycle"):
        assert any(line.startswith(name + " ") for line in out.splitlines()), name
    assert run(seeded, "catalog", "-n", NS, "-o", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["metadata"]["name"] for e in doc["entities"]] == ["greeter"]
    assert doc["builtinLifecycles"]["simple"]["initialState"] == "start"


def test_list_shows_the_instances_of_an_entity(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "list", "greeter", "-n", NS) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "IDENTITY", "STATE", "VERSION", "READY", "AGE"]
    assert lines[1].split()[:4] == ["hello", "hello-id", "up", "4"]
    assert lines[2].split()[:4] == ["other", "other-id", "update_rejected", "7"]
    assert run(seeded, "list", "greeter", "-n", NS, "-o", "yaml") == 0
    assert [i["metadata"]["name"] for i in yaml.safe_load(capsys.readouterr().out)] == ["hello", "other"]
    assert run(seeded, "list", "nosuch", "-n", NS) == 1
    assert capsys.readouterr().err == "stead service: no service entity 'nosuch' in namespace demo\n"


def test_create_reads_values_by_the_attribute_types(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(seeded, "create", "greeter", "hi", "-n", NS, "--attr", "name=hi", "--attr", "who=you",
                     "--attr", "replicas=3", "--attr", 'tags=["a","b"]', "--attr", "fast=true")
    assert code == 0
    made = seeded.objects[path("hi")]
    assert made["spec"] == {"entity": "greeter", "attributes": {"name": "hi", "who": "you", "replicas": 3,
                                                                 "tags": ["a", "b"], "fast": True}}
    assert (made["apiVersion"], made["kind"]) == ("stead.dev/v1alpha1", "ServiceInstance")
    assert "serviceinstance/hi created" in capsys.readouterr().out
    assert run(seeded, "create", "greeter", "bad", "-n", NS, "--attr", "replicas=many") == 1
    assert capsys.readouterr().err == "stead service: --attr replicas: 'many' is not an int\n"
    assert run(seeded, "create", "nosuch", "x", "-n", NS) == 1
    assert "no service entity 'nosuch'" in capsys.readouterr().err
    assert path("bad") not in seeded.objects and seeded.count("POST") == 1


def test_create_help_explains_how_attr_values_are_read_and_its_examples_read_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("create", "update"):
        with pytest.raises(SystemExit):
            _parser(["service", action, "--help"]).parse_args(["service", action, "--help"])
        assert service_cli.ATTR_HELP in capsys.readouterr().out
    table = [line for line in service_cli.ATTR_HELP.splitlines() if line.startswith("  ")]
    given = service_cli.parse_attrs([shlex.split(word)[0] for line in table
                                     for word in re.findall(r"--attr (\S+)", line)])
    entity = {"spec": {"attributes": [{"name": "who", "type": "string"}, {"name": "replicas", "type": "int"},
                                      {"name": "size", "type": "float"}, {"name": "public", "type": "bool"},
                                      {"name": "tags", "type": "list"}, {"name": "limits", "type": "dict"}]}}
    assert service_cli.typed_attrs(given, entity) == {"who": "world", "replicas": 3, "size": 1.5, "public": True,
                                                      "tags": ["web", "eu"], "limits": {"cpu": 2}}
    assert service_cli.typed_attrs({"replicas": "", "who": ""}, entity) == {"replicas": None, "who": ""}
    assert service_cli.typed_attrs({"colour": "1"}, entity) == {"colour": "1"}  # unknown: the webhook refuses it
    with pytest.raises(service_cli.CliError, match=r"--attr tags: '\{\}' is not a list \(a JSON array\)"):
        service_cli.typed_attrs({"tags": "{}"}, entity)


def test_an_id_is_a_name_a_uid_or_the_identity(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    uid = seeded.objects[path("hello")]["metadata"]["uid"]
    for ident in ("hello", uid, "name=hello-id"):
        assert run(seeded, "get", ident, "-n", NS, "-o", "json") == 0
        assert json.loads(capsys.readouterr().out)["metadata"]["name"] == "hello"
    for ident in ("nosuch", "name=nosuch", "00000000-0000-4000-8000-999999999999", "who=world"):
        assert run(seeded, "get", ident, "-n", NS) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"stead service: no service instance {ident!r}") and err.count("\n") == 1, err


def test_get_shows_state_version_and_sets(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "get", "hello", "-n", NS) == 0
    out = capsys.readouterr().out
    assert "state:      up (active)  version 4" in out
    assert "active:     name=hello-id, who=world, replicas=1" in out


def test_update_sends_the_whole_set_and_the_version_read(seeded: FakeApi,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "update", "name=hello-id", "-n", NS, "--attr", "who=everyone", "--attr",
                     "replicas=2") == 0
    sent = seeded.received[-1]
    assert (sent.method, sent.path) == ("PATCH", path("hello"))
    assert sent.body == {"spec": {"attributes": {"name": "hello-id", "who": "everyone", "replicas": 2},
                                  "currentVersion": 4}}
    assert "update sent at version 4" in capsys.readouterr().out
    assert run(seeded, "update", "hello", "-n", NS) == 1
    assert "nothing to update" in capsys.readouterr().err


def test_set_state_sends_a_state_request_at_the_version_read(seeded: FakeApi,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "set-state", "other", "up", "-n", NS, "--message", "abort the update") == 0
    assert seeded.received[-1].body == {"spec": {"stateRequest": {"target": "up", "currentVersion": 7,
                                                                  "message": "abort the update"}}}
    assert seeded.objects[path("other")]["spec"]["stateRequest"]["currentVersion"] == 7
    assert "state up requested at version 7 (from update_rejected)" in capsys.readouterr().out


def test_a_webhook_refusal_is_one_line_and_exit_1(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    refusal = ('admission webhook "serviceinstances.stead.dev" denied the request: The given current version (4)\n'
               "doesn't match the actual current version (5) of service instance hello")
    seeded.fail_with(ApiError(409, refusal), "PATCH")
    assert run(seeded, "update", "hello", "-n", NS, "--attr", "who=x") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "doesn't match the actual current version (5)" in err
    seeded.fail_with(ApiError(409, "delete refused: state update_rejected has no on_delete transfer"), "DELETE")
    assert run(seeded, "delete", "other", "-n", NS) == 1
    assert capsys.readouterr().err == ("stead service: delete refused: state update_rejected has no on_delete "
                                       "transfer\n")
    assert path("other") in seeded.objects


def test_delete(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    uid = seeded.objects[path("hello")]["metadata"]["uid"]
    assert run(seeded, "delete", "name=hello-id", "-n", NS) == 0
    assert seeded.received[-1].body["preconditions"] == {"uid": uid}
    assert path("hello") not in seeded.objects
    assert "serviceinstance/hello: delete requested (in state up)" in capsys.readouterr().out


def test_log_prints_one_line_per_transfer(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "log", "hello", "-n", NS) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    assert lines[1].split() == ["-", "->", "start", "create", "v1", "2026-01-01T00:00:00Z"]
    assert lines[3].split() == ["acknowledged", "->", "creating", "auto", "v3", "2026-01-01T00:00:01Z", "[promote]"]
    assert lines[4].split()[:6] == ["creating", "->", "up", "resource_based", "v4", "2026-01-01T00:00:09Z"]
    assert lines[4].endswith("the App reached its goal")
    assert run(seeded, "log", "other", "-n", NS) == 0
    assert "no transfers yet" in capsys.readouterr().out


def test_the_service_command_imports_nothing_heavy() -> None:
    script = ("import sys, operators.cli as c\n"
              "for argv in (['service', 'get', 'x'], ['service', 'catalog', '-o', 'json'],"
              " ['service', 'update', 'name=x', '--attr', 'a=b']):\n"
              "    w = c.canonical_argv(argv)\n    c._parser(w).parse_args(w)\n"
              "print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    heavy = ("pydantic", "kopf", "aiohttp", "kubernetes", "rich", "yaml", "operators.lsm.models",
             "operators.lsm.machine", "operators.runtime.kube.client", "operators.catalog")
    loaded = {m for m in done.stdout.split() if any(m == h or m.startswith(h + ".") for h in heavy)}
    assert loaded == set()
