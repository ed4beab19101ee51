"""`compile_blueprint`: the steps of a compile, in order (see the package docstring)."""

from __future__ import annotations

from operators.calm import macros
from operators.calm.compiler.analysis import MacroAnalysis
from operators.calm.compiler.edits import UserEdits
from operators.calm.compiler.fragments import FragmentBuilder
from operators.calm.compiler.links import LinkBuilder
from operators.calm.compiler.structures import CompileResult, Dep, Expansion, Link, MacroDecision, json_digest
from operators.calm.models import (
    SYSTEM_ACTIONS,
    BlueprintSpec,
    CompiledAction,
    CompiledState,
)
from operators.calm.validation import problems


def compile_blueprint(spec: BlueprintSpec, previous: CompiledState | None = None) -> CompileResult:
    """Compile a blueprint. `previous` is `status.compiledState` of the last successful compile
    (None the first time): it carries the dependency list digest and the user edits, for the
    rule that user-edited actions stay until the dependency list changes."""
    parsed: dict[str, macros.Template] = {}
    found = problems(spec, parsed)
    if found:
        return CompileResult(errors=tuple(found), state=previous, service_count=len(spec.services))
    return _Compiler(spec, previous, parsed).run()


class _Compiler(FragmentBuilder, MacroAnalysis, LinkBuilder):
    def run(self) -> CompileResult:
        spec = self.spec
        self.build_fragments()
        generated = {a: self.expand(a, self.system_root(a), None) for a in SYSTEM_ACTIONS}
        edits = {a.name: (i, a) for i, a in enumerate(spec.actions) if a.name in SYSTEM_ACTIONS}
        edited = {name: self.expand(name, self.edited_root(name, i, a), None) for name, (i, a) in edits.items()}
        users = self.user_expansions()
        self.build_context([*generated.values(), *edited.values(), *(e for _, _, e in users)])

        analyses = {a: self.analyse(generated[a]) for a in SYSTEM_ACTIONS}
        tops: dict[str, list[tuple[Dep, str, str]]] = {}
        inner: dict[str, list[Link]] = {}
        for action, analysis in analyses.items():
            tops[action], inner[action] = self.implicit_links(action, analysis.deps)
        graph = self.entity_graph(tops["create"])
        order = {name: k for k, name in enumerate([*self.entity_order(), *(d.name for d in spec.deployments)])}
        for cycle in self.cycles(graph, order, "dependency cycle"):
            self.errors[cycle] = None
        for expansion in generated.values():
            self.errors.update(dict.fromkeys(expansion.errors))
        if self.errors:
            return self.failed()

        dependency_list = self.dependency_list(tops)
        digest = json_digest(sorted(json_digest(e.model_dump(by_alias=True, exclude={"source"}))
                                    for e in dependency_list))
        decide = UserEdits(self.previous, digest, {n: (i, json_digest(a.model_dump(by_alias=True, mode="json")))
                                                 for n, (i, a) in edits.items()})

        actions: list[CompiledAction] = []
        decisions: list[MacroDecision] = [d for a in analyses.values() for d in a.decisions]
        edited_create: Expansion | None = None
        if "create" in decide.accepted:
            edited_create = edited["create"]
        for action in SYSTEM_ACTIONS:
            if action in decide.accepted:
                exp = edited[action]
                self.errors.update(dict.fromkeys(exp.errors))
                analysis = self.analyse(exp)
                decisions = [d for d in decisions if d.action != action] + analysis.decisions
                top, inner_links = self.implicit_links(action, analysis.deps)
                exp.links.extend(inner_links)
                self.check_user_links(exp)
                self.warn_unordered(exp, top, "user-edited")
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=True))
            elif edited_create is not None:
                exp = generated[action]
                exp.links.extend(inner[action])
                exp.links.extend(self.derived_links(action, edited_create))
                self.warn_unordered(exp, tops[action], "rebuilt from the user-edited create")
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=True))
            else:
                exp = generated[action]
                exp.links.extend(inner[action])
                exp.links.extend(self.structural_links(action, graph))
                for dep, setter_top, getter_top in tops[action]:
                    exp.links.append(Link(setter_top, getter_top, "implicit", dep.field,
                                          f"{getter_top} reads {dep.macro} that {setter_top} sets in {action}"))
                actions.append(self.compiled(exp, "Application", None, system=True, user_edited=False))
        for level, owner, exp in users:
            self.errors.update(dict.fromkeys(exp.errors))
            decisions.extend(self.analyse(exp).decisions)
            actions.append(self.compiled(exp, level, owner, system=False, user_edited=False))
        for i, named in enumerate(spec.runbooks):
            if f"Runbook/{named.name}" not in self.called_runbooks:
                self.warnings[f'spec.runbooks[{i}]: runbook "{named.name}" is never called'] = None
        self.warnings.update(dict.fromkeys(decide.warnings))
        if self.errors:
            return self.failed()
        return CompileResult(
            errors=(),
            warnings=tuple(self.warnings),
            actions=tuple(actions),
            dependency_list=tuple(dependency_list),
            macros=tuple(decisions),
            graph=graph,
            state=CompiledState(dependency_digest=digest, edits=decide.records),
            rebuilt=bool(decide.discarded_now),
            rebuilt_message=decide.message(),
            service_count=len(spec.services),
        )

    def failed(self) -> CompileResult:
        return CompileResult(errors=tuple(self.errors), warnings=tuple(self.warnings), state=self.previous,
                             service_count=len(self.spec.services))
