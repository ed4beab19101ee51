"""The `stead` command line: CRD generation and its staleness check."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.cli import main
from operators.runtime.process import OperatorOptions


def test_crds_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "crds"
    assert main(["crds", "--check", "--dir", str(out)]) == 1
    assert "stale CRDs" in capsys.readouterr().err
    assert main(["crds", "--dir", str(out)]) == 0
    assert (out / "environments.yaml").exists()
    assert main(["crds", "--check", "--dir", str(out)]) == 0
    (out / "environments.yaml").write_text("edited by hand\n")
    assert main(["crds", "--check", "--dir", str(out)]) == 1


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: stead" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--no-such-flag"])
    assert exit_info.value.code == 2


def _options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local: str, reachable: bool,
             more: list[str]) -> OperatorOptions:
    """The options `stead run --local LOCAL ... MORE` starts the operator with (the operator not started)."""
    import operators.cluster
    import operators.runtime.process

    seen: list[OperatorOptions] = []

    async def fake_run_operator(kinds: object, options: OperatorOptions, addons: object = ()) -> None:
        seen.append(options)

    monkeypatch.setattr(operators.cluster, "reaches_cluster", lambda kubeconfig: reachable)
    monkeypatch.setattr(operators.runtime.process, "run_operator", fake_run_operator)
    monkeypatch.setenv("STEAD_HOME", str(tmp_path))
    args = ["run", "--local", local, "--config-api-port", "0", "--webhook", "off", "--store", str(tmp_path / "s")]
    assert main(args + more) == 0
    (options,) = seen
    return options


@pytest.mark.parametrize(("local", "reachable", "explicit", "trusted"), [
    ("auto", True, None, ()),  # a real cluster's tenants get no shell on this host
    ("auto", True, ["team-*"], ("team-*",)),
    ("never", True, None, ()),
])
def test_run_trusts_no_namespace_of_a_cluster_it_did_not_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local: str, reachable: bool, explicit: list[str] | None,
    trusted: tuple[str, ...],
) -> None:
    more = ["--trust-local-namespaces", *explicit] if explicit is not None else []
    options = _options(monkeypatch, tmp_path, local, reachable, more)
    assert options.runs is not None and options.runs.trusted_local_namespaces == trusted


def test_operator_placement_flags_reach_the_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--placement bounded --placement-epsilon E` on the command line is what `Sharding` is built with."""
    options = _options(monkeypatch, tmp_path, "never", True,
                       ["--sharding", "leases", "--placement", "bounded", "--placement-epsilon", "0.1"])
    assert (options.sharding, options.placement, options.placement_epsilon) == ("leases", "bounded", 0.1)
