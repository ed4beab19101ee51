"""The render hook the runner process loads (``--hooks operators.calm.runhooks:hooks``).

What `operators.calm.workflow` kept for run time is rendered here, when a step starts, with the
variables visible to the step (`pipelines` hands them over, secrets revealed only when read):

- ``@@{Service_DB_db_url}@@`` (an entity's property, namespaced Kind_Entity_name): the value the
  replica the step runs on set, when the entity lives on that replica; otherwise the values of all
  the entity's replicas, joined with "," (a multi-valued attribute);
- ``@@{Application.x}@@`` and ``@@{x}@@``: the run variable;
- ``@@{db_cred.secret}@@`` and secret variables: the workflow's (sealed) secret of that name;
- ``calm_array_index`` and the like: the target's inputs; moment built-ins are computed now.

The runner masks every secret it revealed in whatever it stores, on top of this hook.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import replace

from operators.calm import macros
from operators.calm.workflow import LAYOUT_VARIABLE, TARGET_VARIABLE, secret_name
from pipelines.hooks import Hooks


@functools.lru_cache(maxsize=16)
def _layout(raw: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    data = json.loads(raw) if raw else {}
    return dict(data.get("prefixes") or {}), dict(data.get("replicas") or {})


def _property(name: str, variables: Mapping[str, str]) -> str | None:
    prefixes, replicas = _layout(variables.get(LAYOUT_VARIABLE, ""))
    match = max((p for p in prefixes if name.startswith(p)), key=len, default=None)
    if match is None:
        return None
    attribute = name[len(match):]
    here = variables.get(TARGET_VARIABLE, "")
    owners = replicas.get(prefixes[match], [])
    if here in owners:
        return variables.get(f"{here}:{attribute}")
    values = [variables[f"{r}:{attribute}"] for r in owners if f"{r}:{attribute}" in variables]
    return ",".join(values) if values else None


def _lookup(node: macros.Node, variables: Mapping[str, str], macro: str) -> str:
    name = secret_name(node)
    assert name is not None
    if name in variables:
        return variables[name]
    if isinstance(node, macros.Ref):
        if node.object is None:
            value = _property(node.attribute, variables)
            if value is not None:
                return value
        elif node.object == "Application" and node.attribute in variables:
            return variables[node.attribute]
    raise macros.MacroError(f"{name} has no value yet", node.position, macro)


def _substitute(node: macros.Node, variables: Mapping[str, str], macro: str) -> macros.Node:
    if isinstance(node, macros.Ref | macros.CredRef):
        value = _lookup(node, variables, macro)
        return macros.StringLiteral(value, node.position)
    if isinstance(node, macros.Call):
        if not node.args and node.name in variables:
            value = variables[node.name]
            if value.lstrip("-").isdigit():
                return macros.IntLiteral(int(value), node.position)
            return macros.StringLiteral(value, node.position)
        return replace(node, args=tuple(_substitute(a, variables, macro) for a in node.args))
    if isinstance(node, macros.Index):
        return replace(node, target=_substitute(node.target, variables, macro),
                       index=_substitute(node.index, variables, macro))
    if isinstance(node, macros.BinaryOp):
        return replace(node, left=_substitute(node.left, variables, macro),
                       right=_substitute(node.right, variables, macro))
    return node


EMPTY = macros.MacroContext()


def render(text: str, variables: Mapping[str, str]) -> str:
    if "@@{" not in text:
        return text
    out: list[str] = []
    for part in macros.parse(text).parts:
        if isinstance(part, macros.Text):
            out.append(part.text)
            continue
        node = _substitute(part.expression, variables, part.source)
        out.append(macros.render(f"{macros.OPEN}{macros.unparse(node)}{macros.CLOSE}", EMPTY))
    return "".join(out)


hooks = Hooks(render=render)
