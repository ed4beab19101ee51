"""`stead graph`: each action against the shared fake API server (what it reads, what it writes, what it prints),
fuel-library's published task file uploaded and downloaded unchanged, refusals as one line on stderr, the run's
tree (plain and rich), and a start-up without heavy imports."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cli import _parser, canonical_argv
from operators.environment.models import ENVIRONMENT
from operators.graphs import DEPLOYMENT_GRAPH, GRAPH_RUN, load_file, load_tasks, merge_graphs
from operators.graphs import cli as graph_cli
from operators.graphs import cli_status as graph_status
from operators.graphs import views as graph_views
from operators.runtime.kube.client import ApiError, custom_path
from tests.unit.fakeapi import FakeApi, Request
from tests.unit.graphs.support import FUEL_LIBRARY

NS = "demo"
ROOT = Path(__file__).resolve().parents[3]
GRAPHS = custom_path(DEPLOYMENT_GRAPH.plural, NS)
RUNS = custom_path(GRAPH_RUN.plural, NS)

RELEASE_TASKS = """\
- id: deploy_start
  type: stage
- id: deploy_end
  type: stage
  requires: [deploy_start]
- id: netconfig
  type: puppet
  version: 2.1.0
  roles: '*'
  requires: [deploy_start]
  required_for: [deploy_end]
  parameters: {puppet_manifest: /etc/puppet/netconfig.pp, timeout: 300}
"""
PLUGIN_TASKS = """\
- id: lma-collector
  type: shell
  version: 2.1.0
  role: [controller]
  requires: [netconfig]
  parameters: {cmd: /usr/bin/lma-setup, timeout: 60}
"""
ENV_TASKS = """\
- id: netconfig
  type: shell
  version: 2.1.0
  roles: ['*']
  cross-depends:
    - name: /^(primary-)?database$/
      role: self
  parameters: {cmd: echo env-netconfig}
  custom_key: kept
"""


@pytest.fixture
def seeded(kube: FakeApi) -> FakeApi:
    kube.add(custom_path(ENVIRONMENT.plural, NS, "env-1"), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
        "spec": {"release": "r1", "plugins": ["lma"],
                 "nodes": [{"name": "node-1", "roles": ["controller"]}, {"name": "node-2", "roles": ["compute"]}]}})
    return kube


def run(kube: FakeApi, *argv: str, **settings: Any) -> int:
    words = canonical_argv(["graph", *argv])
    args = _parser(words).parse_args(words)
    assert args.func.__name__ == "_run_command"
    for key, value in settings.items():
        setattr(args, key, value)
    return asyncio.run(graph_cli.dispatch(kube, args))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def graphs(kube: FakeApi) -> dict[str, dict[str, Any]]:
    return {path.rsplit("/", 1)[1]: obj for path, obj in kube.objects.items() if path.startswith(GRAPHS + "/")}


def test_the_plurals_agree_with_the_models() -> None:
    plurals = (DEPLOYMENT_GRAPH.plural, GRAPH_RUN.plural, ENVIRONMENT.plural)
    assert plurals == (graph_cli.GRAPHS, graph_cli.RUNS, graph_cli.ENVIRONMENTS)


def test_the_graph_command_imports_nothing_heavy() -> None:
    """`operators.graphs` imports the whole engine; `stead graph ...` parses without it (operators.cli.light_import)."""
    script = ("import sys, operators.cli as c\n"
              "for argv in (['graph', 'upload', '--env', 'e', '--file', 'x'], ['graph', 'status', 'r'],"
              " ['graph', 'execute', '--env', 'e', '-t', 'a', 'b', '--dry-run', '-f', '-S', 'a:b']):\n"
              "    w = c.canonical_argv(argv)\n    c._parser(w).parse_args(w)\n"
              "print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    heavy = ("pydantic", "kopf", "aiohttp", "kubernetes", "rich", "yaml", "yaql", "operators.graphs.models",
             "operators.graphs.api", "operators.runtime.kube.client", "operators.catalog")
    loaded = {m for m in done.stdout.split() if any(m == h or m.startswith(h + ".") for h in heavy)}
    assert loaded == set()
    assert "operators.graphs.cli" in done.stdout.split()


def test_stead_help_lists_the_graph_command() -> None:
    from operators.cli import commands_table

    assert any(line.startswith("graph ") for line in commands_table().splitlines())


# --- upload and download ---------------------------------------------------------------------------------


def test_fuel_librarys_published_file_uploads_and_downloads_unchanged(seeded: FakeApi, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "upload", "--release", "r1", "--file", str(FUEL_LIBRARY), "-n", NS) == 0
    assert "deploymentgraph/release-r1-default created: the 'default' graph of release r1, 21 tasks" in \
        capsys.readouterr().out
    stored = graphs(seeded)["release-r1-default"]
    assert (stored["apiVersion"], stored["kind"]) == ("stead.dev/v1alpha1", "DeploymentGraph")
    assert stored["spec"]["release"] == "r1" and stored["spec"]["type"] == "default"
    assert len(stored["spec"]["tasks"]) == 21
    assert "crossDepends" in stored["spec"]["tasks"][0]  # camelCase in the object, as the CRD has it

    out = tmp_path / "release.yaml"
    assert run(seeded, "download", "--env", "env-1", "--release", "--file", str(out), "-n", NS) == 0
    assert "(21 tasks)" in capsys.readouterr().err
    assert load_tasks(out.read_text()) == load_file(FUEL_LIBRARY)
    downloaded = yaml.safe_load(out.read_text())
    assert downloaded[0]["cross-depends"] == [{"name": "/^(primary-)?database$/"}]  # Fuel's spelling back


def test_a_second_upload_of_an_owner_and_type_updates_the_graph_there_is(seeded: FakeApi, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "upload", "--env", "env-1", "--file", str(write(tmp_path, "a.yaml", ENV_TASKS)), "-n",
               NS, "--name", "Env fixes") == 0
    assert run(seeded, "upload", "-e", "env-1", "-f", str(write(tmp_path, "b.yaml", PLUGIN_TASKS)), "-n", NS) == 0
    out = capsys.readouterr().out
    assert "environment-env-1-default created" in out and "environment-env-1-default updated" in out
    [name] = graphs(seeded)
    spec = graphs(seeded)[name]["spec"]
    assert [t["id"] for t in spec["tasks"]] == ["lma-collector"] and spec["name"] == "Env fixes"
    assert seeded.count("POST") == 1 and seeded.count("PATCH") == 1
    assert run(seeded, "upload", "-e", "env-1", "-t", "Up_Grade", "-f", str(tmp_path / "a.yaml"), "-n", NS) == 0
    assert sorted(graphs(seeded)) == ["environment-env-1-default", "environment-env-1-up-grade"]
    assert graphs(seeded)["environment-env-1-up-grade"]["spec"]["type"] == "Up_Grade"


def test_upload_takes_a_directory_of_task_files_in_path_order(seeded: FakeApi, tmp_path: Path) -> None:
    write(tmp_path, "mods/b/tasks.yaml", PLUGIN_TASKS)
    write(tmp_path, "mods/a/tasks.yaml", RELEASE_TASKS)
    assert run(seeded, "upload", "--plugin", "lma", "--dir", str(tmp_path / "mods"), "-n", NS) == 0
    tasks = graphs(seeded)["plugin-lma-default"]["spec"]["tasks"]
    assert [t["id"] for t in tasks] == ["deploy_start", "deploy_end", "netconfig", "lma-collector"]


def test_upload_refuses_what_the_webhook_would_in_one_line_and_writes_nothing(
        seeded: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    twice = write(tmp_path, "twice.yaml", PLUGIN_TASKS + PLUGIN_TASKS)
    assert run(seeded, "upload", "--release", "r1", "--file", str(twice), "-n", NS) == 1
    err = capsys.readouterr().err
    assert err.startswith("stead graph: ") and "duplicate task id 'lma-collector'" in err and err.count("\n") == 1
    bad = write(tmp_path, "bad.yaml", "- id: x\n  type: teleport\n")
    assert run(seeded, "upload", "--release", "r1", "--file", str(bad), "-n", NS) == 1
    assert "tasks[0] (x).type" in capsys.readouterr().err
    assert run(seeded, "upload", "--release", "r1", "--file", str(tmp_path / "none.yaml"), "-n", NS) == 1
    assert "no such file" in capsys.readouterr().err
    assert run(seeded, "upload", "--env", "nope", "--file", str(write(tmp_path, "ok.yaml", PLUGIN_TASKS)), "-n",
               NS) == 1
    assert capsys.readouterr().err == ("stead graph: no environment 'nope' in namespace demo (environments here: "
                                       "env-1)\n")
    assert graphs(seeded) == {}


def test_the_owner_flags_are_exclusive_and_one_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["graph", "upload", "--file", "x"], ["graph", "upload", "--env", "a", "--release", "b", "-f", "x"],
                 ["graph", "download", "--env", "e", "--release", "--plugins"],
                 ["graph", "execute", "--env", "e", "--dry-run", "--noop"], ["graph", "execute", "--env", "e",
                                                                              "-S", ":"]):
        with pytest.raises(SystemExit):
            _parser(argv).parse_args(argv)
    capsys.readouterr()


def test_download_merges_release_plugins_and_environment_or_gives_one_level(
        seeded: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag, owner, text in (("--release", "r1", RELEASE_TASKS), ("--plugin", "lma", PLUGIN_TASKS),
                              ("--plugin", "off", "- {id: unused, type: shell}\n"),
                              ("--env", "env-1", ENV_TASKS)):
        assert run(seeded, "upload", flag, owner, "--file", str(write(tmp_path, f"{owner}.yaml", text)), "-n",
                   NS) == 0
    capsys.readouterr()
    assert run(seeded, "download", "--env", "env-1", "-n", NS) == 0
    merged = load_tasks(capsys.readouterr().out)
    expected = merge_graphs(load_tasks(RELEASE_TASKS), [("lma", load_tasks(PLUGIN_TASKS))], load_tasks(ENV_TASKS))
    assert merged == expected.tasks
    assert [t.id for t in merged] == ["deploy_start", "deploy_end", "netconfig", "lma-collector"]
    assert merged[2].type == "shell" and merged[2].custom == {"custom_key": "kept"}  # whole-task replacement
    for flag, ids in (("--release", ["deploy_start", "deploy_end", "netconfig"]), ("--plugins", ["lma-collector"]),
                      ("--env-only", ["netconfig"]), ("--all", [t.id for t in merged])):
        assert run(seeded, "download", "-e", "env-1", flag, "-n", NS) == 0
        assert [t.id for t in load_tasks(capsys.readouterr().out)] == ids, flag
    assert run(seeded, "download", "-e", "env-1", "-t", "other", "-n", NS) == 0
    assert capsys.readouterr().out == "[]\n"
    assert run(seeded, "download", "-e", "nope", "-n", NS) == 1
    assert "no environment 'nope'" in capsys.readouterr().err


def test_two_plugins_with_the_same_task_are_a_one_line_refusal(seeded: FakeApi, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    seeded.objects[custom_path(ENVIRONMENT.plural, NS, "env-1")]["spec"]["plugins"] = ["lma", "off"]
    for owner in ("lma", "off"):
        assert run(seeded, "upload", "-p", owner, "-f", str(write(tmp_path, "p.yaml", PLUGIN_TASKS)), "-n", NS) == 0
    capsys.readouterr()
    assert run(seeded, "download", "-e", "env-1", "-n", NS) == 1
    assert capsys.readouterr().err == "stead graph: plugins 'lma' and 'off' both define task 'lma-collector'\n"


# --- list and delete --------------------------------------------------------------------------------------


def test_list_shows_name_type_owner_and_tasks(seeded: FakeApi, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "list", "-n", NS) == 0
    assert capsys.readouterr().err == "no deployment graphs in namespace demo\n"
    for flag, owner in (("--release", "r1"), ("--release", "r2"), ("--env", "env-1"), ("--plugin", "lma")):
        assert run(seeded, "upload", flag, owner, "-f", str(write(tmp_path, "t.yaml", RELEASE_TASKS)), "-n", NS) == 0
    capsys.readouterr()
    assert run(seeded, "list", "-n", NS) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "OWNER", "TASKS"]
    assert sorted(line.split() for line in lines[1:]) == [
        ["environment-env-1-default", "default", "environment/env-1", "3"],
        ["plugin-lma-default", "default", "plugin/lma", "3"],
        ["release-r1-default", "default", "release/r1", "3"],
        ["release-r2-default", "default", "release/r2", "3"]]
    assert run(seeded, "list", "--env", "env-1", "-n", NS) == 0
    assert "release-r2" not in capsys.readouterr().out
    assert run(seeded, "list", "-n", NS, "-o", "json") == 0
    assert len(yaml.safe_load(capsys.readouterr().out)) == 4


def test_delete_removes_the_graph_of_an_owner_and_type(seeded: FakeApi, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run(seeded, "upload", "--env", "env-1", "-t", "fix", "-f", str(write(tmp_path, "t.yaml", ENV_TASKS)),
               "-n", NS) == 0
    assert run(seeded, "delete", "--env", "env-1", "-n", NS) == 1
    assert capsys.readouterr().err == ("stead graph: environment env-1 has no 'default' graph in namespace demo "
                                       "(its graph types: fix)\n")
    assert run(seeded, "delete", "--env", "env-1", "--type", "fix", "-n", NS) == 0
    assert "deploymentgraph/environment-env-1-fix deleted" in capsys.readouterr().out
    assert graphs(seeded) == {}
    assert seeded.received[-1].body["preconditions"]["uid"]


# --- execute and status -----------------------------------------------------------------------------------


def with_types(kube: FakeApi, *types: str) -> None:
    """The release's graphs of these types (a run names types the environment has)."""
    for graph_type in types:
        kube.add(f"{GRAPHS}/release-r1-{graph_type}", {"apiVersion": "stead.dev/v1alpha1", "kind": "DeploymentGraph",
                                                     "spec": {"release": "r1", "type": graph_type, "tasks": []}})


def test_execute_creates_a_graph_run_and_prints_its_name(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default", "up_grade")
    assert run(seeded, "execute", "--env", "env-1", "--type", "default", "up_grade", "--node", "node-1",
               "--task", "netconfig", "lma-collector", "--subgraph", "netconfig:deploy_end", ":/^post/", "--force",
               "--dry-run", "-n", NS) == 0
    name = capsys.readouterr().out.strip()
    assert name.startswith("env-1-default-up-grade-")
    made = seeded.objects[f"{RUNS}/{name}"]
    assert (made["apiVersion"], made["kind"]) == ("stead.dev/v1alpha1", "GraphRun")
    assert made["spec"] == {
        "environment": "env-1",
        "graphs": [{"type": t, "nodes": ["node-1"], "tasks": ["netconfig", "lma-collector"]}
                   for t in ("default", "up_grade")],
        "dryRun": True, "force": True,
        "subgraphs": [{"start": ["netconfig"], "end": ["deploy_end"]}, {"start": [], "end": ["/^post/"]}]}
    from operators.graphs import GraphRunSpec

    GraphRunSpec.model_validate(made["spec"])  # what the CRD takes
    assert run(seeded, "execute", "-e", "env-1", "--noop", "--name", "mine", "-n", NS) == 0
    assert capsys.readouterr().out == "mine\n"
    assert seeded.objects[f"{RUNS}/mine"]["spec"] == {"environment": "env-1", "graphs": [{"type": "default"}],
                                                      "noop": True}


def test_execute_takes_fuels_node_ranges_and_refuses_unknown_nodes(seeded: FakeApi,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default")
    assert run(seeded, "execute", "-e", "env-1", "-S", "netconfig/node-1,node-2:deploy_end/node-2", "--name", "r",
               "-n", NS) == 0
    assert seeded.objects[f"{RUNS}/r"]["spec"]["subgraphs"] == [
        {"start": ["netconfig"], "startNodes": ["node-1", "node-2"], "end": ["deploy_end"], "endNodes": ["node-2"]}]
    capsys.readouterr()
    assert run(seeded, "execute", "-e", "env-1", "-S", "netconfig/node-7", "-n", NS) == 1
    assert capsys.readouterr().err == ("stead graph: --subgraph: node-7 not in environment env-1 (its nodes: node-1, "
                                       "node-2); nothing run\n")


def test_execute_refusals_are_one_line(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default")
    assert run(seeded, "execute", "-e", "env-1", "-N", "node-1", "node-9", "-n", NS) == 1
    assert capsys.readouterr().err == ("stead graph: --node node-9: not in environment env-1 (its nodes: node-1, "
                                       "node-2); nothing run\n")
    seeded.fail_with(ApiError(409, 'admission webhook "graphruns.stead.dev" denied the request: spec.environment: '
                                   "GraphRun r0 runs on environment env-1: one run at a time"), "POST", "/graphruns")
    assert run(seeded, "execute", "-e", "env-1", "-n", NS) == 1
    err = capsys.readouterr().err
    assert err.startswith("stead graph: admission webhook") and "GraphRun r0 runs on environment env-1" in err
    assert not any(p.startswith(RUNS + "/") for p in seeded.objects)


def test_execute_of_a_type_the_environment_has_no_graph_of_is_refused_naming_its_types(
        seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to create a run that planned nothing and ended `Succeeded 0/0`, exit code 0."""
    with_types(seeded, "default", "upgrade")
    seeded.add(f"{GRAPHS}/plugin-off-other", {"spec": {"plugin": "off", "type": "other", "tasks": []}})  # not enabled
    assert run(seeded, "execute", "-e", "env-1", "-t", "default", "defualt", "-f", "-n", NS) == 1
    assert capsys.readouterr().err == (
        "stead graph: --type defualt: environment env-1 has no graph of type 'defualt' (its graph types: default, "
        "upgrade; a type is that of a DeploymentGraph of its release, an enabled plugin or its own: stead graph list "
        "--env env-1); nothing run\n")
    assert not any(p.startswith(RUNS + "/") for p in seeded.objects)


def status(state: str, progress: str, **more: Any) -> dict[str, Any]:
    return {"state": state, "progress": progress, "plan": {"instances": 4, "planned": 3}, **more,
            "nodes": [
                {"name": "", "tasks": [{"task": "deploy_end", "state": "noop", "reason": "stage"}]},
                {"name": "node-1", "tasks": [
                    {"task": "netconfig", "state": "success", "attempts": 1, "started": "2026-01-01T00:00:00Z",
                     "finished": "2026-01-01T00:00:12Z"},
                    {"task": "lma-collector", "state": "failure" if state == "Failed" else "running",
                     "attempts": 2, "reason": "exit code 3" if state == "Failed" else None,
                     "output": "setting up\nno collector" if state == "Failed" else None}]},
                {"name": "node-2", "tasks": [{"task": "netconfig", "state": "success", "attempts": 1}]}]}


def graph_run(name: str, state_: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "stead.dev/v1alpha1", "kind": "GraphRun",
                           "metadata": {"name": name, "namespace": NS},
                           "spec": {"environment": "env-1", "graphs": [{"type": "default"}]}}
    if state_ is not None:
        obj["status"] = state_
    return obj


def test_execute_follow_shows_the_tree_until_the_run_ends_and_exits_by_its_outcome(
        seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default")
    for final, code in (("Succeeded", 0), ("Failed", 1)):
        answers = iter([graph_run("r", None), graph_run("r", status("Running", "1/3")),
                        graph_run("r", status(final, "3/3" if final == "Succeeded" else "2/3",
                                              reason="exit code 3" if final == "Failed" else None,
                                              failedTask="lma-collector@node-1" if final == "Failed" else None))])
        last: list[dict[str, Any]] = []

        def serve(request: Request, answers: Any = answers, last: list[dict[str, Any]] = last) -> dict[str, Any]:
            if request.method == "GET":
                last[:] = [next(answers, last[0] if last else {})]
                return last[0]
            return graph_run("r", None)

        seeded.answer(f"{RUNS}/r", serve)
        seeded.answer(RUNS, lambda request: graph_run("r", None))
        assert run(seeded, "execute", "-e", "env-1", "--name", "r", "-f", "-n", NS, interval=0) == code
        captured = capsys.readouterr()
        assert "graphrun/r created" in captured.err
        shown = captured.out
        assert shown.count("graphrun/r  environment env-1  types default") == 3
        assert "(no plan yet)" in shown and "progress [" in shown
        assert "  └─ lma-collector  running  attempts 2" in shown
        if final == "Failed":
            assert "  └─ lma-collector  failure  attempts 2  exit code 3" in shown
            assert "     | no collector" in shown
            assert shown.rstrip().endswith("reason: lma-collector@node-1 exit code 3")


def test_status_prints_the_tree_and_a_missing_run_names_the_runs(seeded: FakeApi,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    seeded.add(f"{RUNS}/r1", graph_run("r1", status("Running", "1/3", omitted=5)))
    assert run(seeded, "status", "r1", "-n", NS) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "graphrun/r1  environment env-1  types default  Running"
    assert lines[1:4] == ["(anchors)", "  └─ deploy_end  noop  stage", "node-1"]
    assert lines[4] == "  ├─ netconfig  success  attempts 1  12s"
    assert "progress [######..............] 1/3" in lines
    assert "(5 more task instances not listed in the status)" in lines
    assert run(seeded, "status", "r1", "-n", NS, "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out)["progress"] == "1/3"
    assert run(seeded, "status", "r9", "-n", NS) == 1
    assert capsys.readouterr().err == "stead graph: no graph run 'r9' in namespace demo (runs here: r1)\n"


def test_the_terminal_view_is_a_tree_of_nodes_with_a_progress_bar(seeded: FakeApi) -> None:
    from rich.console import Console

    seeded.add(f"{RUNS}/r1", graph_run("r1", status("Failed", "2/3", reason="exit code 3",
                                                    failedTask="lma-collector@node-1")))
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    words = canonical_argv(["graph", "status", "r1", "-n", NS])
    args = _parser(words).parse_args(words)
    assert asyncio.run(graph_status.status(seeded, args, console=console)) == 1
    text = console.export_text()
    assert "graphrun/r1  environment env-1  types default" in text and "✖ Failed" in text
    for expected in ("node-1  2/2", "node-2  1/1", "✔ success", "✖ failure", "exit code 3", "| no collector",
                     "2/3", "66%", "reason: lma-collector@node-1 exit code 3"):
        assert expected in text, expected


def test_a_failed_run_shows_the_message_that_says_what_to_do_not_the_short_reason(
        seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    message = ("spec.ssh.privateKey of the environment: Secret k: service account demo/default may not read it "
               "(grant it get on Secret k)")
    seeded.add(f"{RUNS}/r1", graph_run("r1", {"state": "Failed", "reason": "Secret k not readable", "conditions": [
        {"type": "Ready", "status": "False", "reason": "SecretNotFound", "message": message},
        {"type": "Stalled", "status": "True", "reason": "SecretNotFound", "message": message}]}))
    assert run(seeded, "status", "r1", "-f", "-n", NS, interval=0) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"reason: {message}") and "not readable" not in out


def test_upload_of_a_file_with_a_yaml_error_names_the_file_and_line(seeded: FakeApi, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    broken = write(tmp_path, "tasks.yaml", PLUGIN_TASKS + "- id: x\n  type: shell\n   requires: [a]\n")
    assert run(seeded, "upload", "--release", "r1", "--file", str(broken), "-n", NS) == 1
    assert capsys.readouterr().err == f"stead graph: {broken}:9:12: not YAML: mapping values are not allowed here\n"
    assert graphs(seeded) == {}


def test_upload_of_a_graph_whose_tasks_wait_in_a_cycle_or_whose_condition_cannot_run_is_refused(
        seeded: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    looped = write(tmp_path, "looped.yaml", "- {id: a, type: shell, role: '*', requires: [b]}\n"
                                            "- {id: b, type: shell, role: '*', required_for: [a], requires: [a]}\n")
    assert run(seeded, "upload", "--release", "r1", "--file", str(looped), "-n", NS) == 1
    assert capsys.readouterr().err.endswith("of role self): a -> b -> a\n")
    unquoted = write(tmp_path, "unquoted.yaml",
                     "- id: a\n  type: shell\n  condition: {yaql_exp: '$.node.name = cmp-1'}\n")
    assert run(seeded, "upload", "--release", "r1", "--file", str(unquoted), "-n", NS) == 1
    assert capsys.readouterr().err == (
        f"stead graph: {unquoted}[0] (a).condition: yaqlExp '$.node.name = cmp-1': the bare word 'cmp' is an operand "
        "of a subtraction (yaql reads 'cmp-1' as a subtraction, which cannot take a string): quote the name "
        "('cmp-1')\n")
    assert graphs(seeded) == {}


def test_plan_asks_the_operator_for_a_dry_run_prints_each_nodes_tasks_in_order_and_the_outside_edges(
        seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default")
    planned = {"state": "Succeeded", "progress": "0/3", "plan": {
        "instances": 5, "planned": 3, "skipped": 1, "noop": 1, "edges": 4, "outsideSubset": 2,
        "outsideEdges": [{"type": "default", "dependent": "app@node-2", "dependency": "db@node-1"}]},
        "nodes": [{"name": "", "tasks": [{"task": "deploy_end", "state": "noop", "reason": "stage (structure)"}]},
                  {"name": "node-2", "tasks": [{"task": "netconfig", "state": "planned"},
                                               {"task": "app", "state": "planned"},
                                               {"task": "extra", "state": "skipped", "reason": "condition false"}]}]}
    made: list[dict[str, Any]] = []

    def operator(request: Request) -> dict[str, Any]:  # the dry run, planned as soon as it is created
        obj = {**request.body, "metadata": {**request.body["metadata"], "name": "env-1-plan-1", "namespace": NS}}
        seeded.objects[f"{RUNS}/env-1-plan-1"] = {**obj, "status": planned}
        made.append(obj)
        return obj

    seeded.answer(RUNS, operator)
    assert run(seeded, "plan", "-e", "env-1", "-N", "node-2", "-n", NS) == 0
    assert made[0]["spec"] == {"environment": "env-1", "graphs": [{"type": "default", "nodes": ["node-2"]}],
                               "dryRun": True}
    assert made[0]["metadata"]["generateName"] == "env-1-plan-"
    assert capsys.readouterr().out.splitlines() == [
        "environment env-1, types default: the plan (nothing ran)",
        "(anchors: stages and groups, on no node)",
        "    1. deploy_end  noop  stage (structure)",
        "node-2",
        "    1. netconfig  planned",
        "    2. app  planned",
        "    3. extra  skipped  condition false",
        "3 task instances run, 1 skipped, 1 noop; 4 dependencies",
        "2 dependencies on nodes outside the subset, counted as satisfied (those nodes are taken as their last run "
        "left them):",
        "  app@node-2 waits for db@node-1",
        "  (and 1 more)"]
    assert f"{RUNS}/env-1-plan-1" not in seeded.objects  # the dry run is deleted once read
    assert run(seeded, "plan", "-e", "env-1", "-t", "nope", "-n", NS) == 1
    assert "no graph of type 'nope' (its graph types: default;" in capsys.readouterr().err


def test_plan_that_fails_says_why_and_exits_1(seeded: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    with_types(seeded, "default")
    message = "task 'a' on node-1: condition: function 'foo' does not exist (NoFunctionRegisteredException)"

    def operator(request: Request) -> dict[str, Any]:
        obj = {**request.body, "metadata": {**request.body["metadata"], "name": "p", "namespace": NS}}
        seeded.objects[f"{RUNS}/p"] = {**obj, "status": {"state": "Failed", "reason": message, "conditions": [
            {"type": "Stalled", "status": "True", "reason": "PlanFailed", "message": message}]}}
        return obj

    seeded.answer(RUNS, operator)
    assert run(seeded, "plan", "-e", "env-1", "-n", NS) == 1
    assert capsys.readouterr().out.splitlines() == ["environment env-1, types default: no plan", f"reason: {message}"]


def test_a_dry_run_shows_what_it_planned_not_an_empty_bar(seeded: FakeApi) -> None:
    from rich.console import Console

    assert graph_views.progress_bar("3 planned (dry run)") == "3 planned (dry run)"  # was "[....] 0/0"
    seeded.add(f"{RUNS}/dry", graph_run("dry", status("Succeeded", "3 planned (dry run)")))
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    words = canonical_argv(["graph", "status", "dry", "-n", NS])
    assert asyncio.run(graph_status.status(seeded, _parser(words).parse_args(words), console=console)) == 0
    text = console.export_text()
    assert "3 planned (dry run)" in text and "0/0" not in text and "0%" not in text
