"""What a `puppet apply --noop` says would change, read from its console log (Puppet's noop report).

Puppet logs each property it would change as a notice on the resource's path, ending in ``(noop)``:

    Notice: /Stage[main]/Main/File[/etc/motd]/content: current_value '{md5}d41d...', should be '{md5}9a0...' (noop)
    Notice: /Stage[main]/Main/File[/tmp/x]/ensure: current_value 'absent', should be 'file' (noop)
    Notice: /Stage[main]/Main/Exec[reload]/returns: current_value 'notrun', should be ['0'] (noop)

(Puppet 3 wrote ``is absent, should be file (noop)``), then the refreshes it would have sent
(``Notice: Class[Main]: Would have triggered 'refresh' from 2 events``) and the end of the run
(``Notice: Applied catalog in 0.02 seconds``, Puppet 3: ``Finished catalog run in ...``).

`NoopReport` collects the resources (``File[/etc/motd]``) and their properties from those lines; it
keeps no value (the current and wanted values may be configuration a reader of the run may not see).
It keeps at most `MAX_RESOURCES` resources' names and counts all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_RESOURCES = 200
"""Resources listed by one report (the count is exact)."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PROPERTY = re.compile(r"[a-z_][a-z0-9_]*")
_REFRESH = re.compile(r"Would have triggered '[a-z_]+' from ([0-9]{1,9}) events?")
MAX_PATH = 4096
"""Longer resource paths are kept whole rather than parsed (lines are read with string operations and
anchored patterns only: a node's output never costs more than linear time)."""
_RESOURCE = re.compile(r"[A-Z][A-Za-z0-9_]*(?:::[A-Z][A-Za-z0-9_]*)*\[")


def resource_of(path: str) -> str:
    """The resource a log path names: its last `Type[title]` (`/Stage[main]/Main/File[/tmp/x]` ->
    `File[/tmp/x]`; a title may hold `/` and `[`, so the path is not split on them)."""
    for match in _RESOURCE.finditer(path):
        start = match.start()
        if start == 0 or path[start - 1] != "/":
            continue
        rest = path[start:]
        if _balanced(rest):
            return rest
    return path.rsplit("/", 1)[-1] or path


def _balanced(text: str) -> bool:
    """Whether `Type[...]` closes exactly at the end of `text`."""
    depth = 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


@dataclass
class NoopReport:
    """The would-change report of one puppet noop run, fed line by line."""

    properties: dict[str, list[str]] = field(default_factory=dict)
    """Resource -> the properties that would change, in the order logged (at most MAX_RESOURCES kept)."""
    changes: int = 0
    """Resources that would change (all of them, kept or not)."""
    refreshes: int = 0
    """Refresh events that would have been triggered."""

    def feed(self, line: str, stream: str = "stdout") -> None:
        text = _ANSI.sub("", line).strip()
        if text.startswith("Notice: /") and text.endswith("(noop)"):
            self._change(text[len("Notice: "):-len("(noop)")])
            return
        if text.startswith("Notice: ") and "Would have triggered" in text:
            refresh = _REFRESH.search(text)
            if refresh is not None:
                self.refreshes += int(refresh.group(1))

    def _change(self, body: str) -> None:
        """`/Stage[main]/Main/File[/tmp/x]/content: current_value ..., should be ... ` (or `is ...`)."""
        at = body.find(": current_value ")
        if at < 0:
            at = body.find(": is ")
        if at < 0 or ", should be " not in body[at:]:
            return
        path, _, prop = body[:at].rpartition("/")
        if not path.endswith("]") or not _PROPERTY.fullmatch(prop):
            return
        resource = resource_of(path) if len(path) <= MAX_PATH else path
        props = self.properties.get(resource)
        if props is None:
            self.changes += 1
            if len(self.properties) >= MAX_RESOURCES:
                return
            props = self.properties[resource] = []
        if prop not in props:
            props.append(prop)

    def details(self) -> dict[str, Any]:
        """For the step's record: `{wouldChange, resources: ["File[/tmp/x] (content, mode)", ...], refreshes}`."""
        return {"wouldChange": self.changes, "refreshes": self.refreshes,
                "resources": [f"{r} ({', '.join(p)})" for r, p in self.properties.items()]}

    def summary(self) -> str:
        if not self.changes:
            return "nothing would change"
        return f"{self.changes} resource(s) would change"
