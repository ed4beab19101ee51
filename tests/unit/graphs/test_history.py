"""History per node and task across runs (`operators.graphs.history`): the entries a run's records give, the
LMDB store's bounds, idempotence and paging, CSV, and its API route; puppet's noop report
(`pipelines.executors.ssh.noop`) and what a run's status shows of it."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import lmdb
import pytest

from operators.config.api import ConfigApi
from operators.config.repository import ConfigRepository
from operators.environment.models import ENVIRONMENT
from operators.graphs import GRAPH_RUN
from operators.graphs.api import GraphsApi
from operators.graphs.history import (
    CSV_COLUMNS,
    HistoryEntry,
    HistoryStore,
    Query,
    close_all,
    decode_token,
    drop_others,
    entries_from_records,
    history_path,
    to_csv,
)
from operators.graphs.planner import STATUS_NOOP_RESOURCES, instances_status
from operators.runtime.api.auth import Access
from operators.runtime.api.extension import ExtensionSettings
from operators.runtime.kube.client import custom_path
from operators.runtime.serving.http import Request
from pipelines.executors.ssh.noop import MAX_RESOURCES, NoopReport, resource_of
from tests.unit.fakeapi import FakeApi
from tests.unit.graphs.support import NamespaceAuth

NS = "team"
INDEX = {"default:hiera:node-1": ["hiera", "node-1"], "default:hiera:node-2": ["hiera", "node-2"],
         "default:netconfig:node-1": ["netconfig", "node-1"], "default:deploy_end": ["deploy_end", ""],
         "post.2:report:node-1": ["report", "node-1"], "default:skip:node-1": ["skip", "node-1"]}
PLANNED = {sid: {"state": "planned"} for sid in INDEX} | {"default:deploy_end": {"state": "noop"},
                                                          "default:skip:node-1": {"state": "skipped"}}

# What `puppet apply --noop` prints (Puppet 4+ and Puppet 3's forms), with a colour code as a terminal gets.
PUPPET_NOOP = """\
Notice: Compiled catalog for node-1 in environment production in 0.03 seconds
Notice: /Stage[main]/Main/File[/etc/motd]/content: current_value '{md5}d41d8cd98f00b204e9800998ecf8427e', \
should be '{md5}9a0364b9e99bb480dd25e1f0284c8555' (noop)
Notice: /Stage[main]/Main/File[/etc/motd]/mode: current_value '0644', should be '0600' (noop)
\x1b[mNotice: /Stage[main]/Osnailyfacter::Netconfig/L23network::L3::Ifconfig[br-mgmt]/\
File[/etc/network/ifcfg-br[1]]/ensure: current_value 'absent', should be 'file' (noop)\x1b[0m
Notice: /Stage[main]/Main/Exec[reload]/returns: is notrun, should be 0 (noop)
Notice: Class[Main]: Would have triggered 'refresh' from 3 events
Notice: Stage[main]: Would have triggered 'refresh' from 1 event
Notice: Applied catalog in 0.02 seconds
"""


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    yield
    close_all()


def record(state: str, started: str = "2026-01-01T10:00:00.250+00:00", finished: str = "2026-01-01T10:00:02.000+00:00",
           **more: Any) -> dict[str, Any]:
    return {"state": state, "startedAt": started, "finishedAt": finished, "attempts": 1, **more}


def entry(seq_run: str, task: str = "hiera", node: str = "node-1", state: str = "success",
          graph_type: str = "default") -> HistoryEntry:
    return HistoryEntry(seq_run, f"uid-{seq_run}", f"{graph_type}:{task}:{node}", graph_type, task, node, state,
                        "2026-01-01T10:00:00Z", "2026-01-01T10:00:01Z", 1, 1.0)


# --- the entries a run gives ------------------------------------------------------------------------------


def test_the_finished_instances_the_plan_ran_are_entries_with_type_duration_and_reason() -> None:
    records = {
        "default:hiera:node-1": record("success"),
        "default:hiera:node-2": record("failure", message="exit code 3", attempts=3),
        "default:netconfig:node-1": record("running", finished=""),
        "default:deploy_end": record("success"),  # a structure step: not work
        "default:skip:node-1": record("success"),  # skipped in the plan
        "post.2:report:node-1": record("aborted", message="run aborted"),
    }
    found = {e.step: e for e in entries_from_records("deploy-1", "u1", INDEX, records, PLANNED)}
    assert sorted(found) == ["default:hiera:node-1", "default:hiera:node-2", "post.2:report:node-1"]
    ok = found["default:hiera:node-1"]
    assert (ok.run, ok.graph_type, ok.task, ok.node, ok.state, ok.reason) == ("deploy-1", "default", "hiera",
                                                                              "node-1", "success", None)
    assert ok.duration == 1.75 and ok.started == "2026-01-01T10:00:00Z" and ok.finished == "2026-01-01T10:00:02Z"
    failed = found["default:hiera:node-2"]
    assert (failed.state, failed.attempts, failed.reason) == ("failure", 3, "exit code 3")
    assert found["post.2:report:node-1"].graph_type == "post.2"


def test_a_noop_report_is_kept_bounded_with_its_exact_count() -> None:
    resources = [f"File[/tmp/{i}] (content)" for i in range(80)]
    records = {"default:hiera:node-1": record("success", details={"noop": {"wouldChange": 80,
                                                                           "resources": resources}})}
    (found,) = entries_from_records("r", "u", INDEX, records, PLANNED)
    assert found.noop == {"wouldChange": 80, "resources": resources[:50], "more": 30}


# --- the store --------------------------------------------------------------------------------------------


def test_an_instance_is_recorded_once_however_often_its_run_is_reported(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    assert store.record([entry("r1"), entry("r1", node="node-2")]) == 2
    assert store.record([entry("r1"), entry("r1", node="node-2"), entry("r1", task="netconfig")]) == 1
    assert store.count() == 3
    assert [e.seq for e in store.read(Query()).entries] == [3, 2, 1]  # newest first


def test_each_task_on_each_node_keeps_its_last_runs_and_the_environment_its_last_entries(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h", per_instance=3, max_entries=10)
    for n in range(5):
        store.record([entry(f"r{n}"), entry(f"r{n}", node="node-2")])
    runs = [e.run for e in store.read(Query(node="node-1")).entries]
    assert runs == ["r4", "r3", "r2"]  # the oldest two of hiera@node-1 are gone
    assert store.count() == 6
    # a dropped instance may be recorded again (its key went with it), a kept one not
    assert store.record([entry("r3")]) == 0
    for n in range(5, 9):
        store.record([entry(f"r{n}", task=f"t{n}"), entry(f"r{n}", task=f"u{n}")])
    assert store.count() == 10  # the total bound drops the oldest entries first
    assert [e.run for e in store.read(Query(task="hiera")).entries] == ["r4", "r4"]


def test_pages_follow_one_another_with_the_filters_until_the_last(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    for n in range(7):
        store.record([entry(f"r{n}", state="failure" if n % 2 else "success"), entry(f"r{n}", node="node-2")])
    seen: list[str] = []
    token: str | None = None
    while True:
        page = store.read(Query(node="node-1", limit=2, before=None if token is None else decode_token(token)))
        seen += [e.run for e in page.entries]
        token = page.next_token
        if token is None:
            break
    assert seen == [f"r{n}" for n in range(6, -1, -1)]
    failures = store.read(Query(state="failure", limit=100)).entries
    assert [e.run for e in failures] == ["r5", "r3", "r1"]
    assert [e.run for e in store.read(Query(run="r2")).entries] == ["r2", "r2"]
    assert store.read(Query(limit=14)).next_token is None
    with pytest.raises(ValueError, match="not a continue token"):
        decode_token("12")


def test_a_missing_history_reads_empty_and_is_not_created(tmp_path: Path) -> None:
    path = history_path(tmp_path, NS, "env", "uid-a")
    assert HistoryStore(path, create=False).read(Query()).entries == []
    assert not path.exists()
    with pytest.raises(ValueError, match="environment"):
        history_path(tmp_path, NS, "../x", "uid-a")
    with pytest.raises(ValueError, match="uid"):
        history_path(tmp_path, NS, "env", "../a")


def test_an_environment_of_the_same_name_again_sees_none_of_the_history_before_it(tmp_path: Path) -> None:
    """A namespace deleted and re-created may be another tenant's: the history is the Environment's (uid)."""
    before = history_path(tmp_path, NS, "env", "uid-a")
    assert drop_others(before) == []
    HistoryStore(before).record([entry("r1"), entry("r2", task="netconfig", state="failure")])
    again = history_path(tmp_path, NS, "env", "uid-b")
    assert HistoryStore(again, create=False).read(Query()).entries == []  # a reader of the new one
    assert drop_others(again) == ["uid-a"]  # its first record drops the other's, files and handle
    assert not before.exists()
    store = HistoryStore(again)
    store.record([entry("r3")])
    assert [e.run for e in store.read(Query()).entries] == ["r3"]
    assert HistoryStore(before, create=False).read(Query()).entries == []  # not served from a kept handle


def test_dropping_the_other_histories_closes_their_handles_and_removes_the_layout_before_uids(
        tmp_path: Path) -> None:
    old = history_path(tmp_path, NS, "env", "uid-a")
    store = HistoryStore(old)
    store.record([entry("r1")])
    legacy = old.parent / "data.mdb"  # the layout before uids: the files right in the directory
    legacy.write_bytes(b"")
    drop_others(history_path(tmp_path, NS, "env", "uid-b"))
    assert sorted(p.name for p in old.parent.iterdir()) == []
    with pytest.raises(lmdb.Error):  # closed: its file descriptors went with it
        store.count()


def test_csv_has_a_header_and_one_row_per_entry_quoted_as_rfc_4180() -> None:
    noop = HistoryEntry("r1", "u", "default:a:node-1", "default", "a", "node-1", "success", "2026-01-01T10:00:00Z",
                        "2026-01-01T10:00:02Z", 1, 2.5, None, {"wouldChange": 2,
                                                               "resources": ["File[/a,b] (content)", "Exec[x]"]})
    failed = HistoryEntry("r2", "u", "default:b:node-2", "default", "b", "node-2", "failure", None, None, 2, None,
                          'exit "3"\nsee logs')
    rows = list(csv.reader(io.StringIO(to_csv([noop, failed]))))
    assert rows[0] == list(CSV_COLUMNS)
    assert dict(zip(rows[0], rows[1], strict=True)) == {
        "finished": "2026-01-01T10:00:02Z", "run": "r1", "type": "default", "node": "node-1", "task": "a",
        "state": "success", "duration": "2.5", "attempts": "1", "started": "2026-01-01T10:00:00Z",
        "wouldChange": "2", "resources": "File[/a,b] (content);Exec[x]", "reason": ""}
    assert rows[2][CSV_COLUMNS.index("reason")] == 'exit "3"\nsee logs'
    assert rows[2][CSV_COLUMNS.index("wouldChange")] == "" and len(rows) == 3


# --- the API ----------------------------------------------------------------------------------------------


def _get(api: ConfigApi, path: str, query: str = "", token: str = "good") -> tuple[int, Any, dict[str, str]]:
    response = asyncio.run(api(Request("GET", path, query, {"authorization": f"Bearer {token}"}, b"")))
    body = response.body.decode() if response.content_type.startswith("text/csv") else (
        json.loads(response.body) if response.body else None)
    return response.status, body, dict(response.headers or {})


def test_the_api_pages_filters_and_exports_csv_for_who_may_list_runs(kube: FakeApi, tmp_path: Path) -> None:
    env = kube.add(custom_path(ENVIRONMENT.plural, NS, "env"), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment", "spec": {"release": "r", "nodes": []}})
    store = HistoryStore(history_path(tmp_path, NS, "env", env["metadata"]["uid"]))
    for n in range(3):
        store.record([entry(f"r{n}"), entry(f"r{n}", task="netconfig", state="failure")])
    auth = NamespaceAuth(NS, "list")
    api = ConfigApi(cast(ConfigRepository, None), auth, NS,
                    [GraphsApi(kube, auth, NS, ExtensionSettings(runs_state_dir=tmp_path))])
    path = "/api/v1/clusters/env/history/"
    status, body, _ = _get(api, path, "namespace=team&task=hiera&limit=2")
    assert status == 200, body
    assert [(e["run"], e["task"], e["state"], e["duration"]) for e in body["entries"]] == [
        ("r2", "hiera", "success", 1.0), ("r1", "hiera", "success", 1.0)]
    assert auth.checked[-1] == Access("list", GRAPH_RUN.plural, NS, "")
    status, body, _ = _get(api, path, f"namespace=team&task=hiera&limit=2&continue={body['continue']}")
    assert [e["run"] for e in body["entries"]] == ["r0"] and body["continue"] is None
    status, text, headers = _get(api, path, "namespace=team&state=failure&format=csv&limit=2")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert status == 200 and [(r["run"], r["task"]) for r in rows] == [("r2", "netconfig"), ("r1", "netconfig")]
    assert decode_token(headers["X-Continue"]) == 4  # the last row's entry: r1's netconfig
    assert _get(api, path, "namespace=other")[0] == 403  # the namespace is the tenant boundary
    assert _get(api, path, "namespace=team", token="other")[0] == 403
    status, body, _ = _get(api, "/api/v1/clusters/nope/history/", "namespace=team")
    assert status == 404 and body["notFound"] == "cluster" and "environments here: env" in body["message"]
    for query in ("state=planned", "continue=12", "limit=0", "format=xml", "task=-x"):
        status, body, _ = _get(api, path, f"namespace=team&{query}")
        assert status == 400 and query.split("=")[0] in body["message"], (query, body)
    del kube.objects[custom_path(ENVIRONMENT.plural, NS, "env")]  # the namespace deleted and made again
    kube.add(custom_path(ENVIRONMENT.plural, NS, "env"), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment", "spec": {"release": "r", "nodes": []}})
    status, body, _ = _get(api, path, "namespace=team")
    assert status == 200 and body["entries"] == []  # none of the Environment's before it


# --- puppet's noop report -----------------------------------------------------------------------------------


def test_puppets_noop_log_gives_the_resources_that_would_change_and_no_value() -> None:
    report = NoopReport()
    for line in PUPPET_NOOP.splitlines():
        report.feed(line)
    details = report.details()
    assert details == {"wouldChange": 3, "refreshes": 4, "resources": [
        "File[/etc/motd] (content, mode)", "File[/etc/network/ifcfg-br[1]] (ensure)", "Exec[reload] (returns)"]}
    assert "d41d8" not in json.dumps(details) and "0600" not in json.dumps(details)
    assert report.summary() == "3 resource(s) would change"
    assert NoopReport().summary() == "nothing would change"


def test_a_report_lists_a_bounded_number_of_resources_and_counts_all() -> None:
    report = NoopReport()
    for i in range(MAX_RESOURCES + 10):
        report.feed(f"Notice: /Stage[main]/Main/File[/tmp/{i}]/ensure: current_value 'absent', should be 'file' "
                    "(noop)")
    assert report.changes == MAX_RESOURCES + 10 and len(report.details()["resources"]) == MAX_RESOURCES
    report.feed("Notice: /Stage[main]/Main/File[/tmp/x]: not a property line (noop)")
    report.feed("Notice: " + "/Stage[main]" * 20000 + "/x: current_value 'a', should be 'b' (noop)")
    assert report.changes == MAX_RESOURCES + 11  # the long path counts, kept whole rather than parsed


def test_a_resource_is_the_last_type_and_title_of_its_path() -> None:
    assert resource_of("/Stage[main]/Main/File[/tmp/x]") == "File[/tmp/x]"
    assert resource_of("/Stage[main]/Apache::Vhost[a/B[c]]/Concat::Fragment[x]") == "Concat::Fragment[x]"
    assert resource_of("/Stage[main]/Main/File[/A/B[1]]") == "File[/A/B[1]]"


def test_a_runs_status_shows_a_noop_report_bounded() -> None:
    index = {f"default:t{i}:node-1": [f"t{i}", "node-1"] for i in range(3)}
    planned = {sid: {"task": t, "state": "planned"} for sid, (t, _) in index.items()}
    resources = [f"File[/tmp/{i}] (content)" for i in range(9)]
    records = {"default:t0:node-1": record("success", details={"noop": {"wouldChange": 9, "resources": resources}}),
               "default:t1:node-1": record("success", details={"noop": {"wouldChange": 0, "resources": []}}),
               "default:t2:node-1": record("success")}
    nodes, _ = instances_status(index, records, planned, 100)
    tasks = {t["task"]: t for t in nodes[0]["tasks"]}
    assert tasks["t0"]["noop"] == {"wouldChange": 9, "resources": resources[:STATUS_NOOP_RESOURCES],
                                   "more": 9 - STATUS_NOOP_RESOURCES}
    assert tasks["t1"]["noop"] == {"wouldChange": 0, "resources": [], "more": 0}
    assert "noop" not in tasks["t2"]


# --- the CLI ------------------------------------------------------------------------------------------------


def test_the_cli_prints_a_table_pages_on_and_writes_csv(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from operators.cli import _parser, canonical_argv
    from operators.graphs import cli_output

    pages = {None: {"entries": [dict(entry("r2").to_json(), noop={"wouldChange": 2, "resources": ["F[x] (a)"],
                                                                  "more": 1})], "continue": "s7"},
             "s7": {"entries": [entry("r1", state="failure").to_json()], "continue": None}}
    asked: list[dict[str, str]] = []

    def call(args: Any, method: str, url: str, query: dict[str, str] | None = None, **_: Any) -> Any:
        assert (method, url) == ("GET", "https://api.test/api/v1/clusters/env/history/")
        asked.append(dict(query or {}))
        return pages[(query or {}).get("continue")]

    monkeypatch.setattr(cli_output, "call", call)  # where the action looks it up (imported once, at its top)

    def run(*argv: str) -> int:
        words = canonical_argv(["graph", "history", "--env", "env", "--server", "https://api.test", *argv])
        args = _parser(words).parse_args(words)
        return int(args.func(args))

    assert run("--node", "node-1", "--limit", "1") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1].split() == ["2026-01-01T10:00:01Z", "r2", "default", "node-1", "hiera", "success",
                                           "1s", "1", "2"]
    assert err == "stead graph: more entries: add --continue s7 (or --all)\n"
    assert asked == [{"node": "node-1", "limit": "1"}]
    assert run("--all", "-o", "csv") == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["run"], r["state"], r["wouldChange"], r["resources"]) for r in rows] == [
        ("r2", "success", "2", "F[x] (a)"), ("r1", "failure", "", "")]
    assert err == "" and asked[-1] == {"limit": "50", "continue": "s7"}


def test_status_prints_what_a_noop_run_would_change() -> None:
    from operators.graphs.views import format_run

    run = {"metadata": {"name": "n"}, "spec": {"environment": "env", "noop": True}, "status": {
        "state": "Succeeded", "progress": "2/2", "nodes": [{"name": "node-1", "tasks": [
            {"task": "conf", "state": "success", "attempts": 1,
             "noop": {"wouldChange": 7, "resources": ["File[/etc/motd] (content)"], "more": 6}},
            {"task": "ntp", "state": "success", "attempts": 1, "noop": {"wouldChange": 0, "resources": []}},
            {"task": "say", "state": "noop", "reason": "noop run: shell tasks do not run"}]}]}}
    lines = format_run(run).splitlines()
    assert any(line.endswith("7 would change: File[/etc/motd] (content) and 6 more") for line in lines)
    assert any("ntp  success" in line and line.endswith("nothing would change") for line in lines)
