"""Each kind is named once, by its domain (`Resource`), and the catalog's kinds are those names."""

from __future__ import annotations

from operators import catalog
from operators.calm import models as calm
from operators.config import models as config
from operators.environment import models as environment
from operators.runtime.kinds import Resource


def declared() -> set[Resource]:
    return {value for module in (calm, config, environment) for value in vars(module).values()
            if isinstance(value, Resource)}


def test_every_kind_of_the_catalog_is_a_declared_resource_and_back() -> None:
    assert {kind.resource for kind in catalog.KINDS} == declared()


def test_dependencies_name_declared_kinds() -> None:
    names = {resource.kind for resource in declared()}
    for kind in catalog.KINDS:
        assert set(kind.depends_on) <= names, kind.kind
