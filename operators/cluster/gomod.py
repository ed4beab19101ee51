"""Pure go.mod handling for the wrapper modules ``build.py`` builds components in: no I/O, unit-tested.

A replace line only counts in the main module, so a component's own replacements are lost when it is a
dependency of the wrapper: Kubernetes's ``./staging`` modules are re-pointed at their published
releases, and other components' replacements are carried over (``upstream_replacements``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Final

WRAPPER_MODULE: Final = "stead.dev/controlplane"

_REPLACE_LINE = re.compile(r"^(?P<old>\S+)(?:\s+\S+)?\s*=>\s*(?P<new>\S+)(?:\s+(?P<ver>\S+))?$")


def _go_mod_lines(go_mod: str) -> Iterator[tuple[str | None, str]]:
    """Yield (enclosing block verb or None, directive text) for each non-empty go.mod line."""
    block: str | None = None
    for raw in go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if block is not None:
            if line == ")":
                block = None
            else:
                yield block, line
            continue
        verb, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest == "(":
            block = verb
        else:
            yield None, line


def _directives(go_mod: str, verb: str) -> Iterator[str]:
    """The text of every ``verb`` directive (``require``, ``replace``), in a block or on a line of its own."""
    for block, line in _go_mod_lines(go_mod):
        if block == verb:
            yield line
        elif block is None and line.startswith(verb + " "):
            yield line.removeprefix(verb + " ").strip()


def go_directive(go_mod: str) -> str | None:
    """The ``go`` version line of a go.mod (the wrapper mirrors it, so Go picks the same rules)."""
    for block, line in _go_mod_lines(go_mod):
        verb, _, rest = line.partition(" ")
        if block is None and verb == "go":
            return rest.strip()
    return None


def staging_modules(go_mod: str) -> list[str]:
    """Modules the upstream go.mod replaces with a ``./staging/`` directory, in file order."""
    modules: list[str] = []
    for spec in _directives(go_mod, "replace"):
        match = _REPLACE_LINE.match(spec)
        if match and match["new"].startswith("./staging/") and match["ver"] is None:
            modules.append(match["old"])
    return modules


def required_versions(go_mod: str) -> dict[str, str]:
    """The ``require`` lines of a go.mod: module path to version."""
    versions: dict[str, str] = {}
    for spec in _directives(go_mod, "require"):
        parts = spec.split()
        if len(parts) >= 2:
            versions[parts[0]] = parts[1]
    return versions


def upstream_replacements(go_mod: str) -> list[tuple[str, str]]:
    """The upstream go.mod's replace lines as (module, ``target version``) for a wrapper module.

    A module replaced by a local directory (``./api``) is published on its own, so it is pinned at
    the version the go.mod requires; a directory replacement of a module that is not required is
    dropped (nothing imports it). Module-to-module replacements are kept as written.
    """
    required = required_versions(go_mod)
    kept: list[tuple[str, str]] = []
    for spec in _directives(go_mod, "replace"):
        match = _REPLACE_LINE.match(spec)
        if match is None:
            continue
        old, new, version = match["old"], match["new"], match["ver"]
        if new.startswith(("./", "../")):
            if old in required:
                kept.append((old, f"{old} {required[old]}"))
        elif version is not None:
            kept.append((old, f"{new} {version}"))
    return kept


def staging_version(kubernetes_version: str) -> str:
    """The published version of the staging modules for a Kubernetes release: v1.Y.Z → v0.Y.Z."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if match is None:
        raise ValueError(f"not a Kubernetes release version: {kubernetes_version!r}")
    return f"v0.{match[1]}.{match[2]}"


def wrapper_go_mod(
    go_version: str,
    requirement: tuple[str, str],
    replacements: Sequence[tuple[str, str]] = (),
    module_path: str = WRAPPER_MODULE,
    redirects: Sequence[tuple[str, str]] = (),
) -> str:
    """A wrapper module's go.mod text: one requirement and ``module => module version`` lines.

    ``redirects`` are (module, ``target version``) pairs whose target may be another module.
    """
    module, version = requirement
    lines = [f"module {module_path}", "", f"go {go_version}", "", f"require {module} {version}"]
    targets = [(name, f"{name} {target}") for name, target in replacements] + list(redirects)
    if targets:
        lines += ["", "replace ("]
        lines += [f"\t{name} => {target}" for name, target in targets]
        lines.append(")")
    return "\n".join(lines) + "\n"


def kubernetes_wrapper_go_mod(upstream_go_mod: str, kubernetes_version: str) -> str:
    """The wrapper go.mod for ``k8s.io/kubernetes``, derived from its upstream go.mod text."""
    modules = staging_modules(upstream_go_mod)
    if not modules:
        raise ValueError("the upstream go.mod replaces no module with a ./staging/ directory")
    target = staging_version(kubernetes_version)
    return wrapper_go_mod(
        go_directive(upstream_go_mod) or "1.24.0",
        ("k8s.io/kubernetes", kubernetes_version),
        [(module, target) for module in modules],
    )


def tools_go(packages: Sequence[str]) -> str:
    """A ``tools``-tagged Go file importing the main packages, so ``go mod tidy`` keeps deps."""
    imports = "\n".join(f'\t_ "{package}"' for package in packages)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"
