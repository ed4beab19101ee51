"""Macros in the macro context: what each reads, and whether it is resolved now or kept for run time."""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from operators.calm import macros
from operators.calm.compiler.state import CompileState
from operators.calm.compiler.structures import (
    APPLICATION,
    MOMENT_BUILTINS,
    Analysis,
    Dep,
    Expansion,
    Inst,
    MacroDecision,
)
from operators.calm.models import (
    Variable,
)


class MacroAnalysis(CompileState):
    def build_context(self, expansions: Iterable[Expansion]) -> None:
        """The macro context of the blueprint: every entity with its declared variables, the
        attributes its type gives (a Local or Existing substrate's address) and every attribute a
        task sets anywhere (value None: known at run time)."""
        spec = self.spec
        attrs: dict[str, dict[str, macros.AttributeValue]] = defaultdict(dict)

        def declare(owner: str, variables: Sequence[Variable]) -> None:
            for var in variables:
                value: macros.AttributeValue = var.value
                if var.type == "secret":
                    value = macros.Secret(f"variable/{owner}/{var.name}")
                attrs[owner][var.name] = value
                self.declared.add((owner, var.name))

        declare(APPLICATION, spec.variables)
        for substrate in spec.substrates:
            if substrate.type == "Local":
                attrs[substrate.name]["address"] = "127.0.0.1"
            elif substrate.type == "Existing" and substrate.address is not None:
                attrs[substrate.name]["address"] = substrate.address
            declare(substrate.name, substrate.variables)
        for package in spec.packages:
            declare(package.name, package.variables)
        for service in spec.services:
            declare(service.name, service.variables)
        for expansion in expansions:
            for inst in expansion.insts:
                for attribute in inst.task.sets:
                    attrs[inst.target or APPLICATION].setdefault(attribute, None)
        # The chain Application -> Substrate -> Deployment -> Package -> Service: a service hangs
        # under its deployment's first package (a context has one parent per entity).
        entities = [macros.Entity("Application", APPLICATION, attrs[APPLICATION])]
        for d in spec.deployments:
            entities.append(macros.Entity("Substrate", d.substrate, attrs[d.substrate]))
        for d in spec.deployments:
            entities.append(macros.Entity("Deployment", d.name, attrs[d.name], parent=d.substrate))
            for p in d.packages:
                entities.append(macros.Entity("Package", p, attrs[p], parent=d.name))
            for s in d.services:
                entities.append(macros.Entity("Service", s, attrs[s], parent=d.packages[0] if d.packages else d.name))
        credentials = [macros.Credential(c.name, c.username, macros.Secret(f"credential/{c.name}"))
                       for c in spec.credentials]
        base = macros.MacroContext(tuple(entities), None, tuple(credentials))
        self.contexts = {None: base}

    def context_at(self, target: str | None) -> macros.MacroContext:
        """The context of a task running on `target`. `MacroContext.at` validates the whole context
        again (linear in its size), once per task would make the compile quadratic: the context is
        copied with only `current` changed, which is what `at` means."""
        context = self.contexts.get(target)
        if context is None:
            base = self.contexts[None]
            if target is not None and base.entity(target) is None:
                raise ValueError(f"no entity {target!r}")  # targets were validated: an internal error
            context = copy.copy(base)
            object.__setattr__(context, "current", target)
            self.contexts[target] = context
        return context

    def template(self, text: str) -> macros.Template | None:
        template = self.templates.get(text)
        if template is None:
            try:
                template = macros.parse(text)
            except macros.MacroError:
                return None  # reported by validation
            self.templates[text] = template
        return template

    def analyse(self, exp: Expansion) -> Analysis:
        """Calm's decision for every macro of the action, and its implicit dependencies."""
        setters: dict[tuple[str | None, str], list[Inst]] = defaultdict(list)
        for inst in exp.insts:
            for attribute in inst.task.sets:
                setters[(inst.target or APPLICATION, attribute)].append(inst)
        runtime_names = frozenset(setters)
        out = Analysis()
        for inst in exp.insts:
            if not inst.task.texts:
                continue
            context = self.context_at(inst.target)
            for place, text in inst.task.texts:
                if "@@{" not in text:
                    continue
                template = self.template(text)
                if template is None:
                    continue
                problems_found = macros.check(template, context, runtime_names)
                for problem in problems_found:
                    macro = f"{problem.macro} " if problem.macro else ""
                    self.errors[f'{place}: task "{inst.task.name}": macro {macro}at position {problem.position}: '
                                f"{problem.message}"] = None
                if problems_found:
                    continue
                for m in template.macros:
                    out.decisions.append(self.decide(exp, inst, place, m, context, runtime_names, setters, out))
        return out

    def decide(self, exp: Expansion, inst: Inst, place: str, m: macros.Macro, context: macros.MacroContext,
               runtime_names: frozenset[tuple[str | None, str]],
               setters: Mapping[tuple[str | None, str], list[Inst]], out: Analysis) -> MacroDecision:
        reasons: list[str] = []
        reads: list[str] = []
        for node in macros.walk(m.expression):
            if isinstance(node, macros.Call) and node.name in MOMENT_BUILTINS:
                reasons.append(f"{node.name} depends on when the task runs")
            if not isinstance(node, macros.Ref | macros.CredRef):
                continue
            try:
                resolution = macros.resolve(node, context, runtime_names)
            except macros.MacroError:
                continue  # `check` reported it already
            if resolution.credential is not None:
                reads.append(f"credential {resolution.credential.name}.{resolution.attribute}")
                if resolution.attribute == "secret":
                    reasons.append("a secret is fetched only when the task runs")
                continue
            if resolution.entity is None:
                continue
            entity = resolution.entity
            reads.append(f"{entity.kind} {entity.name}.{resolution.attribute}")
            if isinstance(entity.attributes.get(resolution.attribute), macros.Secret):
                reasons.append("a secret is fetched only when the task runs")
            if resolution.runtime:
                by = [s for s in setters.get((entity.name, resolution.attribute), ()) if s is not inst]
                if not by:
                    reasons.append("the task sets it itself")
                for setter in by:
                    reasons.append(f"task {setter.id} of this action sets {entity.name}.{resolution.attribute}")
                    out.deps.append(Dep(inst, setter, entity.kind, entity.name, resolution.attribute, place, m.source))
            elif (exp.label == "create" and entity.attributes.get(resolution.attribute) is None
                  and (entity.name, resolution.attribute) not in self.declared):
                self.warnings[f'{place}: task "{inst.task.name}": macro {m.source} reads '
                              f"{entity.name}.{resolution.attribute}, which only tasks of other actions set: "
                              "it has no value while create runs"] = None
        runtime = bool(reasons)
        if runtime:
            inst.runtime_macros.append(m.source)
        return MacroDecision(
            action=exp.label, task=inst.id, field=place, macro=m.source, position=m.position, runtime=runtime,
            reason="; ".join(dict.fromkeys(reasons)) if runtime else "known before the run",
            reads=tuple(dict.fromkeys(reads)),
        )
