"""The `stead` command line: CRD generation and its staleness check."""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.cli import main


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
