"""The syntax tree of a text: literal pieces and macros, and the expressions inside them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias


@dataclass(frozen=True)
class StringLiteral:
    """A quoted string: ``"10:00"``."""

    value: str
    position: int


@dataclass(frozen=True)
class IntLiteral:
    """A whole number: ``1``, ``-2``."""

    value: int
    position: int


@dataclass(frozen=True)
class Ref:
    """``Object.attribute`` (object set) or an unqualified ``attribute`` (object None).

    The object may be a kind (``Deployment``), an entity or a credential: only a context tells."""

    object: str | None
    attribute: str
    position: int


CredentialField: TypeAlias = Literal["username", "secret"]


@dataclass(frozen=True)
class CredRef:
    """``credential.username`` or ``credential.secret``, once `bind` has told it from a `Ref`."""

    credential: str
    field: CredentialField
    position: int


@dataclass(frozen=True)
class Call:
    """A built-in: ``calm_int(x)``; a bare built-in name such as ``calm_time`` is a call with no args."""

    name: str
    args: tuple[Node, ...]
    position: int


@dataclass(frozen=True)
class Index:
    """``target[index]``: one value of a multi-valued attribute (one per replica), e.g.
    ``S1.address[calm_array_index]``."""

    target: Node
    index: Node
    position: int


@dataclass(frozen=True)
class BinaryOp:
    """``left + right`` or ``left - right``; `position` is the operator's."""

    operator: Literal["+", "-"]
    left: Node
    right: Node
    position: int


Node: TypeAlias = StringLiteral | IntLiteral | Ref | CredRef | Call | Index | BinaryOp


@dataclass(frozen=True)
class Text:
    """Literal text between macros, kept as written."""

    text: str
    position: int


@dataclass(frozen=True)
class Macro:
    """One ``@@{ ... }@@``: its expression, where it starts and its source (for error messages)."""

    expression: Node
    position: int
    source: str


Part: TypeAlias = Text | Macro


@dataclass(frozen=True)
class Template:
    """A parsed text: literal parts and macros, in order. Immutable, so parse once and reuse."""

    parts: tuple[Part, ...]
    source: str

    @property
    def macros(self) -> tuple[Macro, ...]:
        return tuple(part for part in self.parts if isinstance(part, Macro))

    @property
    def is_literal(self) -> bool:
        """Whether the text has no macro at all (rendering gives it back unchanged)."""
        return not self.macros

    def __str__(self) -> str:
        return self.source


def walk(node: Node) -> Iterator[Node]:
    """Every node of an expression, the node itself first, then its children left to right."""
    yield node
    if isinstance(node, Call):
        for arg in node.args:
            yield from walk(arg)
    elif isinstance(node, Index):
        yield from walk(node.target)
        yield from walk(node.index)
    elif isinstance(node, BinaryOp):
        yield from walk(node.left)
        yield from walk(node.right)


def unparse(node: Node) -> str:
    """The canonical source of an expression (without ``@@{ }@@``): parsing it gives the same tree.

    `partial_render` writes the macros it keeps for run time with it."""
    if isinstance(node, StringLiteral):
        escaped = node.value.replace("\\", "\\\\").replace('"', '\\"')
        escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
        return f'"{escaped}"'
    if isinstance(node, IntLiteral):
        return str(node.value)
    if isinstance(node, Ref):
        return node.attribute if node.object is None else f"{node.object}.{node.attribute}"
    if isinstance(node, CredRef):
        return f"{node.credential}.{node.field}"
    if isinstance(node, Call):
        if not node.args:
            return node.name
        return f"{node.name}({', '.join(unparse(arg) for arg in node.args)})"
    if isinstance(node, Index):
        target = unparse(node.target)
        if isinstance(node.target, BinaryOp) or (isinstance(node.target, IntLiteral) and node.target.value < 0):
            target = f"({target})"
        return f"{target}[{unparse(node.index)}]"
    right = unparse(node.right)
    if isinstance(node.right, BinaryOp):  # operators associate to the left
        right = f"({right})"
    return f"{unparse(node.left)} {node.operator} {right}"
