"""What every part of a compile shares: the spec, its index, the fragments, the macro contexts, the
errors and warnings found so far."""

from __future__ import annotations

from operators.calm import macros
from operators.calm.compiler.structures import RunbookDef
from operators.calm.models import (
    SYSTEM_ACTIONS,
    BlueprintSpec,
    CompiledState,
)
from operators.calm.validation import Index, build_index


class CompileState:
    """The state one compile's parts (FragmentBuilder, MacroAnalysis, LinkBuilder) share: public so that each
    part, in its own module, can build on it."""

    def __init__(self, spec: BlueprintSpec, previous: CompiledState | None,
                 parsed: dict[str, macros.Template]) -> None:
        self.spec = spec
        self.previous = previous
        self.index: Index = build_index(spec)
        self.errors: dict[str, None] = {}
        self.warnings: dict[str, None] = {}
        self.fragments: dict[str, RunbookDef] = {}
        self.parts: dict[str, list[str]] = {a: [] for a in SYSTEM_ACTIONS}  # action -> entities in order
        self.templates = parsed
        self.contexts: dict[str | None, macros.MacroContext] = {}
        self.declared: set[tuple[str, str]] = set()
        self.called_runbooks: set[str] = set()

    def entity_order(self) -> list[str]:
        """Substrates, packages and services, deployment by deployment: the order of call tasks."""
        order: list[str] = []
        for deployment in self.spec.deployments:
            order.append(deployment.substrate)
            order.extend(deployment.packages)
            order.extend(deployment.services)
        return order
