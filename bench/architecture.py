"""The architecture's counts (issue 28), read from the source with `ast`: no cluster, nothing imported.

Issue 28 asks for figures before and after its refactor; this script is how they are counted, so that
"before" and "after" mean the same thing. For the tree at `--root` (default: this checkout) it prints:

- modules: the `.py` files under `operators/` and `pipelines/`, their mean length in lines, and those
  over 600 lines, named;
- runtime names used by the domains: the names the domains (`operators.{calm,config,environment,lsm,
  graphs}`) import from `operators.runtime...` (a `from M import a` counts `a`; an `import M` counts `M`),
  as distinct names and as the distinct runtime modules they come from (any import: module level,
  in functions or under TYPE_CHECKING);
- private names across modules: `from M import _x` where M is another module of `operators` or
  `pipelines` (relative imports resolved) and `_x` starts with one underscore (dunders are not private);
  each imported name counts once per importing statement; and `m._x` where `m` names another such module
  (bound by `import` or `from P import m`);
- function-local imports: `import` statements inside a function body, in all, and per package
  (`operators.calm`, `operators.runtime`, `pipelines`...);
- spec re-parses: calls `X.model_validate(dict(...))`, the shape of `model_validate(dict(ctx.obj.spec))`
  (all of them, and those of `dict(ctx.obj.spec)` exactly: a step parsing its object's spec again);
- `services: Any`: parameters, attributes or variables named `services` annotated `Any`;
- type-checking imports that go up a layer: imports under `if TYPE_CHECKING:` from a module to one in a
  higher layer of one of the `layers` contracts of pyproject.toml's import-linter section (the contracts
  exclude type-checking imports, so `lint-imports` does not see them), or to an independent sibling
  of the same layer (`a | b`);
- files a new domain must touch: the rule is "a file outside the domains' packages that names a
  domain". In Python modules outside `operators/<domain>/` (`operators/*.py`, `operators/runtime/`,
  `operators/cluster/`, `pipelines/`), an import of a domain's module, or a string constant (not a
  docstring) spelling `operators.<domain>` or `operators/<domain>`; in pyproject.toml, the
  import-linter contracts that name a domain's package (a new domain joins the layers and the
  forbidden lists). Each such file is one a sixth domain would have to edit, because it lists
  domains; comments and docs are not counted.

    .venv/bin/python bench/architecture.py [--root PATH] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DOMAINS = ("calm", "config", "environment", "lsm", "graphs")
PACKAGES = ("operators", "pipelines")
LONG_MODULE = 600
VIEWERS = ("operators.console",)
"""Packages over the domains that show them (the web console's views read every domain's models): naming a
domain there is their job, not a file a new domain must touch."""
DOMAIN_STRING = re.compile(r"operators[./](" + "|".join(DOMAINS) + r")\b")


@dataclass
class Module:
    """One source file: its dotted name, path relative to the root, lines and tree."""

    name: str
    path: str
    lines: int
    tree: ast.Module
    is_package: bool

    @property
    def package(self) -> str:
        """The module's package for the per-package counts: its first two components."""
        return ".".join(self.name.split(".")[:2])

    @property
    def domain(self) -> str | None:
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == "operators" and parts[1] in DOMAINS else None


@dataclass
class Imported:
    """One `import`/`from ... import` statement, resolved to absolute module names."""

    module: str  # for `from M import a`: M; for `import M`: M
    names: list[str]  # `from M import a, b`: [a, b]; `import M`: []
    in_function: bool
    type_checking: bool
    line: int


@dataclass
class Counts:
    modules: int = 0
    mean_lines: float = 0.0
    long_modules: dict[str, int] = field(default_factory=dict)
    runtime_names: list[str] = field(default_factory=list)
    runtime_modules: list[str] = field(default_factory=list)
    private_imports: list[str] = field(default_factory=list)
    function_local_imports: int = 0
    function_local_by_package: dict[str, int] = field(default_factory=dict)
    spec_reparses: list[str] = field(default_factory=list)
    services_any: list[str] = field(default_factory=list)
    upward_type_checking: list[str] = field(default_factory=list)
    domain_files: list[str] = field(default_factory=list)


def load_modules(root: Path) -> list[Module]:
    modules = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            parts = list(relative.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            text = path.read_text(encoding="utf-8")
            modules.append(Module(".".join(parts), str(relative), len(text.splitlines()),
                                  ast.parse(text, str(relative)), is_package))
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(module: Module) -> Iterator[Imported]:
    """Every import statement of the module, knowing whether it is in a function or under TYPE_CHECKING."""

    def walk(node: ast.AST, in_function: bool, type_checking: bool) -> Iterator[Imported]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Imported(alias.name, [], in_function, type_checking, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                yield Imported(_resolve(module, child), [a.name for a in child.names], in_function,
                               type_checking, child.lineno)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module([statement], []), in_function, True)
                for statement in child.orelse:
                    yield from walk(ast.Module([statement], []), in_function, type_checking)
            else:
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from walk(child, inner, type_checking)

    yield from walk(module.tree, False, False)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _layers(root: Path) -> list[list[list[str]]]:
    """The layers contracts of pyproject.toml: per contract, per layer, the independent siblings."""
    pyproject = root / "pyproject.toml"
    if not pyproject.exists():
        return []
    contracts = tomllib.loads(pyproject.read_text()).get("tool", {}).get("importlinter", {}).get("contracts", [])
    found = []
    for c in contracts:
        if c.get("type") != "layers":
            continue
        for container in c.get("containers") or [""]:  # layers named relative to each container
            prefix = f"{container}." if container else ""
            found.append([[prefix + s.strip() for s in re.split(r"[|:]", layer)] for layer in c["layers"]])
    return found


def _layer_of(layers: list[list[str]], name: str) -> tuple[int, str] | None:
    for index, siblings in enumerate(layers):
        for sibling in siblings:
            if _within(name, sibling):
                return index, sibling
    return None


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _private_attributes(module: Module, known: set[str]) -> Iterator[str]:
    """`m._x` in `module`, where `m` is a name it binds to another module of the tree."""
    bound: dict[str, str] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else (
                        alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            bound.update({alias.asname or alias.name: f"{base}.{alias.name}" for alias in node.names
                          if f"{base}.{alias.name}" in known})
    for node in ast.walk(module.tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and bound.get(node.value.id, module.name) != module.name):
            yield f"{module.path}:{node.lineno} {bound[node.value.id]}.{node.attr}"


def count(root: Path) -> Counts:
    modules = load_modules(root)
    counts = Counts(modules=len(modules), mean_lines=round(sum(m.lines for m in modules) / len(modules), 1))
    counts.long_modules = {m.path: m.lines for m in sorted(modules, key=lambda m: -m.lines) if m.lines > LONG_MODULE}
    runtime_names: set[str] = set()
    runtime_modules: set[str] = set()
    by_package: Counter[str] = Counter()
    layer_contracts = _layers(root)
    domain_files: set[str] = set()
    for module in modules:
        for statement in imports(module):
            target = statement.module
            if module.domain and _within(target, "operators.runtime"):
                runtime_modules.add(target)
                runtime_names.update(statement.names or [target])
            for name in statement.names:
                if name.startswith("_") and not name.startswith("__") and target != module.name and (
                        target.split(".")[0] in PACKAGES):
                    where = f"{module.path}:{statement.line}"
                    counts.private_imports.append(f"{where} {target}.{name}")
            if statement.in_function:
                counts.function_local_imports += 1
                by_package[module.package] += 1
            if statement.type_checking:
                for layers in layer_contracts:
                    mine, theirs = _layer_of(layers, module.name), _layer_of(layers, target)
                    if mine and theirs and (theirs[0] < mine[0] or (
                            theirs[0] == mine[0] and theirs[1] != mine[1])):
                        counts.upward_type_checking.append(f"{module.path}:{statement.line} -> {target}")
            if module.domain is None and not module.name.startswith(VIEWERS) and target.split(".")[:2] in (
                    ["operators", d] for d in DOMAINS):
                domain_files.add(module.path)
        counts.private_imports.extend(_private_attributes(module, {m.name for m in modules}))
        docstrings = _docstrings(module.tree)
        for node in ast.walk(module.tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "model_validate" and node.args and isinstance(node.args[0], ast.Call)
                    and isinstance(node.args[0].func, ast.Name) and node.args[0].func.id == "dict"):
                counts.spec_reparses.append(f"{module.path}:{node.lineno} {ast.unparse(node.args[0])}")
            if module.domain is None and not module.name.startswith(VIEWERS) and isinstance(
                    node, ast.Constant) and isinstance(node.value, str) and (
                    id(node) not in docstrings and DOMAIN_STRING.search(node.value)):
                domain_files.add(module.path)
            annotated: list[tuple[str, ast.expr | None, int]] = []
            if isinstance(node, ast.arg):
                annotated.append((node.arg, node.annotation, node.lineno))
            elif isinstance(node, ast.AnnAssign):
                target_name = node.target.attr if isinstance(node.target, ast.Attribute) else (
                    node.target.id if isinstance(node.target, ast.Name) else "")
                annotated.append((target_name, node.annotation, node.lineno))
            for name, annotation, line in annotated:
                if name == "services" and annotation is not None and ast.unparse(annotation) in (
                        "Any", "typing.Any", "'Any'"):
                    counts.services_any.append(f"{module.path}:{line}")
    counts.runtime_names = sorted(runtime_names)
    counts.runtime_modules = sorted(runtime_modules)
    counts.function_local_by_package = dict(sorted(by_package.items()))
    counts.domain_files = sorted(domain_files)
    pyproject = root / "pyproject.toml"
    if pyproject.exists():
        linter = tomllib.loads(pyproject.read_text()).get("tool", {}).get("importlinter", {})
        if DOMAIN_STRING.search(json.dumps(linter.get("contracts", []))):
            counts.domain_files.append("pyproject.toml")
    return counts


def report(counts: Counts) -> str:
    lines = [
        f"modules (operators/, pipelines/): {counts.modules}, mean {counts.mean_lines} lines",
        f"modules over {LONG_MODULE} lines: {len(counts.long_modules)}",
        *(f"    {path} ({n})" for path, n in counts.long_modules.items()),
        f"names the domains import from operators.runtime: {len(counts.runtime_names)} distinct names, "
        f"from {len(counts.runtime_modules)} runtime modules",
        f"private names imported across modules: {len(counts.private_imports)}",
        *(f"    {line}" for line in counts.private_imports),
        f"function-local imports: {counts.function_local_imports}",
        *(f"    {package}: {n}" for package, n in counts.function_local_by_package.items()),
        f"spec re-parses (model_validate(dict(...))): {len(counts.spec_reparses)}, of them "
        f"{sum(line.endswith('dict(ctx.obj.spec)') for line in counts.spec_reparses)} of `dict(ctx.obj.spec)`",
        f"`services: Any`: {len(counts.services_any)}",
        *(f"    {line}" for line in counts.services_any),
        f"type-checking imports that go up a layer (or across independent siblings): "
        f"{len(counts.upward_type_checking)}",
        *(f"    {line}" for line in counts.upward_type_checking),
        f"files a new domain must touch (outside the domains, naming one): {len(counts.domain_files)}",
        *(f"    {path}" for path in counts.domain_files),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the tree to read (default: this checkout)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    counts = count(args.root)
    if args.json:
        data: dict[str, Any] = dict(counts.__dict__)
        print(json.dumps(data, indent=2))
    else:
        print(report(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
