"""The shape issue 28 gave the code, held: bench/architecture.py counts it, these tests keep the counts
where they were brought (docs/architecture.md, "Layering"). The import rules themselves are import-linter's
contracts (tests/unit/test_import_contracts.py)."""

from __future__ import annotations

from pathlib import Path

from bench.architecture import LONG_MODULE, count

ROOT = Path(__file__).resolve().parents[2]
COUNTS = count(ROOT)


def test_no_module_is_over_600_lines() -> None:
    """A module that grows past this has taken a second job: it becomes a package, one module per job."""
    assert COUNTS.long_modules == {}, f"over {LONG_MODULE} lines: {COUNTS.long_modules}"


def test_no_private_name_is_imported_from_another_module() -> None:
    """What two modules share is public in one of them, with a docstring that says what it is for."""
    assert COUNTS.private_imports == []


def test_steps_read_the_spec_parsed_once() -> None:
    """`ctx.spec` (`@spec_step`), not `Model.model_validate(dict(ctx.obj.spec))` in each step."""
    assert [place for place in COUNTS.spec_reparses if "ctx.obj.spec" in place] == []


def test_the_contract_between_runtime_and_domains_is_typed() -> None:
    assert COUNTS.services_any == []
    assert COUNTS.upward_type_checking == []


def test_a_new_domain_touches_the_catalog_the_cli_index_and_the_contracts_only() -> None:
    """docs/architecture.md, "Adding a domain", names these files: if another file starts naming a domain,
    the page (and this list) must say so."""
    assert sorted(COUNTS.domain_files) == ["operators/catalog.py", "operators/cli/__init__.py", "pyproject.toml"]
