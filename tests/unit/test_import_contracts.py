"""The import contracts in pyproject.toml say the architecture (docs/architecture.md, "Layering"): each must
fail when its rule is broken, or it says nothing. Each case copies the tree, breaks one rule on purpose and
runs import-linter on the copy; the contract of that rule must be the one reported broken."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

CASES = {
    # contract (start of its name) -> (file, line appended)
    "pipelines is a generic workflow engine": ("pipelines/masking.py", "import operators.catalog"),
    "only the adapter imports Kopf": ("operators/runtime/core/clock.py", "import kopf"),
    "layers (exhaustive): entry points": ("operators/environment/logic.py", "import operators.lsm"),
    "the domains are independent": ("operators/calm/validation.py", "import operators.config.keys"),
    "the domains reach the runtime through its front door": (
        "operators/environment/logic.py", "from operators.runtime.core.clock import utc_now"),
    "the runtime's layers (exhaustive)": (
        "operators/runtime/kube/watch.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import operators.runtime.engine.events"),
}
"""The runtime's case is an import under `if TYPE_CHECKING:`: such imports count too."""


def _lint(tree: Path) -> str:
    answer = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=tree, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "1000"}, timeout=120)
    return answer.stdout + answer.stderr


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("operators", "pipelines"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _broken(output: str) -> list[str]:
    """The contracts' lines of the summary that say BROKEN (some go on with "(N ignored imports)")."""
    return [line for line in output.splitlines() if re.search(r" BROKEN( \(.*\))?$", line.rstrip())]


@pytest.mark.parametrize("contract", sorted(CASES))
def test_breaking_a_rule_breaks_its_contract(tmp_path: Path, contract: str) -> None:
    tree = _copy(tmp_path)
    path, line = CASES[contract]
    with (tree / path).open("a", encoding="utf-8") as source:
        source.write(f"\n{line}\n")
    broken = _broken(_lint(tree))
    assert any(entry.startswith(contract) for entry in broken), broken


def test_a_module_in_no_layer_breaks_the_exhaustive_layers(tmp_path: Path) -> None:
    """A new domain (or any new top-level module) must be placed in the layers: unlisted, it is refused."""
    tree = _copy(tmp_path)
    (tree / "operators" / "unplaced.py").write_text('"""A new domain nobody placed."""\n')
    (tree / "operators" / "runtime" / "unplaced.py").write_text('"""A new runtime part nobody placed."""\n')
    broken = _broken(_lint(tree))
    assert any(entry.startswith("layers (exhaustive)") for entry in broken), broken
    assert any(entry.startswith("the runtime's layers (exhaustive)") for entry in broken), broken
