"""The lazy front doors (operators.runtime.lazy): every exported name resolves to its module's object, the
package does not import its modules until a name is asked for, and a declaration that drifts is refused."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from operators.runtime.lazy import front_door

FRONT_DOORS = ("operators.cluster", "operators.config", "operators.graphs", "operators.lsm")


@pytest.mark.parametrize("package", FRONT_DOORS)
def test_every_exported_name_is_its_modules_object(package: str) -> None:
    front = importlib.import_module(package)
    assert front.__all__
    for name in front.__all__:
        value = getattr(front, name)
        homes = [m for m, loaded in list(sys.modules.items())
                 if m.startswith(f"{package}.") and getattr(loaded, name, None) is value]
        assert homes, name
    assert set(front.__all__) <= set(dir(front))
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        getattr(front, "no_such_name")  # noqa: B009


def test_the_package_imports_nothing_until_a_name_is_asked_for() -> None:
    code = ("import sys, operators.graphs as g; before = 'operators.graphs.models' in sys.modules; g.GraphRunSpec; "
            "print(before, 'operators.graphs.models' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.split() == ["False", "True"]


def test_a_name_exported_but_not_imported_is_refused(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from json import dumps\n")
    module = type(sys)("drifted")
    sys.modules["drifted"] = module
    try:
        getter, _ = front_door("drifted", str(init), ["dumps", "loads"])
        with pytest.raises(ImportError, match=r"only in __all__: \['loads'\]"):
            getter("dumps")
    finally:
        del sys.modules["drifted"]


def test_a_name_resolves_through_its_module_each_time(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from json import dumps\n")
    getter, listing = front_door("drifted", str(init), ["dumps"])
    import json

    assert getter("dumps") is json.dumps
    sys.modules["drifted"] = type(sys)("drifted")
    try:
        assert "dumps" in listing()
    finally:
        del sys.modules["drifted"]


def test_a_name_may_be_exported_under_another_and_a_submodule_is_a_name_too(tmp_path: Path) -> None:
    """The runtime's front door exports two `Services` (the steps' and the process's) under two names, and a
    module (`conditions`) beside functions: the alias is looked up by its original name, the submodule imported."""
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from json import dumps as to_text\n    from xml.dom import pulldom\n")
    getter, _ = front_door("aliased", str(init), ["to_text", "pulldom"])
    sys.modules.pop("xml.dom.pulldom", None)  # not imported yet: not an attribute of xml.dom
    import xml.dom

    vars(xml.dom).pop("pulldom", None)
    import json

    assert getter("to_text") is json.dumps
    assert getter("pulldom") is sys.modules["xml.dom.pulldom"]
