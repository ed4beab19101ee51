"""The Blueprint compiler (docs/calm.md): from a spec to the system actions, the dependency list and
the decision per macro, or to errors that name what they are about.

Pure: no Kubernetes, no Kopf, no I/O. `compile_blueprint(spec, previous)` is all there is; the
caller (the Blueprint pipeline) writes `CompileResult.status(active)` and emits a Warning Event
with `CompileResult.rebuilt_message` when user-edited actions were thrown away.

How a compile goes, and why:

1. `validation.problems`: the apply-time checks again, for objects that bypassed the webhook.
2. Every runbook becomes a `RunbookDef` (a fragment): a service's action, a package's install
   (create) and uninstall (delete), a substrate's generated create (preCreate, apply or connect,
   readiness, postCreate) and delete (remove, postDelete), each named runbook.
3. Each action is *expanded* into the tree of task instances it runs: an app-level system action
   has one callRunbook task per entity that has a part in it (named after the entity), each
   calls that entity's fragment, which may call further runbooks. A task's id is its path of
   names (`S1/install/configure`), so an instance knows its ancestors, which is what lifting
   implicit dependencies to the enclosing callRunbook tasks needs.
4. Macros are resolved with `operators.calm.macros` in a `MacroContext` built from the spec,
   where every attribute that some setvar or http task sets exists (its value comes at run time).
   In an action, a reference to an attribute that a task of the same action sets is kept for run
   time and makes the reader depend on the setter; any other is resolved before the run (Calm's
   rule). Secrets and moment built-ins (calm_time...) are always kept for run time.
5. A dependency between a getter T1 and a setter T2 becomes an orchestration edge T2 -> T1 in
   the runbook where their paths part (their own runbook when they share one, else between the
   callRunbook tasks that enclose them). Those between entities in create are *promoted*: they
   join `dependsOn` and hold for every system action.
6. The entity dependency graph (networkx) holds inherent (substrate <- packages <- services of a
   deployment), explicit (`dependsOn`) and promoted dependencies. A cycle is an error naming it.
   For each system action the graph is restricted to the entities that have a part in it (paths
   through the others are kept) and oriented: dependencies first for create, start and restart,
   dependents first for stop and delete.
7. Calm's rules for user edits (an app-level action named like a system action in
   spec.actions) use `previous` (`CompiledState`): see `UserEdits`.

The package: `structures` (results and internal structures), `state` (what the parts share),
`fragments` (steps 2-3), `analysis` (step 4), `links` (steps 5-6), `edits` (step 7), `steps`
(`compile_blueprint` and the order of the steps).
"""

from operators.calm.compiler.steps import compile_blueprint
from operators.calm.compiler.structures import (
    MAX_TASKS_PER_ACTION,
    STATUS_LIMIT,
    CompileResult,
    MacroDecision,
    blueprint_state,
    lift,
)

__all__ = [
    "MAX_TASKS_PER_ACTION", "STATUS_LIMIT", "CompileResult", "MacroDecision", "blueprint_state", "compile_blueprint",
    "lift",
]
