"""The parser: tokens to a `Template`, by recursive descent (grammar in the package docstring)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from operators.calm.macros.builtins import BUILTINS
from operators.calm.macros.lexer import MAX_DEPTH, MacroError, Token, TokenKind, split_pieces
from operators.calm.macros.tree import (
    BinaryOp,
    Call,
    Index,
    IntLiteral,
    Macro,
    Node,
    Part,
    Ref,
    StringLiteral,
    Template,
    Text,
)


def parse(text: str) -> Template:
    """Parse a text into a `Template`; raise `MacroError` at the first malformed macro.

    Text without macros is a template of one `Text` part (the empty text included)."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes a str, not {type(text).__name__}")
    parts: list[Part] = []
    for piece in split_pieces(text):
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
            raise MacroError(f"unknown function '{name.value}'{did_you_mean(name.value, BUILTINS)}", name.position)
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


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """The error messages' hint: the closest known name, if one is close (a typo)."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def as_template(template: Template | str) -> Template:
    """A template parsed once: callers pass what they parsed already, or the text."""
    return template if isinstance(template, Template) else parse(template)
