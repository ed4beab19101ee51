"""`stead blueprint deps`: a Blueprint's status.dependencyList, one line per dependency (and -o json|yaml),
on the three-tier example as the compiler lists it."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.calm import cli_runs
from operators.calm.cli import PLURALS, dependency_why, dump_deps, format_deps
from operators.calm.compiler import compile_blueprint
from operators.calm.models import ACTIONRUN, APP, BLUEPRINT, BlueprintSpec
from operators.cli import main

ROOT = Path(__file__).resolve().parents[3]


def three_tier() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())
    status = compile_blueprint(BlueprintSpec.model_validate(doc["spec"])).status(True)
    return {"metadata": {"name": "three-tier"}, "status": status}


def test_one_line_per_dependency_dependent_first_with_its_type_and_why() -> None:
    obj = three_tier()
    entries = obj["status"]["dependencyList"]
    lines = format_deps(obj).splitlines()
    assert lines[0].split() == ["blueprint/three-tier", "Active", f"{len(entries)}", "dependencies"]
    assert lines[1].startswith("(A -> B: A depends on B;")
    edges = [line.split() for line in lines[2:]]
    assert len(edges) == len(entries) == 8
    assert [(e[0], e[1], e[2], e[3]) for e in edges] == [
        ("Package/db_pkg", "->", "Substrate/db_host", "inherent"),
        ("Service/DB", "->", "Package/db_pkg", "inherent"),
        ("Service/App", "->", "Substrate/app_host", "inherent"),
        ("Service/Web", "->", "Substrate/web_host", "inherent"),
        ("Service/App", "->", "Service/DB", "explicit"),
        ("Service/Web", "->", "Service/App", "explicit"),
        ("Service/App", "->", "Service/DB", "implicit"),
        ("Service/Web", "->", "Service/App", "implicit"),
    ]
    assert lines[6].endswith("explicit  spec.services[1].dependsOn[0]")
    assert lines[8].endswith("implicit  create: App/configure reads db_url, which DB/publish sets "
                             "(spec.services[1].actions[0].tasks[0].script)")
    assert len({line.index("->") for line in lines[2:]}) == 1, "the arrows line up"
    assert max(len(line) for line in lines) < len(json.dumps(entries)) / 5  # readable, unlike the one 1.7 KB line


def test_why_an_implicit_dependency_of_a_service_action_names_its_owner() -> None:
    entry = {"type": "implicit", "getterResourceName": "B", "setterResourceName": "A", "setterResourceAttr": "url",
             "actionResourceKind": "Service", "actionResourceName": "S", "actionName": "upgrade"}
    assert dependency_why(entry) == "S.upgrade: B reads url, which A sets"
    assert dependency_why({"type": "explicit", "source": "spec.services[0].dependsOn[0]"}) == (
        "spec.services[0].dependsOn[0]")


def test_a_blueprint_not_compiled_yet_or_failing_says_so() -> None:
    assert format_deps({"metadata": {"name": "new"}}) == "blueprint/new  not compiled yet  0 dependencies"
    failing = {"metadata": {"name": "bad"}, "status": {"state": "Error", "phase": "Validated",
                                                       "errors": ["dependency cycle: A -> B -> A"]}}
    assert format_deps(failing).splitlines() == ["blueprint/bad  Error  0 dependencies",
                                                 "error: dependency cycle: A -> B -> A"]


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_output_prints_the_list_as_the_status_holds_it(fmt: str) -> None:
    obj = three_tier()
    text = dump_deps(obj, fmt)
    assert (json.loads(text) if fmt == "json" else yaml.safe_load(text)) == obj["status"]["dependencyList"]
    assert dump_deps({"metadata": {"name": "new"}}, fmt).strip() in ("[]", "[]\n")


class Kube:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.paths: list[str] = []

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.paths.append(path)
        return self.obj


def test_the_command_reads_the_blueprint_and_exits_1_when_it_failed_to_compile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube = Kube(three_tier())
    args = argparse.Namespace(name="three-tier", namespace="shop", output=None)
    assert asyncio.run(cli_runs.deps(kube, args)) == 0  # type: ignore[arg-type]
    assert kube.paths == ["/apis/stead.dev/v1alpha1/namespaces/shop/blueprints/three-tier"]
    assert len(capsys.readouterr().out.splitlines()) == 10
    failing = Kube({"metadata": {"name": "bad"}, "status": {"state": "Error", "errors": ["boom"]}})
    assert asyncio.run(cli_runs.deps(failing, args)) == 1  # type: ignore[arg-type]


def test_the_plurals_of_the_paths_are_the_models() -> None:
    assert {r.kind: r.plural for r in (APP, ACTIONRUN, BLUEPRINT)} == PLURALS


def test_an_unreachable_cluster_or_a_missing_kubeconfig_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    assert main(["bp", "deps", "three-tier", "--kubeconfig", str(kubeconfig)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stead: ") and "127.0.0.1:1" in err and len(err.splitlines()) == 1, err
    assert main(["actionrun", "logs", "r", "--kubeconfig", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stead: no usable kubeconfig: ") and len(err.splitlines()) == 1, err
