"""Each kind is named once, by its domain (`Resource`), and the catalog's kinds are those names."""

from __future__ import annotations

import importlib
import pkgutil

import operators
from operators import catalog
from operators.runtime.core.kinds import Resource


def declared() -> set[Resource]:
    """Every `Resource` a domain declares in its models (`operators.<domain>.models`)."""
    found: set[Resource] = set()
    for info in pkgutil.iter_modules(operators.__path__):
        if not info.ispkg:
            continue
        try:
            models = importlib.import_module(f"operators.{info.name}.models")
        except ModuleNotFoundError:
            continue
        found |= {value for value in vars(models).values() if isinstance(value, Resource)}
    return found


def test_every_kind_of_the_catalog_is_a_declared_resource_and_back() -> None:
    assert {kind.resource for kind in catalog.KINDS} == declared()


def test_dependencies_name_declared_kinds() -> None:
    names = {resource.kind for resource in declared()}
    for kind in catalog.KINDS:
        assert set(kind.depends_on) <= names, kind.kind
