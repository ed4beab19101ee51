"""Calm macros (docs/calm.md): ``@@{ ... }@@`` in scripts, URLs and bodies, from text to value.

A task's text is parsed once into a `Template` (literal text and macros). The compiler then uses it
three ways, as Calm's own implementation does:

- `references` lists every ``Object.attribute`` a text reads: a task that reads an attribute which
  another task of the same action sets depends on it (the implicit dependencies).
- `check` proves every reference names something that exists in the `MacroContext` (the chain
  Application → Substrate → Deployment → Package → Service, the credentials) or is set at run time
  by a task of the action; anything else is an error with its position, before anything runs.
- `partial_render` is Calm's rule: a macro whose value some task of the action sets is
  kept for run time, every other one is resolved now. `render` finishes the job at run time with
  the values produced so far, and is the only place where a secret is ever fetched.

The lexer has two states: outside a macro it looks only for ``@@{``; inside, it reads
tokens up to ``}@@``. The inside is a small expression language, parsed by recursive descent::

    macro    := expr
    expr     := postfix (('+' | '-') postfix)*
    postfix  := primary ('[' expr ']')*
    primary  := STRING | INT | '-' INT | '(' expr ')'
              | NAME '(' [expr (',' expr)*] ')'       a built-in function: calm_int(x)
              | NAME '.' NAME                          Object.attribute, or credential.username
              | NAME                                   an unqualified name, or a built-in: calm_time

Decisions where Calm's documentation is silent or ambiguous (each is also stated where it is implemented):

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
  around the current entity, as in Calm), an entity, a credential. Names are unique across
  entities and credentials (the Blueprint requires it; `MacroContext` refuses duplicates).
- Properties are inherited: an entity sees its own attributes, then those of the entities around it.
  ``@@{x}@@`` walks from the current entity outwards (Service → Package → Deployment → Substrate →
  Application); ``@@{S2.x}@@`` walks the same way from S2.
- Namespacing: Calm stores the property p of object O of kind K as ``K_O_p`` so that entities
  sharing one machine do not collide. `partial_render` writes every run-time entity reference in
  that spelling (``@@{Substrate_vm1_ip_address}@@``), which names the owner exactly whatever entity
  the task runs on; such a name is understood by the resolver (it names O's own property p, with no
  inheritance). Application properties are not namespaced (Calm: "no namespacing is done for Entity
  properties"); they are written ``@@{Application.p}@@``.
- Built-ins whose value depends on the moment (calm_time, calm_date, calm_random, calm_is_within)
  are always kept for run time; those that depend on the app (calm_application_uuid...) are
  resolved as soon as the context knows them. calm_unique and calm_unique_hash are derived from the
  application uuid: unique to every application and the same for every task of it.
- Secrets (``cred.secret`` and secret variables) are never resolved before the run. `render` fetches
  them through its ``secrets`` callable; without one it writes `SECRET_MASK` instead, which is the
  masked copy of a script Calm stores. Error messages never quote a value.
"""

from operators.calm.macros.builtins import BUILTINS, MOMENT_BUILTINS, Builtin
from operators.calm.macros.context import (
    ENTITY_KINDS,
    AttributeValue,
    BuiltinValues,
    Credential,
    Entity,
    EntityKind,
    MacroContext,
    MacroValue,
    Secret,
    namespace,
    namespaced_name,
)
from operators.calm.macros.evaluation import partial_render, render
from operators.calm.macros.lexer import (
    CLOSE,
    MAX_DEPTH,
    MAX_INT_DIGITS,
    OPEN,
    SECRET_MASK,
    MacroError,
    Token,
    TokenKind,
    tokenize,
)
from operators.calm.macros.parser import parse
from operators.calm.macros.resolution import Resolution, RuntimeNames, RuntimeValues, bind, check, references, resolve
from operators.calm.macros.tree import (
    BinaryOp,
    Call,
    CredRef,
    Index,
    IntLiteral,
    Macro,
    Node,
    Ref,
    StringLiteral,
    Template,
    Text,
    unparse,
    walk,
)

__all__ = [
    "BUILTINS",
    "CLOSE",
    "ENTITY_KINDS",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MOMENT_BUILTINS",
    "OPEN",
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
