"""The operator's settings tree (`operators.runtime.settings`): `stead operator`'s flags and their defaults are
generated from it, and a command line gives back the tree."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from operators.runtime.core.ring import DEFAULT_EPSILON
from operators.runtime.process import OperatorOptions
from operators.runtime.settings import OperatorSettings, add_flags, from_args


def _parsed(argv: list[str]) -> OperatorSettings:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return from_args(parser.parse_args(argv))


def test_no_flag_gives_the_trees_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEAD_NAMESPACE", "ops")
    monkeypatch.setenv("STEAD_REPLICA", "r-1")
    settings = _parsed([])
    assert settings == OperatorSettings()
    assert (settings.cluster.operator_namespace, settings.cluster.replica) == ("ops", "r-1")
    assert (settings.health.port, settings.config_api.port, settings.webhook.port) == (8080, 8443, 9443)
    assert settings.cluster.shipped_objects is True and settings.cluster.namespaces == []


def test_each_flag_lands_in_its_section(tmp_path: Path) -> None:
    settings = _parsed(["--health-port", "9", "--config-api-basic-secret", "ns/creds", "--namespace", "a",
                        "--namespace", "b", "--no-shipped-objects", "-v", "--ssh-allow", "10.0.0.1/8",
                        "--max-concurrent-runs", "3", "--vault-grace-seconds", "1.5", "--replica", "x",
                        "--ssh-files-root", str(tmp_path), "--trust-local-namespaces"])
    assert settings.health.port == 9
    assert settings.config_api.basic_secret == ("ns", "creds")
    assert settings.cluster.namespaces == ["a", "b"] and settings.cluster.shipped_objects is False
    assert settings.log.verbose is True and settings.cluster.replica == "x"
    assert settings.runs.ssh_allow == ["10.0.0.0/8"] and settings.runs.ssh_files_root == tmp_path.resolve()
    assert settings.runs.trust_local_namespaces == []
    assert settings.slots.max_concurrent_runs == 3 and settings.vault.grace_seconds == 1.5


def test_bad_input_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parsed(["--lease-seconds", "0"])
    assert "--lease-seconds: expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_the_process_options_default_to_the_tree() -> None:
    """Written once: the process's options take the defaults of the flags that set them."""
    options = OperatorOptions(store_path=Path("/s"))
    tree = OperatorSettings()
    assert (options.health_listen, options.health_port, options.sharding) == (
        tree.health.listen, tree.health.port, tree.cluster.sharding)
    assert {f.name for f in dataclasses.fields(OperatorSettings)} == {
        "cluster", "webhook", "config_api", "health", "console", "runs", "vault", "slots", "log"}


def test_placement_flags_are_typed_and_bad_epsilons_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    settings = _parsed(["--placement", "bounded", "--placement-epsilon", "0.1"])
    assert (settings.cluster.placement, settings.cluster.placement_epsilon) == ("bounded", 0.1)
    assert OperatorSettings().cluster.placement_epsilon == DEFAULT_EPSILON  # one default, written twice
    options = OperatorOptions(store_path=Path("/s"))
    assert (options.placement, options.placement_epsilon) == (OperatorSettings().cluster.placement,
                                                              OperatorSettings().cluster.placement_epsilon)
    for bad in ("0", "-1", "x", "inf", "nan"):
        with pytest.raises(SystemExit):
            _parsed(["--placement-epsilon", bad])
        assert f"--placement-epsilon: expected a number above 0, got '{bad}'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parsed(["--placement", "random"])
    assert "--placement: invalid choice: 'random'" in capsys.readouterr().err
