"""Calm macros (seed 000): ``@@{ ... }@@`` in scripts, URLs and bodies, from text to value.

A task's text is parsed once into a `Template` (literal text and macros). The compiler then uses it
three ways, following the seed's "Implementation" section:

- `references` lists every ``Object.attribute`` a text reads: a task that reads an attribute which
  another task of the same action sets depends on it (the implicit dependencies).
- `check` proves every reference names something that exists in the `MacroContext` (the chain
  Application → Substrate → Deployment → Package → Service, the credentials) or is set at run time
  by a task of the action; anything else is an error with its position, before anything runs.
- `partial_render` is the seed's decision: a macro whose value some task of the action sets is
  kept for run time, every other one is resolved now. `render` finishes the job at run time with
  the values produced so far, and is the only place where a secret is ever fetched.

The lexer has the seed's two states: outside a macro it looks only for ``@@{``; inside, it reads
tokens up to ``}@@``. The inside is a small expression language, parsed by recursive descent::

    macro    := expr
    expr     := postfix (('+' | '-') postfix)*
    postfix  := primary ('[' expr ']')*
    primary  := STRING | INT | '-' INT | '(' expr ')'
              | NAME '(' [expr (',' expr)*] ')'       a built-in function: calm_int(x)
              | NAME '.' NAME                          Object.attribute, or credential.username
              | NAME                                   an unqualified name, or a built-in: calm_time

Decisions where the seed is silent or ambiguous (each is also stated where it is implemented):

- Strings are quoted with ``"`` or ``'`` and know the escapes ``\\\\ \\" \\' \\n \\t \\r``. A ``}@@`` inside a
  string does not end the macro, so that any text can be written: ``@@{"@@{"}@@`` is how a literal
  ``@@{`` is written, and how `partial_render` protects resolved values that contain one.
- Names are identifiers (``[A-Za-z_][A-Za-z0-9_]*``, as the Blueprint model requires), so ``-`` is
  subtraction. ``+`` adds two numbers or joins two texts; mixing them is an error (use calm_int or
  calm_string), which keeps ``@@{calm_int(calm_array_index) + 1}@@`` unsurprising.
- ``@@{cred.username}@@`` and ``@@{S1.address}@@`` have the same syntax, so `parse` yields `Ref` for
  both; resolution against a context (which knows the credential names) tells them apart, and
  `bind` rewrites the credential ones into `CredRef` for callers that want to see them.
- Object names in ``Object.attribute`` are, in this order: a kind (``Deployment.x`` is the deployment
  around the current entity, as in the seed), an entity, a credential. Names are unique across
  entities and credentials (the Blueprint requires it; `MacroContext` refuses duplicates).
- Properties are inherited: an entity sees its own attributes, then those of the entities around it.
  ``@@{x}@@`` walks from the current entity outwards (Service → Package → Deployment → Substrate →
  Application); ``@@{S2.x}@@`` walks the same way from S2.
- Namespacing: the seed stores the property p of object O of kind K as ``K_O_p`` so that entities
  sharing one machine do not collide. `partial_render` writes every run-time entity reference in
  that spelling (``@@{Substrate_vm1_ip_address}@@``), which names the owner exactly whatever entity
  the task runs on; such a name is understood by the resolver (it names O's own property p, with no
  inheritance). Application properties are not namespaced (seed: "no namespacing is done for Entity
  properties"); they are written ``@@{Application.p}@@``.
- Built-ins whose value depends on the moment (calm_time, calm_date, calm_random, calm_is_within)
  are always kept for run time; those that depend on the app (calm_application_uuid...) are
  resolved as soon as the context knows them. calm_unique and calm_unique_hash are derived from the
  application uuid: unique to every application and the same for every task of it.
- Secrets (``cred.secret`` and secret variables) are never resolved before the run. `render` fetches
  them through its ``secrets`` callable; without one it writes `SECRET_MASK` instead, which is the
  masked copy of a script the seed asks to store. Error messages never quote a value.
"""

from __future__ import annotations

import base64
import binascii
import copy
import difflib
import hashlib
import random
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from datetime import time as time_of_day
from enum import Enum
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

__all__ = [
    "BUILTINS",
    "ENTITY_KINDS",
    "MOMENT_BUILTINS",
    "SECRET_MASK",
    "AttributeValue",
    "BinaryOp",
    "Builtin",
    "BuiltinValues",
    "Call",
    "CredRef",
    "Credential",
    "Entity",
    "EntityKind",
    "Index",
    "IntLiteral",
    "Macro",
    "MacroContext",
    "MacroError",
    "MacroValue",
    "Node",
    "Ref",
    "Resolution",
    "RuntimeNames",
    "RuntimeValues",
    "Secret",
    "StringLiteral",
    "Template",
    "Text",
    "Token",
    "TokenKind",
    "bind",
    "check",
    "namespace",
    "namespaced_name",
    "parse",
    "partial_render",
    "references",
    "render",
    "resolve",
    "tokenize",
    "unparse",
    "walk",
]

OPEN: Final = "@@{"
CLOSE: Final = "}@@"
SECRET_MASK: Final = "********"
"""What `render` writes for a secret when it is given no way to fetch secrets."""

MAX_DEPTH: Final = 48
"""Deepest expression the parser accepts: evaluation recurses, and a hostile text must not be able
to exhaust the interpreter's stack (only `MacroError` may come out of `parse`)."""

MAX_INT_DIGITS: Final = 40
"""Longest number literal: far beyond any real index or port, far below Python's int/str limit."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")
_WHOLE_NUMBER = re.compile(rf"[+-]?[0-9]{{1,{MAX_INT_DIGITS}}}")
_WHITESPACE: Final = frozenset(" \t\r\n")
_DIGIT_CHARS: Final = frozenset("0123456789")
_ESCAPES: Final = MappingProxyType({"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"})


class MacroError(ValueError):
    """A problem in a text's macros, with the 0-based offset of the character it is about.

    One type for every failure of this module (malformed text, unknown name, bad argument), so a
    caller can turn any of them into a compile error or a Stalled condition without guessing.
    `macro` is the source text of the macro concerned, when there is one; messages never contain
    a value, so they are safe for status, events and logs.
    """

    def __init__(self, message: str, position: int, macro: str | None = None) -> None:
        super().__init__(message, position, macro)
        self.message = message
        self.position = position
        self.macro = macro

    def __str__(self) -> str:
        return f"position {self.position}: {self.message}"


# --- lexer ---------------------------------------------------------------------------------------


class TokenKind(Enum):
    """What a token is; the value is how error messages name it."""

    TEXT = "text"
    OPEN = "'@@{'"
    CLOSE = "'}@@'"
    NAME = "name"
    STRING = "string"
    INT = "number"
    DOT = "'.'"
    COMMA = "','"
    LPAREN = "'('"
    RPAREN = "')'"
    LBRACKET = "'['"
    RBRACKET = "']'"
    PLUS = "'+'"
    MINUS = "'-'"


_PUNCTUATION: Final = MappingProxyType(
    {
        ".": TokenKind.DOT,
        ",": TokenKind.COMMA,
        "(": TokenKind.LPAREN,
        ")": TokenKind.RPAREN,
        "[": TokenKind.LBRACKET,
        "]": TokenKind.RBRACKET,
        "+": TokenKind.PLUS,
        "-": TokenKind.MINUS,
    }
)


@dataclass(frozen=True)
class Token:
    """One token: `value` is the literal text (TEXT), the name, the decoded string, the digits (INT,
    with its sign) or the symbol itself; `position` and `end` delimit its source."""

    kind: TokenKind
    value: str
    position: int
    end: int


def tokenize(text: str) -> list[Token]:
    """The tokens of a whole text: TEXT outside macros, then each macro from OPEN to CLOSE.

    The lexer has the seed's two states. Outside, everything up to the next ``@@{`` is one TEXT
    token (so a lone ``@@``, braces or ``}@@`` are plain text). Inside, tokens are read up to ``}@@``.
    """
    tokens: list[Token] = []
    for piece in _pieces(text):
        if isinstance(piece, Token):
            tokens.append(piece)
        else:
            tokens.extend(piece)
    return tokens


def _pieces(text: str) -> Iterator[Token | list[Token]]:
    """The outside state: TEXT tokens, and each macro's token list lexed by the inside state."""
    position = 0
    while True:
        start = text.find(OPEN, position)
        if start < 0:
            break
        if start > position:
            yield Token(TokenKind.TEXT, text[position:start], position, start)
        macro_tokens = _lex_macro(text, start)
        yield macro_tokens
        position = macro_tokens[-1].end
    if position < len(text):
        yield Token(TokenKind.TEXT, text[position:], position, len(text))


def _lex_macro(text: str, start: int) -> list[Token]:
    """The inside state: the tokens of the macro opened at `start`, from OPEN to CLOSE."""
    if text.find(CLOSE, start + len(OPEN)) < 0:
        # Said first, at the opening: it is the real problem, whatever odd characters follow.
        raise MacroError("unterminated macro: '@@{' has no matching '}@@'", start)
    tokens = [Token(TokenKind.OPEN, OPEN, start, start + len(OPEN))]
    position = start + len(OPEN)
    length = len(text)
    while True:
        while position < length and text[position] in _WHITESPACE:
            position += 1
        if position >= length:
            raise MacroError("unterminated macro: '@@{' has no matching '}@@'", start)
        char = text[position]
        if text.startswith(CLOSE, position):
            tokens.append(Token(TokenKind.CLOSE, CLOSE, position, position + len(CLOSE)))
            return tokens
        if text.startswith(OPEN, position):
            raise MacroError("a macro cannot contain another macro ('@@{' inside '@@{ ... }@@')", position)
        name = _NAME.match(text, position)
        if name:
            tokens.append(Token(TokenKind.NAME, name.group(), position, name.end()))
            position = name.end()
        elif char in _DIGIT_CHARS or (char == "-" and _starts_negative_number(text, position, tokens)):
            token = _lex_number(text, position)
            tokens.append(token)
            position = token.end
        elif char in "\"'":
            token = _lex_string(text, position)
            tokens.append(token)
            position = token.end
        elif char in _PUNCTUATION:
            tokens.append(Token(_PUNCTUATION[char], char, position, position + 1))
            position += 1
        elif char == "{":
            raise MacroError("unexpected '{' inside a macro (braces do not nest in '@@{ ... }@@')", position)
        elif char == "}":
            raise MacroError("unexpected '}' inside a macro (a macro ends with '}@@')", position)
        else:
            raise MacroError(f"unexpected character {char!r} inside a macro", position)


def _starts_negative_number(text: str, position: int, tokens: Sequence[Token]) -> bool:
    """Whether the '-' at `position` starts a negative number rather than a subtraction: a digit follows
    and an operand is expected (after '@@{', '(', '[', ',' or an operator), so ``x -1`` subtracts."""
    return text[position + 1 : position + 2] in _DIGIT_CHARS and tokens[-1].kind in {
        TokenKind.OPEN,
        TokenKind.LPAREN,
        TokenKind.LBRACKET,
        TokenKind.COMMA,
        TokenKind.PLUS,
        TokenKind.MINUS,
    }


def _lex_number(text: str, start: int) -> Token:
    sign = "-" if text[start] == "-" else ""
    digits = _DIGITS.match(text, start + len(sign))
    assert digits is not None  # the caller saw a digit there
    end = digits.end()
    if end < len(text) and (text[end].isalnum() or text[end] == "_"):
        raise MacroError("a name cannot start with a digit", start)
    if len(digits.group()) > MAX_INT_DIGITS:
        raise MacroError(f"number too long (more than {MAX_INT_DIGITS} digits)", start)
    return Token(TokenKind.INT, sign + digits.group(), start, end)


def _lex_string(text: str, start: int) -> Token:
    quote = text[start]
    chars: list[str] = []
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == quote:
            return Token(TokenKind.STRING, "".join(chars), start, position + 1)
        if char == "\\":
            escaped = text[position + 1 : position + 2]
            if escaped not in _ESCAPES:
                shown = repr(escaped) if escaped else "the end of the text"
                raise MacroError(
                    f"unknown escape: backslash followed by {shown} (known: \\\\ \\\" \\' \\n \\t \\r)", position
                )
            chars.append(_ESCAPES[escaped])
            position += 2
            continue
        chars.append(char)
        position += 1
    raise MacroError(f"unterminated string: no closing {quote}", start)


# --- AST -----------------------------------------------------------------------------------------


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


# --- built-ins -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Builtin:
    """A built-in macro: how many arguments it takes, how to write it and what it gives."""

    name: str
    min_args: int
    max_args: int
    usage: str
    description: str


BUILTINS: Final[Mapping[str, Builtin]] = MappingProxyType(
    {
        builtin.name: builtin
        for builtin in (
            Builtin("calm_array_index", 0, 0, "calm_array_index", "index of the task's replica (0 for the first)"),
            Builtin("calm_blueprint_name", 0, 0, "calm_blueprint_name", "name of the app's blueprint"),
            Builtin("calm_blueprint_uuid", 0, 0, "calm_blueprint_uuid", "uuid of the app's blueprint"),
            Builtin("calm_application_name", 0, 0, "calm_application_name", "name of the application"),
            Builtin("calm_application_uuid", 0, 0, "calm_application_uuid", "uuid of the application"),
            Builtin("calm_project_name", 0, 0, "calm_project_name", "name of the application's project"),
            Builtin(
                "calm_is_within",
                2,
                2,
                'calm_is_within("08:00", "18:00")',
                "'1' if now is within the window (ends included), else '0'",
            ),
            Builtin("calm_time", 0, 1, 'calm_time or calm_time("%H:%M")', "current time, HH:MM:SS by default"),
            Builtin("calm_date", 0, 1, 'calm_date or calm_date("%d/%m/%Y")', "current date, YYYY-MM-DD by default"),
            Builtin("calm_unique", 0, 0, "calm_unique", "a six-digit number unique to the application"),
            Builtin("calm_unique_hash", 0, 0, "calm_unique_hash", "32 hex digits unique to the application"),
            Builtin("calm_random", 0, 0, "calm_random", "a random number from 0 to 999999, new each time"),
            Builtin("calm_int", 1, 1, "calm_int(x)", "the value as a whole number"),
            Builtin("calm_string", 1, 1, "calm_string(x)", "the value as text"),
            Builtin("calm_b64encode", 1, 1, "calm_b64encode(x)", "the value's UTF-8 text, base64-encoded"),
            Builtin("calm_b64decode", 1, 1, "calm_b64decode(x)", "the base64 value decoded to UTF-8 text"),
        )
    }
)

_CONTEXT_BUILTINS: Final = MappingProxyType(
    {
        "calm_array_index": "array_index",
        "calm_blueprint_name": "blueprint_name",
        "calm_blueprint_uuid": "blueprint_uuid",
        "calm_application_name": "application_name",
        "calm_application_uuid": "application_uuid",
        "calm_project_name": "project_name",
    }
)
"""Built-ins read from `BuiltinValues` (the attribute named here)."""

MOMENT_BUILTINS: Final = frozenset({"calm_time", "calm_date", "calm_random", "calm_is_within"})
"""Built-ins whose value depends on when the task runs: never resolved before the run."""


# --- parser --------------------------------------------------------------------------------------


def parse(text: str) -> Template:
    """Parse a text into a `Template`; raise `MacroError` at the first malformed macro.

    Text without macros is a template of one `Text` part (the empty text included)."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes a str, not {type(text).__name__}")
    parts: list[Part] = []
    for piece in _pieces(text):
        if isinstance(piece, Token):
            parts.append(Text(piece.value, piece.position))
        else:
            parts.append(_Parser(text, piece).macro())
    if not parts:
        parts.append(Text("", 0))
    return Template(tuple(parts), text)


def _describe(token: Token) -> str:
    if token.kind is TokenKind.NAME:
        return f"name '{token.value}'"
    if token.kind is TokenKind.INT:
        return f"number {token.value}"
    if token.kind is TokenKind.STRING:
        return "a string"
    if token.kind is TokenKind.CLOSE:
        return "'}@@' (the end of the macro)"
    symbol: str = token.kind.value
    return symbol


class _Parser:
    """Recursive descent over the tokens of one macro (OPEN ... CLOSE)."""

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> Token:
        # The list ends with CLOSE, which no rule consumes except `macro`: stay on it.
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def expect(self, kind: TokenKind, what: str) -> Token:
        token = self.peek()
        if token.kind is not kind:
            raise MacroError(f"expected {what}, found {_describe(token)}", token.position)
        return self.advance()

    def deeper(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise MacroError(f"macro too deeply nested (more than {MAX_DEPTH} levels)", token.position)

    def macro(self) -> Macro:
        opening = self.advance()
        if self.peek().kind is TokenKind.CLOSE:
            raise MacroError("empty macro: write a name, a call or a literal between '@@{' and '}@@'", opening.position)
        expression = self.expression()
        closing = self.peek()
        if closing.kind is not TokenKind.CLOSE:
            raise MacroError(f"expected '}}@@' to end the macro, found {_describe(closing)}", closing.position)
        return Macro(expression, opening.position, self.text[opening.position : closing.end])

    def expression(self) -> Node:
        entry_depth = self.depth
        self.deeper(self.peek())
        node = self.postfix()
        while self.peek().kind in (TokenKind.PLUS, TokenKind.MINUS):
            operator = self.advance()
            self.deeper(operator)  # a chain of n operators is a tree n deep
            right = self.postfix()
            node = BinaryOp("+" if operator.kind is TokenKind.PLUS else "-", node, right, operator.position)
        self.depth = entry_depth
        return node

    def postfix(self) -> Node:
        entry_depth = self.depth
        node = self.primary()
        while self.peek().kind is TokenKind.LBRACKET:
            bracket = self.advance()
            self.deeper(bracket)
            index = self.expression()
            self.expect(TokenKind.RBRACKET, "']' to close '['")
            node = Index(node, index, bracket.position)
        self.depth = entry_depth
        return node

    def primary(self) -> Node:
        token = self.peek()
        if token.kind is TokenKind.STRING:
            self.advance()
            return StringLiteral(token.value, token.position)
        if token.kind is TokenKind.INT:
            self.advance()
            return IntLiteral(int(token.value), token.position)
        if token.kind is TokenKind.LPAREN:
            self.advance()
            node = self.expression()
            self.expect(TokenKind.RPAREN, "')' to close '('")
            return node
        if token.kind is TokenKind.NAME:
            return self.named()
        raise MacroError(f"expected a name, a string or a number, found {_describe(token)}", token.position)

    def named(self) -> Node:
        name = self.advance()
        following = self.peek()
        if following.kind is TokenKind.DOT:
            self.advance()
            attribute = self.peek()
            if attribute.kind is not TokenKind.NAME:
                raise MacroError(
                    f"expected an attribute name after '{name.value}.', found {_describe(attribute)}",
                    attribute.position,
                )
            self.advance()
            after = self.peek()
            if after.kind is TokenKind.DOT:
                raise MacroError("only one '.' is allowed: write Object.attribute", after.position)
            if after.kind is TokenKind.LPAREN:
                raise MacroError(
                    f"'{name.value}.{attribute.value}' is not a function (there are no methods)", after.position
                )
            return Ref(name.value, attribute.value, name.position)
        if following.kind is TokenKind.LPAREN:
            return self.call(name)
        builtin = BUILTINS.get(name.value)
        if builtin is None:
            return Ref(None, name.value, name.position)
        if builtin.min_args:
            raise MacroError(f"{builtin.name} needs arguments: write {builtin.usage}", name.position)
        return Call(builtin.name, (), name.position)

    def call(self, name: Token) -> Call:
        builtin = BUILTINS.get(name.value)
        if builtin is None:
            raise MacroError(f"unknown function '{name.value}'{_suggest(name.value, BUILTINS)}", name.position)
        self.advance()  # '('
        args: list[Node] = []
        if self.peek().kind is not TokenKind.RPAREN:
            while True:
                args.append(self.expression())
                if self.peek().kind is not TokenKind.COMMA:
                    break
                self.advance()
        self.expect(TokenKind.RPAREN, f"',' or ')' in the call of {builtin.name}")
        if not builtin.min_args <= len(args) <= builtin.max_args:
            wanted = (
                str(builtin.min_args)
                if builtin.min_args == builtin.max_args
                else f"{builtin.min_args} to {builtin.max_args}"
            )
            raise MacroError(
                f"{builtin.name} takes {wanted} argument{'s' * (wanted != '1')}, got {len(args)}: "
                f"write {builtin.usage}",
                name.position,
            )
        return Call(builtin.name, tuple(args), name.position)


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _as_template(template: Template | str) -> Template:
    return template if isinstance(template, Template) else parse(template)


# --- the macro context ---------------------------------------------------------------------------

EntityKind: TypeAlias = Literal["Application", "Substrate", "Deployment", "Package", "Service"]
ENTITY_KINDS: Final[tuple[EntityKind, ...]] = ("Application", "Substrate", "Deployment", "Package", "Service")
"""The seed's macro context, outermost first: all objects inherit the properties of those above."""

MacroValue: TypeAlias = str | int | Sequence[str | int]
"""A value a macro can read: text, a number, or one value per replica (a sequence, rendered as a
comma-separated list and indexable with ``[i]``)."""

_Value: TypeAlias = str | int | tuple[str | int, ...]


@dataclass(frozen=True)
class Secret:
    """A secret value, known before the run only by its vault reference (never by its value)."""

    reference: str


AttributeValue: TypeAlias = MacroValue | Secret | None
"""An entity attribute: its value if known before the run, a `Secret`, or None when it exists but
gets its value only at run time (an address, a variable a task sets)."""


@dataclass(frozen=True)
class Entity:
    """One object of the macro context and what it knows.

    `parent` is the name of the entity one step up the chain (a service's package, a package's
    deployment, a deployment's substrate); an entity without one hangs under the Application.
    A parent may be of any kind above (a service directly under its deployment, say)."""

    kind: EntityKind
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    parent: str | None = None


@dataclass(frozen=True)
class Credential:
    """A credential as macros see it: the user name, and the secret only as a vault reference."""

    name: str
    username: str
    secret: Secret


@dataclass(frozen=True)
class BuiltinValues:
    """The values of the built-ins that depend on the app; None while not known (before launch, say)."""

    blueprint_name: str | None = None
    blueprint_uuid: str | None = None
    application_name: str | None = None
    application_uuid: str | None = None
    project_name: str | None = None
    array_index: int | None = None


@dataclass(frozen=True)
class MacroContext:
    """What exists for the macros of one task: the entities, the one the task runs on (`current`),
    the credentials and the built-in values.

    Build one per blueprint or app and derive the per-task ones with `at`. Construction checks
    the structure and raises ValueError: duplicate names, names that are not identifiers or shadow
    a kind, unknown parents, a parent below its child in the chain, more than one Application."""

    entities: tuple[Entity, ...] = ()
    current: str | None = None
    credentials: tuple[Credential, ...] = ()
    builtins: BuiltinValues = field(default_factory=BuiltinValues)
    _entities: Mapping[str, Entity] = field(init=False, repr=False, compare=False)
    _credentials: Mapping[str, Credential] = field(init=False, repr=False, compare=False)
    _application: Entity | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entities = tuple(self.entities)
        credentials = tuple(self.credentials)
        object.__setattr__(self, "entities", entities)
        object.__setattr__(self, "credentials", credentials)
        applications = [entity for entity in entities if entity.kind == "Application"]
        if len(applications) > 1:
            raise ValueError("a macro context has at most one Application")
        by_name: dict[str, Entity] = {}
        for entity in entities:
            if entity.kind not in ENTITY_KINDS:
                raise ValueError(f"unknown entity kind {entity.kind!r}")
            # The Application is reached as `Application`: its name (a Kubernetes name) may be anything.
            if entity.kind != "Application":
                _check_object_name(entity.name, f"{entity.kind} name")
            if entity.name in by_name:
                raise ValueError(f"duplicate name {entity.name!r}: names are unique across entities and credentials")
            by_name[entity.name] = entity
        by_credential: dict[str, Credential] = {}
        for credential in credentials:
            _check_object_name(credential.name, "credential name")
            if credential.name in by_name or credential.name in by_credential:
                raise ValueError(
                    f"duplicate name {credential.name!r}: names are unique across entities and credentials"
                )
            by_credential[credential.name] = credential
        for entity in entities:
            if entity.parent is None:
                continue
            if entity.kind == "Application":
                raise ValueError("the Application has no parent")
            parent = by_name.get(entity.parent)
            if parent is None:
                raise ValueError(f"{entity.kind} {entity.name}: unknown parent {entity.parent!r}")
            if ENTITY_KINDS.index(parent.kind) >= ENTITY_KINDS.index(entity.kind):
                raise ValueError(
                    f"{entity.kind} {entity.name}: its parent must be above it in Application → Substrate → "
                    f"Deployment → Package → Service, not a {parent.kind}"
                )
        if self.current is not None and self.current not in by_name:
            raise ValueError(f"unknown current entity {self.current!r}")
        object.__setattr__(self, "_entities", MappingProxyType(by_name))
        object.__setattr__(self, "_credentials", MappingProxyType(by_credential))
        object.__setattr__(self, "_application", applications[0] if applications else None)

    def at(self, current: str | None) -> MacroContext:
        """The same context for a task that runs on `current` (an entity name; None: the application).

        Cheap (no new validation, the indexes are shared): a compiler calls it once per task."""
        if current is not None and current not in self._entities:
            raise ValueError(f"unknown current entity {current!r}")
        moved = copy.copy(self)
        object.__setattr__(moved, "current", current)
        return moved

    @property
    def application(self) -> Entity | None:
        return self._application

    def entity(self, name: str) -> Entity | None:
        return self._entities.get(name)

    def credential(self, name: str) -> Credential | None:
        return self._credentials.get(name)

    def lineage(self, entity: Entity) -> tuple[Entity, ...]:
        """The entity, then each one around it up to the Application: where its properties come from."""
        chain = [entity]
        while True:
            here = chain[-1]
            if here.kind == "Application":
                break
            parent = self._entities[here.parent] if here.parent is not None else self._application
            if parent is None:
                break
            chain.append(parent)
        return tuple(chain)

    def current_lineage(self) -> tuple[Entity, ...]:
        """The chain an unqualified name is looked up in, innermost first."""
        if self.current is not None:
            return self.lineage(self._entities[self.current])
        return (self._application,) if self._application is not None else ()

    def describe_current(self) -> str:
        """The entity the task runs on, for messages."""
        if self.current is None:
            return "the application"
        entity = self._entities[self.current]
        return f"{entity.kind} {entity.name}"


def _check_object_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*): macros could not name it")
    if name in ENTITY_KINDS:
        raise ValueError(f"{what} {name!r} is a kind: @@{{{name}.x}}@@ means the {name} around the task")


def namespace(kind: EntityKind, name: str) -> str:
    """The seed's namespace of a Calm object's properties on a shared machine: ``Deployment_d1_``."""
    return f"{kind}_{name}_"


def namespaced_name(kind: EntityKind, name: str, attribute: str) -> str:
    """The namespaced name of one property: ``Deployment_d1_prop``."""
    return namespace(kind, name) + attribute


# --- resolution ----------------------------------------------------------------------------------

RuntimeNames: TypeAlias = Collection[tuple[str | None, str]]
"""(entity name, attribute) pairs some task of the action sets at run time; (None, name) for an
unqualified run variable that belongs to no entity."""

RuntimeValues: TypeAlias = Mapping[tuple[str | None, str], MacroValue] | Mapping[tuple[str, str], MacroValue]
"""The values produced so far at run time, keyed like `RuntimeNames`. (Two spellings because a
Mapping is invariant in its key: a caller's dict keyed by entity names only is welcome too.)"""


@dataclass(frozen=True)
class Resolution:
    """What a reference names: an entity's attribute (`entity` set), a credential field
    (`credential` set), or a run variable (neither: set at run time, owned by no entity).

    `runtime` says whether a task of the action sets it (the seed's rule: then it is kept for the
    run). For the compiler, (`owner`, `attribute`) is what to match against the setters."""

    attribute: str
    entity: Entity | None = None
    credential: Credential | None = None
    runtime: bool = False

    @property
    def owner(self) -> str | None:
        if self.entity is not None:
            return self.entity.name
        return self.credential.name if self.credential is not None else None

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.owner, self.attribute)

    def canonical(self, position: int) -> Ref:
        """How `partial_render` writes this reference: exact whatever entity the task runs on."""
        if self.credential is not None:
            return Ref(self.credential.name, self.attribute, position)
        if self.entity is None:
            return Ref(None, self.attribute, position)
        if self.entity.kind == "Application":
            return Ref("Application", self.attribute, position)
        return Ref(None, namespaced_name(self.entity.kind, self.entity.name, self.attribute), position)


def resolve(
    ref: Ref | CredRef,
    context: MacroContext,
    runtime_names: RuntimeNames = frozenset(),
) -> Resolution:
    """What a reference names in the context; MacroError (at the reference) when it names nothing."""
    return _Resolver(context, runtime_names).resolve(ref, None)


class _Resolver:
    def __init__(self, context: MacroContext, runtime_names: RuntimeNames) -> None:
        self.context = context
        self.runtime_names = runtime_names

    def resolve(self, ref: Ref | CredRef, macro: str | None) -> Resolution:
        if isinstance(ref, CredRef):
            return self._credential(ref.credential, ref.field, ref.position, macro)
        if ref.object is None:
            return self._unqualified(ref, macro)
        if ref.object in ENTITY_KINDS:
            return self._in_kind(ref, macro)
        entity = self.context.entity(ref.object)
        if entity is not None:
            return self._walk(self.context.lineage(entity), ref, macro)
        if self.context.credential(ref.object) is not None:
            return self._credential(ref.object, ref.attribute, ref.position, macro)
        known = [entity.name for entity in self.context.entities] + [c.name for c in self.context.credentials]
        raise MacroError(
            f"unknown object '{ref.object}': not an entity, a credential or one of {', '.join(ENTITY_KINDS)}"
            f"{_suggest(ref.object, known)}",
            ref.position,
            macro,
        )

    def _credential(self, name: str, attribute: str, position: int, macro: str | None) -> Resolution:
        credential = self.context.credential(name)
        if credential is None:
            raise MacroError(f"unknown credential '{name}'", position, macro)
        if attribute not in ("username", "secret"):
            raise MacroError(f"credential '{name}' has 'username' and 'secret', not '{attribute}'", position, macro)
        return Resolution(attribute, credential=credential)

    def _in_kind(self, ref: Ref, macro: str | None) -> Resolution:
        lineage = self.context.current_lineage()
        for index, entity in enumerate(lineage):
            if entity.kind == ref.object:
                return self._walk(lineage[index:], ref, macro)
        raise MacroError(
            f"no {ref.object} around {self.context.describe_current()}: '{ref.object}.{ref.attribute}' names nothing",
            ref.position,
            macro,
        )

    def _known_on(self, entity: Entity, attribute: str) -> bool:
        return attribute in entity.attributes or (entity.name, attribute) in self.runtime_names

    def _walk(self, lineage: Sequence[Entity], ref: Ref, macro: str | None) -> Resolution:
        for entity in lineage:
            if (entity.name, ref.attribute) in self.runtime_names:
                return Resolution(ref.attribute, entity=entity, runtime=True)
            if ref.attribute in entity.attributes:
                return Resolution(ref.attribute, entity=entity)
        raise self._unknown_attribute(lineage, ref, macro)

    def _unqualified(self, ref: Ref, macro: str | None) -> Resolution:
        namespaced = self._namespaced(ref.attribute)
        if namespaced is not None:
            return namespaced
        lineage = self.context.current_lineage()
        for entity in lineage:
            if (entity.name, ref.attribute) in self.runtime_names:
                return Resolution(ref.attribute, entity=entity, runtime=True)
            if ref.attribute in entity.attributes:
                return Resolution(ref.attribute, entity=entity)
        if (None, ref.attribute) in self.runtime_names:
            return Resolution(ref.attribute, runtime=True)
        meant = self._namespaced(ref.attribute, known_only=False)
        if meant is not None and meant.entity is not None:
            raise MacroError(
                f"'{ref.attribute}' names '{meant.attribute}' of {meant.entity.kind} {meant.entity.name}, "
                "which has no such attribute and no value set at run time",
                ref.position,
                macro,
            )
        raise self._unknown_attribute(lineage, ref, macro)

    def _namespaced(self, name: str, *, known_only: bool = True) -> Resolution | None:
        """``Kind_entity_attr`` (the seed's namespacing), if it names a known attribute of an entity of
        that kind. When entity names overlap (``web`` and ``web_db``), the longest one that knows the
        attribute wins. With `known_only` false, any attribute: to explain an error."""
        for kind in ENTITY_KINDS[1:]:
            prefix = f"{kind}_"
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            candidates = [
                entity
                for entity in self.context.entities
                if entity.kind == kind
                and rest.startswith(entity.name + "_")
                and len(rest) > len(entity.name) + 1
                and (not known_only or self._known_on(entity, rest[len(entity.name) + 1 :]))
            ]
            if candidates:
                entity = max(candidates, key=lambda candidate: len(candidate.name))
                attribute = rest[len(entity.name) + 1 :]
                return Resolution(attribute, entity=entity, runtime=(entity.name, attribute) in self.runtime_names)
        return None

    def _unknown_attribute(self, lineage: Sequence[Entity], ref: Ref, macro: str | None) -> MacroError:
        where = ", ".join(f"{entity.kind} {entity.name}" for entity in lineage) or "an empty context"
        known = {name for entity in lineage for name in entity.attributes}
        known |= {attribute for owner, attribute in self.runtime_names if owner is None}
        known |= {attribute for owner, attribute in self.runtime_names if any(e.name == owner for e in lineage)}
        what = f"attribute '{ref.attribute}' of '{ref.object}'" if ref.object else f"name '{ref.attribute}'"
        return MacroError(f"unknown {what} (looked in {where}){_suggest(ref.attribute, known)}", ref.position, macro)


def bind(template: Template | str, context: MacroContext) -> Template:
    """The template with each `Ref` that reads a credential (``db.username``) rewritten as a `CredRef`.

    Parsing cannot tell them apart (same syntax); the context knows the credential names."""
    template = _as_template(template)

    def rebuild(node: Node) -> Node:
        if isinstance(node, Ref):
            if (
                node.object is not None
                and node.object not in ENTITY_KINDS
                and context.entity(node.object) is None
                and context.credential(node.object) is not None
                and node.attribute in ("username", "secret")
            ):
                credential_field: CredentialField = "username" if node.attribute == "username" else "secret"
                return CredRef(node.object, credential_field, node.position)
            return node
        if isinstance(node, Call):
            return replace(node, args=tuple(rebuild(arg) for arg in node.args))
        if isinstance(node, Index):
            return replace(node, target=rebuild(node.target), index=rebuild(node.index))
        if isinstance(node, BinaryOp):
            return replace(node, left=rebuild(node.left), right=rebuild(node.right))
        return node

    parts = tuple(
        replace(part, expression=rebuild(part.expression)) if isinstance(part, Macro) else part
        for part in template.parts
    )
    return Template(parts, template.source)


def references(template: Template | str, *, context: MacroContext | None = None) -> list[Ref]:
    """Every ``Object.attribute`` and unqualified name the text reads, in text order.

    The compiler matches them against what the tasks of an action set (implicit dependencies).
    With a context, references to credentials are left out (they are not attributes anybody sets)."""
    found: list[Ref] = []
    for macro in _as_template(template).macros:
        for node in walk(macro.expression):
            if not isinstance(node, Ref):
                continue
            if (
                context is not None
                and node.object is not None
                and context.entity(node.object) is None
                and context.credential(node.object) is not None
            ):
                continue
            found.append(node)
    return sorted(found, key=lambda ref: ref.position)


def check(
    template: Template | str,
    context: MacroContext,
    runtime_names: RuntimeNames = frozenset(),
) -> list[MacroError]:
    """The compile-time check: every reference resolves in the context or is set at run time.

    Returns every problem (empty when all is well), each at its position with its macro; the
    caller adds the task's name. Also checks the literal windows of calm_is_within."""
    resolver = _Resolver(context, runtime_names)
    errors: list[MacroError] = []
    for macro in _as_template(template).macros:
        for node in walk(macro.expression):
            if isinstance(node, Ref | CredRef):
                try:
                    resolver.resolve(node, macro.source)
                except MacroError as error:
                    errors.append(error)
            elif (
                isinstance(node, Call)
                and node.name == "calm_is_within"
                and all(isinstance(arg, StringLiteral) for arg in node.args)
            ):
                first, second = (arg.value for arg in node.args if isinstance(arg, StringLiteral))
                try:
                    _window(first, second, node.position, macro.source)
                except MacroError as error:
                    errors.append(error)
    return sorted(errors, key=lambda error: error.position)


# --- evaluation ----------------------------------------------------------------------------------


def _normalize(value: MacroValue | Secret, position: int, macro: str | None) -> _Value:
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


def _text(value: _Value) -> str:
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _apply_pure(name: str, args: Sequence[_Value], position: int, macro: str | None) -> _Value:
    """The built-ins that are functions of their arguments only (safe to run before the run)."""
    if name == "calm_string":
        return _text(args[0])
    if name == "calm_int":
        value = args[0]
        if isinstance(value, int):
            return value
        if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
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


def _binary(node: BinaryOp, left: _Value, right: _Value, macro: str | None) -> _Value:
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


def _index(node: Index, target: _Value, index: _Value, macro: str | None) -> _Value:
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


def _parse_moment(text: str) -> time_of_day | datetime | None:
    stripped = text.strip()
    match = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?", stripped)
    if match:
        try:
            return time_of_day(int(match[1]), int(match[2]), int(match[3] or 0))
        except ValueError:
            return None
    try:
        return datetime.fromisoformat(stripped)
    except ValueError:
        return None


def _window(
    first: str, second: str, position: int, macro: str | None
) -> tuple[time_of_day, time_of_day] | tuple[datetime, datetime]:
    """calm_is_within's window: two times of day (daily, may wrap midnight) or two ISO 8601 moments."""
    start, end = _parse_moment(first), _parse_moment(second)
    if isinstance(start, datetime) and isinstance(end, datetime):
        return start, end
    if isinstance(start, time_of_day) and isinstance(end, time_of_day):
        return start, end
    raise MacroError(
        "calm_is_within takes two times of day (HH:MM or HH:MM:SS) or two ISO 8601 dates with times",
        position,
        macro,
    )


def _is_within(now: datetime, first: str, second: str, position: int, macro: str | None) -> str:
    """'1' if `now` is in the window, ends included, else '0'.

    Times of day are compared with the wall-clock time of `now` (the clock's time zone); a window
    whose start is after its end wraps midnight ("22:00" to "06:00"). Moments without a zone are
    taken in the clock's zone."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    window = _window(first, second, position, macro)
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


def _strftime(now: datetime, args: Sequence[_Value], default: str, name: str, position: int, macro: str | None) -> str:
    if args and not isinstance(args[0], str):
        raise MacroError(f"{name}: the format must be text (a strftime format)", position, macro)
    fmt = args[0] if args and isinstance(args[0], str) else default
    try:
        return now.strftime(fmt)
    except ValueError:
        raise MacroError(f"{name}: invalid format", position, macro) from None


def _context_builtin(name: str, values: BuiltinValues) -> _Value | None:
    """The app-dependent built-ins; None while the context does not know them."""
    if name in _CONTEXT_BUILTINS:
        value: str | int | None = getattr(values, _CONTEXT_BUILTINS[name])
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
        self.resolver = _Resolver(context, values.keys())
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

    def evaluate(self, node: Node, macro: str) -> _Value:
        if isinstance(node, StringLiteral | IntLiteral):
            return node.value
        if isinstance(node, Ref | CredRef):
            return self.reference(node, macro)
        if isinstance(node, Call):
            return self.call(node, macro)
        if isinstance(node, Index):
            return _index(node, self.evaluate(node.target, macro), self.evaluate(node.index, macro), macro)
        return _binary(node, self.evaluate(node.left, macro), self.evaluate(node.right, macro), macro)

    def reference(self, ref: Ref | CredRef, macro: str) -> _Value:
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

    def call(self, node: Call, macro: str) -> _Value:
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
    parsed = _as_template(template)
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
    value: _Value | None


class _PartialRenderer:
    """Before-the-run evaluation: resolve what is known, rewrite the rest for `render`."""

    def __init__(self, context: MacroContext, runtime_names: RuntimeNames) -> None:
        self.context = context
        self.resolver = _Resolver(context, runtime_names)

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
    """The seed's decision, applied: resolve now every macro whose value is known before the run,
    and keep for run time, as macros, those that read something set by a task of the action
    (`runtime_names`), a secret, or the moment (calm_time, calm_date, calm_random, calm_is_within).

    Kept macros are rewritten so that `render` reads them exactly with any context of the same app:
    entity attributes in the namespaced spelling (``@@{Service_S1_address}@@``), application ones as
    ``@@{Application.x}@@``, sub-expressions known now folded into literals. Resolved values that
    contain ``@@{`` are protected (see `_protect`). Raises the first `check` error, or MacroError
    when an attribute has no value yet and no task sets it, or a built-in fails on known arguments."""
    parsed = _as_template(template)
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
