"""A package's names imported on first use (PEP 562): the one mechanism of Stead's lazy front doors.

`operators.graphs`, `operators.lsm`, `operators.config` and `operators.cluster` export names from their
modules without importing those modules with the package: `stead graph`, `stead service`, `stead config` and
`stead cluster` must start without pydantic, yaql, cryptography or the Kubernetes client, which the modules
behind the names need.

A front door declares its names in two lists side by side, and nothing else:

    if TYPE_CHECKING:
        from operators.graphs.fuel import load_file, load_tasks     # where each name lives (mypy reads it)

    __all__ = ["load_file", "load_tasks"]                           # the names exported (mypy strict wants it)

    __getattr__, __dir__ = front_door(__name__, __file__, __all__)

`front_door` reads where each name lives from that `if TYPE_CHECKING:` block, with `ast`, the first time a
name is asked for (never when none is: the commands that need none pay nothing; the package's own short source
otherwise, well under a millisecond, beside the import of the module that follows), and refuses a block and an
`__all__` that differ, so the two lists cannot drift apart.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _homes(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """Exported name -> (module, name there), from the `from M import a, b as c` statements of the package's
    `if TYPE_CHECKING:` block."""
    import ast  # here, not above: start-up of the commands that ask for no name

    with open(init_file, encoding="utf-8") as source:
        tree = ast.parse(source.read(), init_file)
    homes: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module:
                module = f"{package}.{statement.module}" if statement.level else statement.module
                homes.update({alias.asname or alias.name: (module, alias.name) for alias in statement.names})
    return homes


def front_door(
    package: str, init_file: str, exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` (its `__name__`, `__file__` and `__all__`): a name of
    `exported` is looked up in its module, which is imported on first use (not copied into the package: a
    test that replaces it in its module is seen through the package too, as with a plain attribute lookup)."""
    found: dict[str, tuple[str, str]] = {}

    def homes() -> dict[str, tuple[str, str]]:
        if not found:
            found.update(_homes(package, init_file))
            if set(found) != set(exported):
                raise ImportError(
                    f"{package}: __all__ and the imports under TYPE_CHECKING differ "
                    f"(only in __all__: {sorted(set(exported) - set(found))}, "
                    f"only imported: {sorted(set(found) - set(exported))})")
        return found

    def __getattr__(name: str) -> Any:
        if name not in exported:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = homes()[name]
        home = importlib.import_module(module)
        if not hasattr(home, attribute):  # a submodule (`from operators.runtime.core import conditions`)
            return importlib.import_module(f"{module}.{attribute}")
        return getattr(home, attribute)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exported})

    return __getattr__, __dir__
