"""User edits of system actions: kept until the dependency list changes."""

from __future__ import annotations

from collections.abc import Mapping

from operators.calm.models import (
    SYSTEM_ACTIONS,
    CompiledState,
    EditRecord,
)


class UserEdits:
    """Calm's rules for user-edited system actions, across compiles.

    An app-level action named like a system action in spec.actions is the user's edit of it. An
    edit seen for the first time (or changed) is accepted: the action is user-edited. The same
    edit stays accepted while the dependency list is unchanged. When the dependency list changes,
    every accepted edit is thrown away (all actions are rebuilt as system-generated, and the
    caller emits a Warning Event). Kubernetes has no "do you want to proceed?": the edit stays in
    spec (Stead never writes spec), so it is remembered as discarded, by digest, and ignored until
    the user edits it again (a new digest) or removes it.
    """

    def __init__(self, previous: CompiledState | None, digest: str, edits: Mapping[str, tuple[int, str]]) -> None:
        before = {record.action: record for record in previous.edits} if previous is not None else {}
        changed = previous is not None and previous.dependency_digest != digest
        self.accepted: set[str] = set()
        self.records: list[EditRecord] = []
        self.discarded_now: list[str] = []
        self.warnings: list[str] = []
        self.paths: dict[str, str] = {}
        for name in SYSTEM_ACTIONS:
            if name not in edits:
                continue
            i, edit_digest = edits[name]
            self.paths[name] = f"spec.actions[{i}]"
            old = before.get(name)
            if old is not None and old.digest == edit_digest and (not old.accepted or changed):
                if old.accepted:
                    self.discarded_now.append(name)
                self.records.append(EditRecord(action=name, digest=edit_digest, accepted=False))
                self.warnings.append(f"spec.actions[{i}]: ignored: this edit of {name} was made before the dependency "
                                     "list changed; edit it again to apply it, or remove it")
            else:
                self.accepted.add(name)
                self.records.append(EditRecord(action=name, digest=edit_digest, accepted=True))

    def message(self) -> str | None:
        if not self.discarded_now:
            return None
        names = ", ".join(self.discarded_now)
        paths = ", ".join(self.paths[n] for n in self.discarded_now)
        return (f"the dependency list changed: the user-edited actions ({names}) were thrown away and all actions "
                f"rebuilt as system-generated; {paths} will be ignored until edited again")
