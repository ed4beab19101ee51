"""`stead config`: the argument checks (as `fuel config`'s), and the commands against the API served on loopback."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import threading
from collections.abc import Iterator

import pytest
import yaml

from operators.config.api import ConfigApi
from operators.config.cli import add_config_commands
from operators.config.cli_run import check_args, run_config, values_url
from operators.runtime.serving.http import HttpServer
from tests.unit.config.test_config_api import FakeAuth, FakeRepository, make_repo


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stead")
    add_config_commands(parser.add_subparsers())
    return parser.parse_args(["config", *argv])


BASE = ("--env", "1", "--level", "node=node-1.domain.tld", "--resource", "astute")


@pytest.mark.parametrize("argv,problem", [
    (("set", "--value", "2"), "--value needs --key"),
    (("set", "--type", "int"), "--type needs --key"),
    (("set", "--key", "a", "--type", "int"), "--type int needs --value"),
    (("override", "--key", "a", "--type", "str"), "--type str needs --value"),
    (("set", "--key", "a", "--type", "null", "--value", "x"), "--type null takes no --value"),
    (("set", "--key", "a", "--value", "2", "--format", "json"), "--value and --format exclude each other"),
    (("set", "--key", "a"), "--key needs --value, or --type null, or --type json|yaml"),
    (("set", "--key", "a", "--type", "null", "--format", "yaml"), "--format is the format of stdin"),
    (("set", "--key", "a", "--value", "x", "--type", "int"), "--value: 'x' is not an int"),
    (("set", "--key", "a", "--value", "maybe", "--type", "bool"), "--value: 'maybe' is not a bool"),
    (("set", "--key", "a", "--value", "{", "--type", "json"), "--value: not valid JSON"),
    (("get", "--format", "plain"), "--format plain prints one key's value: it needs --key"),
    (("get", "--trace", "--no-effective"), "--trace shows how effective values were found"),
    (("get", "--key", "a..b"), "--key: segment 2 is empty"),
    (("get", "--level", "node"), "--level: expected name=value, got 'node'"),
])
def test_the_seeds_argument_checks(argv: tuple[str, ...], problem: str) -> None:
    action, *rest = argv
    problems = check_args(parse(action, *BASE[:2], "--resource", "astute", *rest))
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize("argv", [
    ("get",), ("get", "--key", "a.b.0", "--format", "plain"), ("get", "--format", "yaml", "--trace"),
    ("set", "--format", "yaml"), ("set",), ("set", "--key", "a", "--value", "2"),
    ("set", "--key", "a", "--type", "null"), ("set", "--key", "a", "--type", "json"),
    ("override", "--key", "a", "--type", "yaml", "--format", "yaml"), ("override", "--key", "a", "--value", "1",
                                                                        "--type", "int"),
    ("delete", "--key", "a"), ("history", "--format", "plain"), ("revert", "--to-version", "2"),
    ("get", "--level", "cluster"),
])
def test_good_command_lines_pass(argv: tuple[str, ...]) -> None:
    action, *rest = argv
    assert check_args(parse(action, *BASE, *rest)) == []


def test_argparse_refuses_what_the_seed_does_not_know() -> None:
    for argv in [("get", "--value", "1"), ("set", "--format", "plain"), ("set", "--type", "float"),
                 ("revert",), ("get", "--version", "0"), ("history", "--key", "a")]:
        with pytest.raises(SystemExit):
            parse(argv[0], *BASE, *argv[1:])


def test_urls_quote_values_and_keep_resource_slashes() -> None:
    args = parse("get", "--env", "e 1", "--level", "role=a/b,node=n1", "--resource", "override/plugins",
                 "--server", "https://h:1/")
    assert values_url(args, "overrides") == (
        "https://h:1/api/v1/config/environments/e%201/role/a%2Fb/node/n1/resources/override/plugins/overrides")
    assert values_url(parse("get", "--env", "1", "--level", "cluster", "--resource", "r"), "values").endswith(
        "/environments/1/resources/r/values")


@pytest.fixture
def server() -> Iterator[tuple[str, FakeRepository]]:
    """The API on a loopback port in a thread, so the synchronous CLI can talk to it."""
    repo = make_repo()
    loop = asyncio.new_event_loop()
    api = ConfigApi(repo, FakeAuth())
    http = HttpServer(api, errors=api.problem)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(http.start("127.0.0.1", 0))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started.wait(10)
    yield f"http://127.0.0.1:{http.port}", repo
    asyncio.run_coroutine_threadsafe(http.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def cli(url: str, *argv: str, stdin: str = "", token: str = "good") -> tuple[int, str]:
    args = parse(argv[0], "--server", url, "--token", token, "-n", "default", *argv[1:])
    out = io.StringIO()
    code = run_config(args, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_the_seeds_use_cases_through_the_cli(server: tuple[str, FakeRepository],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = server
    astute = {"deployment_id": 1, "nodes": [{"fqdn": "node-1.domain.tld"}], "nova": {"debug": False}}
    code, out = cli(url, "set", *BASE, stdin=json.dumps(astute))
    assert code == 0 and out.splitlines() == [  # what changed, and the version it became
        "deployment_id: (unset) -> 1", 'nodes: (unset) -> [{"fqdn": "node-1.domain.tld"}]',
        "nova.debug: (unset) -> false",
        'the values of astute at node=node-1.domain.tld in environment 1: version 1 (ConfigValues cv-1, '
        'ETag "1-uid-1")']
    # use case 1: the whole resource
    code, out = cli(url, "get", *BASE)
    assert code == 0 and json.loads(out) == astute
    code, out = cli(url, "get", *BASE, "--format", "yaml")
    assert yaml.safe_load(out) == astute
    # use case 2: one key, in the three formats
    assert cli(url, "get", *BASE, "--key", "deployment_id", "--format", "plain") == (0, "1\n")
    assert json.loads(cli(url, "get", *BASE, "--key", "deployment_id")[1]) == {"deployment_id": 1}
    assert yaml.safe_load(cli(url, "get", *BASE, "--key", "nodes.0.fqdn", "--format", "yaml")[1]) == {
        "nodes.0.fqdn": "node-1.domain.tld"}
    # use case 3, Fuel's command: no --type, the schema says deployment_id is an integer
    assert cli(url, "set", *BASE, "--key", "deployment_id", "--value", "2")[0] == 0
    assert json.loads(cli(url, "get", *BASE, "--key", "deployment_id")[1]) == {"deployment_id": 2}
    assert cli(url, "set", *BASE, "--key", "deployment_id", "--value", "2", "--type", "str")[0] == 1  # the schema
    assert cli(url, "get", *BASE, "--key", "deployment_id", "--format", "plain") == (0, "2\n")
    # override a complex value from stdin, then see it win, with the trace
    assert cli(url, "override", *BASE, "--key", "nova", "--type", "yaml", stdin="debug: true\nworkers: 4\n")[0] == 0
    code, out = cli(url, "get", *BASE, "--trace")
    traced = json.loads(out)
    assert traced["values"]["nova"] == {"debug": True, "workers": 4}
    assert traced["lookup"]["nova.debug"]["kind"] == "overrides"
    assert cli(url, "get", *BASE, "--no-effective", "--key", "nova.debug", "--format", "plain") == (0, "false\n")
    # history and revert
    code, out = cli(url, "history", *BASE, "--format", "plain")
    assert code == 0 and out.splitlines()[0].split() == ["VERSION", "CREATED", "SOURCE", "HASH"]
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["1", "2*"]
    assert cli(url, "revert", *BASE, "--to-version", "1")[0] == 0
    assert cli(url, "get", *BASE, "--no-effective", "--key", "deployment_id", "--format", "plain") == (0, "1\n")
    # delete a key, then the null type
    assert cli(url, "delete", *BASE, "--key", "nodes")[0] == 0
    assert cli(url, "set", *BASE, "--key", "gone", "--type", "null")[0] == 0
    assert json.loads(cli(url, "get", *BASE, "--no-effective")[1]) == {
        "deployment_id": 1, "nova": {"debug": False}, "gone": None}
    assert cli(url, "set", *BASE, "--key", "label", "--value", "2")[0] == 0  # the schema says nothing: a string
    assert json.loads(cli(url, "get", *BASE, "--key", "label")[1]) == {"label": "2"}


def test_cli_errors_name_the_problem_and_set_the_exit_code(server: tuple[str, FakeRepository],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = server
    assert cli(url, "get", "--env", "1", "--level", "node=ghost", "--resource", "astute")[0] == 1
    assert 'node "ghost" not found' in capsys.readouterr().err
    assert cli(url, "get", *BASE, token="bad")[0] == 1
    assert "valid credentials are required" in capsys.readouterr().err
    assert cli(url, "set", *BASE, stdin="[1]")[0] == 2
    assert "a resource's data is a mapping" in capsys.readouterr().err
    assert cli(url, "set", *BASE, "--format", "yaml", stdin="a: [")[0] == 2
    assert "stdin: not valid YAML" in capsys.readouterr().err
    assert cli(url, "set", *BASE, "--key", "a", "--type", "int")[0] == 2
    assert "--type int needs --value" in capsys.readouterr().err
    assert cli("http://example.com", "get", *BASE)[0] == 2
    assert "refusing to send credentials" in capsys.readouterr().err


def test_the_token_is_never_printed(server: tuple[str, FakeRepository], capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = server
    cli(url, "get", *BASE, token="very-secret-token")
    cli("http://example.com", "get", *BASE, token="very-secret-token")
    captured = capsys.readouterr()
    assert "very-secret-token" not in captured.out + captured.err


def test_lists_are_rich_tables_on_a_terminal_and_plain_columns_otherwise() -> None:
    import io

    from operators.config.cli_run import _table

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    rows = [("3*", "2026-11-25T05:00:00Z", "api", "a1b2c3"), ("12", "2026-11-24T05:00:00Z", "kubectl", "d4e5f6")]
    plain, terminal = io.StringIO(), Terminal()
    _table(("VERSION", "CREATED", "SOURCE", "HASH"), rows, plain)
    _table(("VERSION", "CREATED", "SOURCE", "HASH"), rows, terminal)
    assert plain.getvalue().splitlines() == [
        "VERSION CREATED              SOURCE  HASH",
        "3*      2026-11-25T05:00:00Z api     a1b2c3",
        "12      2026-11-24T05:00:00Z kubectl d4e5f6",
    ]
    drawn = terminal.getvalue()
    assert "\x1b[" in drawn and "kubectl" in drawn and "VERSION" in drawn  # rich, with its escape codes


def test_set_says_what_changed_and_the_version_it_became(server: tuple[str, FakeRepository]) -> None:
    url, _ = server
    assert cli(url, "set", *BASE, stdin='{"deployment_id": 1, "nova": {"debug": false, "workers": 4}}')[0] == 0
    code, out = cli(url, "set", *BASE, "--key", "deployment_id", "--value", "2")
    assert code == 0 and out.splitlines() == [
        "deployment_id: 1 -> 2",
        'the values of astute at node=node-1.domain.tld in environment 1: version 2 (ConfigValues cv-1, '
        'ETag "2-uid-1")']
    code, out = cli(url, "set", *BASE, "--key", "nova", "--type", "json", "--value", '{"debug": true}')
    assert out.splitlines()[0] == 'nova: {"debug": false, "workers": 4} -> {"debug": true}'
    code, out = cli(url, "set", *BASE, stdin='{"deployment_id": 2, "nova": {"debug": true}, "new": "x"}')
    assert out.splitlines()[:1] == ['new: (unset) -> "x"']
    code, out = cli(url, "set", *BASE, "--key", "new", "--value", "x")
    assert (code, out) == (0, "unchanged: the values of astute at node=node-1.domain.tld in environment 1 already "
                              "held that (version 4)\n")
    code, out = cli(url, "override", *BASE, "--key", "fresh", "--type", "null")
    assert out.splitlines()[0] == "fresh: (unset) -> null"
    assert "the overrides of astute" in out.splitlines()[1]
