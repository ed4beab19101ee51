"""bench/architecture.py's rules (issue 28's before/after figures), on a small tree written here."""

from __future__ import annotations

from pathlib import Path

from bench.architecture import count

FILES = {
    "operators/__init__.py": "",
    "operators/catalog.py": "from operators import lsm\nNAME = 'operators.graphs.api:GraphsApi'\n",
    "operators/lsm/__init__.py": '"""Mentions operators.graphs in a docstring: not counted."""\n',
    "operators/lsm/steps.py": (
        "from typing import Any\n"
        "from operators.runtime.core.kinds import Kind, Resource\n"
        "from operators.runtime.core import pipeline\n"
        "from operators.lsm.models import _private, public\n"
        "def step(ctx: Any, services: Any) -> None:\n"
        "    import json\n"
        "    Model.model_validate(dict(ctx.obj.spec))\n"
        "    Model.model_validate(dict(other))\n"
        "    pipeline._hidden()\n"
    ),
    "operators/lsm/models.py": "_private = 1\npublic = 2\nfrom . import _own_relative_is_other_module\n",
    "operators/runtime/__init__.py": "",
    "operators/runtime/core/pipeline.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from operators.runtime.engine.services import S\n"
    ),
    "pipelines/__init__.py": "\n" * 700,
    "pyproject.toml": (
        "[[tool.importlinter.contracts]]\nname = 'l'\ntype = 'layers'\n"
        "layers = ['operators.lsm', 'operators.runtime.engine', 'operators.runtime.core']\n"
    ),
}


def test_the_counts_follow_the_documented_rules(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    counts = count(tmp_path)
    assert counts.modules == 8
    assert counts.long_modules == {"pipelines/__init__.py": 700}
    assert counts.runtime_names == ["Kind", "Resource", "pipeline"]
    assert counts.runtime_modules == ["operators.runtime.core", "operators.runtime.core.kinds"]
    assert [p.split(" ", 1)[1] for p in counts.private_imports] == [
        "operators.lsm._own_relative_is_other_module", "operators.lsm.models._private",
        "operators.runtime.core.pipeline._hidden"]
    assert counts.function_local_imports == 1 and counts.function_local_by_package == {"operators.lsm": 1}
    assert [line.split(" ", 1)[1] for line in counts.spec_reparses] == ["dict(ctx.obj.spec)", "dict(other)"]
    assert counts.services_any == ["operators/lsm/steps.py:5"]
    assert counts.upward_type_checking == ["operators/runtime/core/pipeline.py:3 -> operators.runtime.engine.services"]
    assert counts.domain_files == ["operators/catalog.py", "pyproject.toml"]
