"""`make run` on a fresh clone first builds the venv, which takes minutes (pip is quiet): the Makefile says what
it is doing before each long step, and says nothing more once the venv is up to date (issue 27, friction 11)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Stands for python3 (`-m venv DIR`): makes DIR/bin/pip, which only records its arguments.
FAKE_PYTHON = """#!/bin/sh
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "pip $*" >> "%s/pip.log"\\n' "$3" > "$3/bin/pip"
chmod +x "$3/bin/pip"
"""


def _make_venv(venv: Path, python: Path) -> list[str]:
    done = subprocess.run(["make", "--no-print-directory", "venv", f"VENV={venv}", f"PYTHON={python}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_first_venv_says_what_takes_long_and_later_runs_say_nothing(tmp_path: Path) -> None:
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    venv = tmp_path / "venv"
    lines = _make_venv(venv, python)
    creating = next(i for i, line in enumerate(lines) if line.startswith("venv: creating"))
    making = next(i for i, line in enumerate(lines) if " -m venv " in line)
    installing = next(i for i, line in enumerate(lines) if line.startswith("venv: installing"))
    first_pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert creating < making < installing < first_pip, lines
    assert "few minutes the first time" in lines[installing]
    assert (venv / "pip.log").read_text().count("pip install") == 2  # the fake pip ran: the steps are real
    again = _make_venv(venv, python)
    assert not any(line.startswith("venv:") or "pip" in line for line in again), again
