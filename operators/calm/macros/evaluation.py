"""Evaluation: `render` at run time, `partial_render` at compile time (what is known now)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from datetime import time as time_of_day

from operators.calm.macros.builtins import BUILTINS, CONTEXT_BUILTINS, MOMENT_BUILTINS, within_window
from operators.calm.macros.context import BuiltinValues, EvaluatedValue, MacroContext, MacroValue, Secret
from operators.calm.macros.lexer import CLOSE, MAX_INT_DIGITS, OPEN, SECRET_MASK, WHOLE_NUMBER, MacroError
from operators.calm.macros.parser import as_template
from operators.calm.macros.resolution import Resolver, RuntimeNames, RuntimeValues, check
from operators.calm.macros.tree import (
    BinaryOp,
    Call,
    CredRef,
    Index,
    IntLiteral,
    Node,
    Ref,
    StringLiteral,
    Template,
    Text,
    unparse,
)


def _normalize(value: MacroValue | Secret, position: int, macro: str | None) -> EvaluatedValue:
    """A value as the evaluator handles it; booleans read as YAML writes them (true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        items: list[str | int] = []
        for item in value:
            if isinstance(item, bool):
                items.append("true" if item else "false")
            elif isinstance(item, str | int):
                items.append(item)
            else:
                raise MacroError(f"a list value holds a {type(item).__name__}, not text or a number", position, macro)
        return tuple(items)
    raise MacroError(f"a value of type {type(value).__name__} cannot be used in a macro", position, macro)


def _text(value: EvaluatedValue) -> str:
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _apply_pure(name: str, args: Sequence[EvaluatedValue], position: int, macro: str | None) -> EvaluatedValue:
    """The built-ins that are functions of their arguments only (safe to run before the run)."""
    if name == "calm_string":
        return _text(args[0])
    if name == "calm_int":
        value = args[0]
        if isinstance(value, int):
            return value
        if isinstance(value, str) and WHOLE_NUMBER.fullmatch(value.strip()):
            return int(value.strip())
        raise MacroError("calm_int: the value is not a whole number", position, macro)
    if name == "calm_b64encode":
        return base64.b64encode(_text(args[0]).encode("utf-8")).decode("ascii")
    if name == "calm_b64decode":
        try:
            return base64.b64decode(_text(args[0]).strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise MacroError("calm_b64decode: the value is not base64 of UTF-8 text", position, macro) from None
    raise AssertionError(f"not a pure built-in: {name}")


def _binary(node: BinaryOp, left: EvaluatedValue, right: EvaluatedValue, macro: str | None) -> EvaluatedValue:
    if isinstance(left, int) and isinstance(right, int):
        return left + right if node.operator == "+" else left - right
    if node.operator == "+" and isinstance(left, str) and isinstance(right, str):
        return left + right
    if node.operator == "-":
        raise MacroError("'-' subtracts whole numbers only: convert with calm_int(...)", node.position, macro)
    raise MacroError(
        "'+' adds two numbers or joins two texts: convert with calm_int(...) or calm_string(...)",
        node.position,
        macro,
    )


def _index(node: Index, target: EvaluatedValue, index: EvaluatedValue, macro: str | None) -> EvaluatedValue:
    if not isinstance(index, int):
        raise MacroError("an index must be a whole number: convert with calm_int(...)", node.position, macro)
    items: Sequence[str | int]
    if isinstance(target, tuple):
        items = target
    elif isinstance(target, str):
        items = target.split(",")  # a multi-valued property that travelled as comma-separated text
    else:
        raise MacroError("only a list of values can be indexed", node.position, macro)
    if not 0 <= index < len(items):
        raise MacroError(f"index {index} is out of range ({len(items)} values)", node.position, macro)
    return items[index]


def _is_within(now: datetime, first: str, second: str, position: int, macro: str | None) -> str:
    """'1' if `now` is in the window, ends included, else '0'.

    Times of day are compared with the wall-clock time of `now` (the clock's time zone); a window
    whose start is after its end wraps midnight ("22:00" to "06:00"). Moments without a zone are
    taken in the clock's zone."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    window = within_window(first, second, position, macro)
    if isinstance(window[0], datetime) and isinstance(window[1], datetime):
        start, end = (m if m.tzinfo is not None else m.replace(tzinfo=now.tzinfo) for m in window)
        if start > end:
            raise MacroError("calm_is_within: the window starts after it ends", position, macro)
        return "1" if start <= now <= end else "0"
    assert isinstance(window[0], time_of_day) and isinstance(window[1], time_of_day)
    clock_time = now.time()
    start_time, end_time = window[0], window[1]
    if start_time <= end_time:
        return "1" if start_time <= clock_time <= end_time else "0"
    return "1" if clock_time >= start_time or clock_time <= end_time else "0"


def _strftime(
    now: datetime, args: Sequence[EvaluatedValue], default: str, name: str, position: int, macro: str | None
) -> str:
    if args and not isinstance(args[0], str):
        raise MacroError(f"{name}: the format must be text (a strftime format)", position, macro)
    fmt = args[0] if args and isinstance(args[0], str) else default
    try:
        return now.strftime(fmt)
    except ValueError:
        raise MacroError(f"{name}: invalid format", position, macro) from None


def _context_builtin(name: str, values: BuiltinValues) -> EvaluatedValue | None:
    """The app-dependent built-ins; None while the context does not know them."""
    if name in CONTEXT_BUILTINS:
        value: str | int | None = getattr(values, CONTEXT_BUILTINS[name])
        return value
    if name in ("calm_unique", "calm_unique_hash"):
        if values.application_uuid is None:
            return None
        digest = hashlib.sha256(f"{name}/{values.application_uuid}".encode()).digest()
        if name == "calm_unique":
            return 100_000 + int.from_bytes(digest[:8], "big") % 900_000
        return digest.hex()[:32]
    return None


class _Renderer:
    """Run-time evaluation: every name has a value by now, or it is an error."""

    def __init__(
        self,
        context: MacroContext,
        values: Mapping[tuple[str | None, str], MacroValue],
        secrets: Callable[[str], str] | None,
        clock: Callable[[], datetime],
        random_source: random.Random,
    ) -> None:
        self.context = context
        self.values = values
        self.resolver = Resolver(context, values.keys())
        self.secrets = secrets
        self.clock = clock
        self.random_source = random_source
        self.fetched: dict[str, str] = {}

    def secret(self, secret: Secret) -> str:
        if self.secrets is None:
            return SECRET_MASK
        if secret.reference not in self.fetched:
            self.fetched[secret.reference] = self.secrets(secret.reference)
        return self.fetched[secret.reference]

    def evaluate(self, node: Node, macro: str) -> EvaluatedValue:
        if isinstance(node, StringLiteral | IntLiteral):
            return node.value
        if isinstance(node, Ref | CredRef):
            return self.reference(node, macro)
        if isinstance(node, Call):
            return self.call(node, macro)
        if isinstance(node, Index):
            return _index(node, self.evaluate(node.target, macro), self.evaluate(node.index, macro), macro)
        return _binary(node, self.evaluate(node.left, macro), self.evaluate(node.right, macro), macro)

    def reference(self, ref: Ref | CredRef, macro: str) -> EvaluatedValue:
        resolution = self.resolver.resolve(ref, macro)
        if resolution.credential is not None:
            credential = resolution.credential
            return credential.username if resolution.attribute == "username" else self.secret(credential.secret)
        if resolution.runtime:
            return _normalize(self.values[resolution.key], ref.position, macro)
        assert resolution.entity is not None  # not run-time, so an entity's declared attribute
        stored = resolution.entity.attributes[resolution.attribute]
        if isinstance(stored, Secret):
            return self.secret(stored)
        if stored is None:
            raise MacroError(
                f"'{resolution.attribute}' of {resolution.entity.kind} {resolution.entity.name} has no value yet",
                ref.position,
                macro,
            )
        return _normalize(stored, ref.position, macro)

    def call(self, node: Call, macro: str) -> EvaluatedValue:
        args = [self.evaluate(arg, macro) for arg in node.args]
        if node.name == "calm_time":
            return _strftime(self.clock(), args, "%H:%M:%S", node.name, node.position, macro)
        if node.name == "calm_date":
            return _strftime(self.clock(), args, "%Y-%m-%d", node.name, node.position, macro)
        if node.name == "calm_random":
            return self.random_source.randrange(1_000_000)
        if node.name == "calm_is_within":
            if not all(isinstance(arg, str) for arg in args):
                raise MacroError("calm_is_within: both ends of the window must be text", node.position, macro)
            return _is_within(self.clock(), _text(args[0]), _text(args[1]), node.position, macro)
        if node.name in BUILTINS and BUILTINS[node.name].max_args == 0:
            value = _context_builtin(node.name, self.context.builtins)
            if value is None:
                raise MacroError(f"{node.name} is not known in this context", node.position, macro)
            return value
        return _apply_pure(node.name, args, node.position, macro)


def _as_value_map(values: RuntimeValues | None) -> Mapping[tuple[str | None, str], MacroValue]:
    result: dict[tuple[str | None, str], MacroValue] = {}
    if values is not None:
        for (owner, attribute), value in values.items():
            result[(owner, attribute)] = value
    return result


def _system_clock() -> datetime:
    return datetime.now(UTC)


def render(
    template: Template | str,
    context: MacroContext,
    values: RuntimeValues | None = None,
    *,
    secrets: Callable[[str], str] | None = None,
    clock: Callable[[], datetime] | None = None,
    random_source: random.Random | None = None,
) -> str:
    """Evaluate every macro at run time: the final text a task uses.

    `values` are the ones produced so far, keyed like `RuntimeNames` ((entity, attribute), or
    (None, name) for a run variable); they take precedence over the context's. `secrets` is called
    with a vault reference when, and only when, a secret is evaluated (once per reference); without
    it secrets read as `SECRET_MASK`, which gives the masked copy of a script for storage. `clock`
    (default: now in UTC) and `random_source` (default: the system's) make the time and random
    built-ins testable. Raises MacroError on the first macro that cannot be evaluated; what the
    `secrets` callable raises (a vault failure is not a template error) passes through unchanged."""
    parsed = as_template(template)
    renderer = _Renderer(
        context,
        _as_value_map(values),
        secrets,
        clock or _system_clock,
        random_source or random.SystemRandom(),
    )
    out: list[str] = []
    for part in parsed.parts:
        if isinstance(part, Text):
            out.append(part.text)
        else:
            out.append(_text(renderer.evaluate(part.expression, part.source)))
    return "".join(out)


@dataclass(frozen=True)
class _Folded:
    """A sub-expression after partial evaluation: its run-time form and, when known now, its value."""

    node: Node
    value: EvaluatedValue | None


class _PartialRenderer:
    """Before-the-run evaluation: resolve what is known, rewrite the rest for `render`."""

    def __init__(self, context: MacroContext, runtime_names: RuntimeNames) -> None:
        self.context = context
        self.resolver = Resolver(context, runtime_names)

    def fold(self, node: Node, macro: str) -> _Folded:
        if isinstance(node, StringLiteral | IntLiteral):
            return _Folded(node, node.value)
        if isinstance(node, Ref | CredRef):
            return self.reference(node, macro)
        if isinstance(node, Call):
            return self.call(node, macro)
        if isinstance(node, Index):
            target, index = self.fold(node.target, macro), self.fold(node.index, macro)
            if target.value is not None and index.value is not None:
                return _Folded(node, _index(node, target.value, index.value, macro))
            return _Folded(replace(node, target=_literal(target), index=_literal(index)), None)
        left, right = self.fold(node.left, macro), self.fold(node.right, macro)
        if left.value is not None and right.value is not None:
            return _Folded(node, _binary(node, left.value, right.value, macro))
        return _Folded(replace(node, left=_literal(left), right=_literal(right)), None)

    def reference(self, ref: Ref | CredRef, macro: str) -> _Folded:
        resolution = self.resolver.resolve(ref, macro)
        kept = resolution.canonical(ref.position)
        if resolution.credential is not None:
            if resolution.attribute == "username":
                return _Folded(kept, resolution.credential.username)
            return _Folded(kept, None)  # a secret: fetched only when the task runs
        if resolution.runtime:
            return _Folded(kept, None)
        assert resolution.entity is not None
        stored = resolution.entity.attributes[resolution.attribute]
        if isinstance(stored, Secret):
            return _Folded(kept, None)
        if stored is None:
            raise MacroError(
                f"'{resolution.attribute}' of {resolution.entity.kind} {resolution.entity.name} has no value "
                "before the run and no task of this action sets it",
                ref.position,
                macro,
            )
        return _Folded(kept, _normalize(stored, ref.position, macro))

    def call(self, node: Call, macro: str) -> _Folded:
        args = [self.fold(arg, macro) for arg in node.args]
        kept = replace(node, args=tuple(_literal(arg) for arg in args))
        if node.name in MOMENT_BUILTINS:
            return _Folded(kept, None)
        if BUILTINS[node.name].max_args == 0:
            return _Folded(kept, _context_builtin(node.name, self.context.builtins))
        known = [arg.value for arg in args]
        if any(value is None for value in known):
            return _Folded(kept, None)
        return _Folded(kept, _apply_pure(node.name, [v for v in known if v is not None], node.position, macro))


def _literal(folded: _Folded) -> Node:
    """A sub-expression inside a macro kept for run time: its value as a literal when known now
    (a number or a text), else its run-time form."""
    value = folded.value
    if isinstance(value, str):
        return StringLiteral(value, folded.node.position)
    if isinstance(value, int) and len(str(abs(value))) <= MAX_INT_DIGITS:
        return IntLiteral(value, folded.node.position)
    return folded.node


def _protect(text: str) -> str:
    """Literal text as it must appear in a template: a ``@@{`` in it written as the macro ``@@{"@@{"}@@``,
    so that rendering the output later does not take a resolved value for a macro (a value that
    reads ``@@{db.secret}@@`` must stay text, not fetch a secret)."""
    return text.replace(OPEN, '@@{"@@{"}@@')


def partial_render(
    template: Template | str,
    context: MacroContext,
    runtime_names: RuntimeNames = frozenset(),
) -> str:
    """Calm's rule, applied: resolve now every macro whose value is known before the run,
    and keep for run time, as macros, those that read something set by a task of the action
    (`runtime_names`), a secret, or the moment (calm_time, calm_date, calm_random, calm_is_within).

    Kept macros are rewritten so that `render` reads them exactly with any context of the same app:
    entity attributes in the namespaced spelling (``@@{Service_S1_address}@@``), application ones as
    ``@@{Application.x}@@``, sub-expressions known now folded into literals. Resolved values that
    contain ``@@{`` are protected (see `_protect`). Raises the first `check` error, or MacroError
    when an attribute has no value yet and no task sets it, or a built-in fails on known arguments."""
    parsed = as_template(template)
    errors = check(parsed, context, runtime_names)
    if errors:
        raise errors[0]
    folder = _PartialRenderer(context, runtime_names)
    out: list[str] = []
    pending_text: list[str] = []  # adjacent literal text and resolved values, protected together
    for part in parsed.parts:
        if isinstance(part, Text):
            pending_text.append(part.text)
            continue
        folded = folder.fold(part.expression, part.source)
        if folded.value is not None:
            pending_text.append(_text(folded.value))
            continue
        out.append(_protect("".join(pending_text)))
        pending_text = []
        out.append(f"{OPEN}{unparse(folded.node)}{CLOSE}")
    out.append(_protect("".join(pending_text)))
    return "".join(out)
