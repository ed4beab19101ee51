"""The lexer: literal text outside macros, tokens inside them; the limits and the one error type."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

OPEN: Final = "@@{"
CLOSE: Final = "}@@"
SECRET_MASK: Final = "********"
"""What `render` writes for a secret when it is given no way to fetch secrets."""

MAX_DEPTH: Final = 48
"""Deepest expression the parser accepts: evaluation recurses, and a hostile text must not be able
to exhaust the interpreter's stack (only `MacroError` may come out of `parse`)."""

MAX_INT_DIGITS: Final = 40
"""Longest number literal: far beyond any real index or port, far below Python's int/str limit."""

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")
WHOLE_NUMBER = re.compile(rf"[+-]?[0-9]{{1,{MAX_INT_DIGITS}}}")
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

    The lexer has two states. Outside, everything up to the next ``@@{`` is one TEXT
    token (so a lone ``@@``, braces or ``}@@`` are plain text). Inside, tokens are read up to ``}@@``.
    """
    tokens: list[Token] = []
    for piece in split_pieces(text):
        if isinstance(piece, Token):
            tokens.append(piece)
        else:
            tokens.extend(piece)
    return tokens


def split_pieces(text: str) -> Iterator[Token | list[Token]]:
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
        name = NAME_PATTERN.match(text, position)
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
