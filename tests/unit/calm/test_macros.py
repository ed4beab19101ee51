"""Calm macros: lexer, parser, resolution through the macro context, rendering (docs/calm.md)."""

from __future__ import annotations

import base64
import pickle
import random
import re
from dataclasses import fields, is_dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.calm.macros import (
    BUILTINS,
    SECRET_MASK,
    BinaryOp,
    BuiltinValues,
    Call,
    Credential,
    CredRef,
    Entity,
    Index,
    IntLiteral,
    Macro,
    MacroContext,
    MacroError,
    Node,
    Ref,
    Secret,
    StringLiteral,
    Template,
    Text,
    TokenKind,
    bind,
    check,
    namespace,
    namespaced_name,
    parse,
    partial_render,
    references,
    render,
    resolve,
    tokenize,
    unparse,
)

# --- helpers -------------------------------------------------------------------------------------


def only_macro(text: str) -> Node:
    """The expression of the one macro of `text`."""
    (macro,) = parse(text).macros
    return macro.expression


def error_of(text: str) -> MacroError:
    with pytest.raises(MacroError) as caught:
        parse(text)
    return caught.value


def without_positions(value: Any) -> Any:
    """An AST with every position set to 0, to compare shapes."""
    if isinstance(value, tuple):
        return tuple(without_positions(item) for item in value)
    if is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: without_positions(getattr(value, f.name)) for f in fields(value)}
        if "position" in changes:
            changes["position"] = 0
        return replace(value, **changes)
    return value


def app_context(current: str | None = "S1") -> MacroContext:
    """Application → Substrate vm1 → Deployment d1 → Package p1 → Service S1, plus S2 on vm2/d2."""
    return MacroContext(
        entities=(
            Entity("Application", "shop-prod", {"region": "eu", "shared": "from-app", "later": None}),
            Entity("Substrate", "vm1", {"ip_address": None, "os": "linux", "shared": "from-substrate"}),
            Entity("Deployment", "d1", {"prop": "deployment-prop", "replicas": "2"}, parent="vm1"),
            Entity("Package", "p1", {"version": "1.2"}, parent="d1"),
            Entity(
                "Service",
                "S1",
                {"port": "8080", "shared": "from-service", "api_key": Secret("vault-api-key"), "hosts": ["a", "b"]},
                parent="p1",
            ),
            Entity("Substrate", "vm2", {"ip_address": None}),
            Entity("Deployment", "d2", {}, parent="vm2"),
            Entity("Service", "S2", {"vm_ip": None, "name": "db"}, parent="d2"),
        ),
        current=current,
        credentials=(Credential("db_cred", "admin", Secret("vault-db-password")),),
        builtins=BuiltinValues(
            blueprint_name="shop",
            blueprint_uuid="b-uuid",
            application_name="shop-prod",
            application_uuid="0b7e4a2c-0000-4000-8000-000000000001",
            project_name="retail",
            array_index=1,
        ),
    )


def never(reference: str) -> str:
    raise AssertionError(f"secret {reference} fetched")


FIXED_NOW = datetime(2024, 5, 17, 9, 30, 15, tzinfo=UTC)


def at(moment: datetime) -> Any:
    return lambda: moment


# --- MacroError ----------------------------------------------------------------------------------


def test_macro_error_says_position_then_message_and_survives_pickling() -> None:
    error = MacroError("boom", 7, "@@{x}@@")
    assert str(error) == "position 7: boom"
    assert (error.position, error.message, error.macro) == (7, "boom", "@@{x}@@")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.position, copy.message, copy.macro) == (7, "boom", "@@{x}@@")


# --- lexer ---------------------------------------------------------------------------------------


def test_text_without_macros_is_one_text_token() -> None:
    assert [(t.kind, t.value) for t in tokenize("echo hello {world} @@ }@@")] == [
        (TokenKind.TEXT, "echo hello {world} @@ }@@")
    ]
    assert tokenize("") == []


def test_text_around_several_macros() -> None:
    tokens = tokenize("a @@{x}@@ b @@{S1.ip}@@c")
    assert [(t.kind, t.value, t.position) for t in tokens] == [
        (TokenKind.TEXT, "a ", 0),
        (TokenKind.OPEN, "@@{", 2),
        (TokenKind.NAME, "x", 5),
        (TokenKind.CLOSE, "}@@", 6),
        (TokenKind.TEXT, " b ", 9),
        (TokenKind.OPEN, "@@{", 12),
        (TokenKind.NAME, "S1", 15),
        (TokenKind.DOT, ".", 17),
        (TokenKind.NAME, "ip", 18),
        (TokenKind.CLOSE, "}@@", 20),
        (TokenKind.TEXT, "c", 23),
    ]


def test_all_inside_tokens() -> None:
    kinds = [t.kind for t in tokenize('@@{ f("s", 1, -2)[0] + a - b }@@')]
    assert kinds == [
        TokenKind.OPEN,
        TokenKind.NAME,
        TokenKind.LPAREN,
        TokenKind.STRING,
        TokenKind.COMMA,
        TokenKind.INT,
        TokenKind.COMMA,
        TokenKind.INT,
        TokenKind.RPAREN,
        TokenKind.LBRACKET,
        TokenKind.INT,
        TokenKind.RBRACKET,
        TokenKind.PLUS,
        TokenKind.NAME,
        TokenKind.MINUS,
        TokenKind.NAME,
        TokenKind.CLOSE,
    ]


def test_minus_is_a_sign_only_where_an_operand_is_expected() -> None:
    assert [t.value for t in tokenize("@@{x -1}@@")][1:4] == ["x", "-", "1"]
    assert [t.value for t in tokenize("@@{-1}@@")][1] == "-1"
    assert [t.value for t in tokenize("@@{x - -1}@@")][1:4] == ["x", "-", "-1"]


@pytest.mark.parametrize(
    "text",
    ["@@", "@@@", "@ @{x}", "@{x}@@", "{}", "}@@", "${HOME} {a: 1}", "@@}", "email@@example.com"],
)
def test_at_signs_and_braces_alone_are_plain_text(text: str) -> None:
    template = parse(text)
    assert template.parts == (Text(text, 0),)
    assert template.is_literal


def test_three_at_signs_leave_one_in_the_text() -> None:
    template = parse("@@@{x}@@@")
    assert template.parts == (
        Text("@", 0),
        Macro(Ref(None, "x", 4), 1, "@@{x}@@"),
        Text("@", 8),
    )


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("@@{", 0),
        ("echo @@{x", 5),
        ("@@{x}@@ then @@{ y", 13),
        ("@@{x}@", 0),
        ("@@{x} @@", 0),
    ],
)
def test_unterminated_macro_is_reported_at_its_opening(text: str, position: int) -> None:
    error = error_of(text)
    assert error.position == position
    assert "unterminated macro" in error.message


def test_unterminated_macro_wins_over_odd_characters_after_it() -> None:
    error = error_of('echo "@@{" ; rm -rf /tmp/x')
    assert (error.position, "unterminated macro" in error.message) == (6, True)


def test_whitespace_inside_a_macro_is_ignored() -> None:
    assert only_macro("@@{  S1 . address\n\t}@@") == Ref("S1", "address", 5)
    assert only_macro("@@{\ncalm_int( port )\r\n}@@") == Call("calm_int", (Ref(None, "port", 14),), 4)


def test_close_inside_a_string_does_not_end_the_macro() -> None:
    assert only_macro('@@{"a}@@b"}@@') == StringLiteral("a}@@b", 3)
    assert only_macro("@@{'@@{'}@@") == StringLiteral("@@{", 3)


def test_string_escapes() -> None:
    assert only_macro(r'@@{"q\"d\'b\\n\nt\tr\r"}@@') == StringLiteral("q\"d'b\\n\nt\tr\r", 3)
    assert only_macro(r"@@{'it\'s'}@@") == StringLiteral("it's", 3)


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("@@{ {a} }@@", 4, "unexpected '{'"),
        ("@@{a}}@@", 4, "unexpected '}'"),
        ("@@{ a @@{b}@@ }@@", 6, "cannot contain another macro"),
        ("@@{a ; b}@@", 5, "unexpected character ';'"),
        ("@@{a\x00}@@", 4, "unexpected character"),
        ('@@{"abc}@@', 3, "unterminated string"),
        ("@@{'abc\"}@@", 3, "unterminated string"),
        (r'@@{"a\qb"}@@', 5, "unknown escape"),
        ("@@{1abc}@@", 3, "cannot start with a digit"),
        ("@@{" + "9" * 41 + "}@@", 3, "number too long"),
        ("@@{é}@@", 3, "unexpected character"),
    ],
)
def test_lexer_errors_have_positions(text: str, position: int, words: str) -> None:
    error = error_of(text)
    assert error.position == position
    assert words in error.message


def test_first_error_in_text_order_is_reported() -> None:
    assert error_of("@@{a b}@@ @@{ {}@@").position == 5


# --- parser --------------------------------------------------------------------------------------


def test_empty_and_macro_free_text_are_one_literal() -> None:
    assert parse("") == Template((Text("", 0),), "")
    assert parse("plain").parts == (Text("plain", 0),)
    assert str(parse("a @@{x}@@")) == "a @@{x}@@"


def test_qualified_and_unqualified_references() -> None:
    template = parse("ssh @@{S1.address}@@ -p @@{port}@@")
    assert template.parts == (
        Text("ssh ", 0),
        Macro(Ref("S1", "address", 7), 4, "@@{S1.address}@@"),
        Text(" -p ", 20),
        Macro(Ref(None, "port", 27), 24, "@@{port}@@"),
    )
    assert not template.is_literal


def test_a_credential_parses_as_a_reference() -> None:
    assert only_macro("@@{db_cred.secret}@@") == Ref("db_cred", "secret", 3)


def test_bare_builtins_are_calls_without_arguments() -> None:
    assert only_macro("@@{calm_array_index}@@") == Call("calm_array_index", (), 3)
    assert only_macro("@@{calm_time()}@@") == Call("calm_time", (), 3)
    assert only_macro("@@{S1.calm_time}@@") == Ref("S1", "calm_time", 3)


def test_calls_with_string_int_and_nested_arguments() -> None:
    assert only_macro('@@{calm_is_within("08:00", "18:00")}@@') == Call(
        "calm_is_within", (StringLiteral("08:00", 18), StringLiteral("18:00", 27)), 3
    )
    assert only_macro("@@{calm_string(calm_int(S1.port))}@@") == Call(
        "calm_string", (Call("calm_int", (Ref("S1", "port", 24),), 15),), 3
    )
    assert only_macro("@@{calm_string(-12)}@@") == Call("calm_string", (IntLiteral(-12, 15),), 3)
    assert only_macro('@@{calm_time("%H")}@@') == Call("calm_time", (StringLiteral("%H", 13),), 3)


def test_operators_associate_left_and_brackets_index() -> None:
    assert without_positions(only_macro("@@{a - b + 1}@@")) == without_positions(
        BinaryOp("+", BinaryOp("-", Ref(None, "a", 0), Ref(None, "b", 0), 0), IntLiteral(1, 0), 0)
    )
    assert without_positions(only_macro("@@{a - (b + 1)}@@")) == without_positions(
        BinaryOp("-", Ref(None, "a", 0), BinaryOp("+", Ref(None, "b", 0), IntLiteral(1, 0), 0), 0)
    )
    assert only_macro("@@{S1.address[calm_array_index]}@@") == Index(
        Ref("S1", "address", 3), Call("calm_array_index", (), 14), 13
    )
    assert only_macro("@@{calm_int(calm_array_index) + 1}@@") == BinaryOp(
        "+", Call("calm_int", (Call("calm_array_index", (), 12),), 3), IntLiteral(1, 32), 30
    )


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("@@{}@@", 0, "empty macro"),
        ("x @@{   }@@", 2, "empty macro"),
        ("@@{a b}@@", 5, "expected '}@@'"),
        ("@@{a.}@@", 5, "expected an attribute name after 'a.'"),
        ("@@{a.1}@@", 5, "expected an attribute name"),
        ("@@{a.b.c}@@", 6, "only one '.'"),
        ("@@{a.b(1)}@@", 6, "not a function"),
        ("@@{.a}@@", 3, "expected a name, a string or a number"),
        ("@@{foo(1)}@@", 3, "unknown function 'foo'"),
        ("@@{calm_it(1)}@@", 3, "did you mean 'calm_int'"),
        ("@@{calm_int}@@", 3, "calm_int needs arguments"),
        ("@@{calm_int()}@@", 3, "calm_int takes 1 argument, got 0"),
        ("@@{calm_int(1, 2)}@@", 3, "calm_int takes 1 argument, got 2"),
        ('@@{calm_is_within("1:00")}@@', 3, "calm_is_within takes 2 arguments, got 1"),
        ('@@{calm_time("a", "b")}@@', 3, "calm_time takes 0 to 1 arguments, got 2"),
        ("@@{calm_array_index(1)}@@", 3, "takes 0 arguments"),
        ("@@{calm_int(1,)}@@", 14, "expected a name, a string or a number, found ')'"),
        ("@@{calm_int(1 2)}@@", 14, "expected ',' or ')'"),
        ("@@{calm_int(1}@@", 13, "expected ',' or ')'"),
        ("@@{(a}@@", 5, "expected ')' to close '('"),
        ("@@{a)}@@", 4, "expected '}@@'"),
        ("@@{a[1}@@", 6, "expected ']'"),
        ("@@{a +}@@", 6, "expected a name, a string or a number, found '}@@'"),
        ("@@{- a}@@", 3, "found '-'"),
        ("@@{,}@@", 3, "found ','"),
    ],
)
def test_parse_errors_have_positions(text: str, position: int, words: str) -> None:
    error = error_of(text)
    assert error.position == position, error
    assert words in error.message, error


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    for text in (
        "@@{" + "(" * 500 + "a" + ")" * 500 + "}@@",
        "@@{" + "calm_string(" * 500 + "a" + ")" * 500 + "}@@",
        "@@{a" + "+a" * 500 + "}@@",
        "@@{a" + "[0]" * 500 + "}@@",
    ):
        assert "too deeply nested" in error_of(text).message
    assert parse("@@{" + "(" * 10 + "a" + ")" * 10 + "}@@").macros


@pytest.mark.parametrize(
    "source",
    [
        "S1.address",
        "port",
        'calm_is_within("22:00", "06:00")',
        "calm_string(calm_int(S1.port) + calm_array_index - -3)",
        "S1.hosts[calm_array_index + 1]",
        "a - (b - c)",
        '"quote \\" backslash \\\\ newline \\n tab \\t cr \\r close }@@"',
        "(-1)[0]",
        "calm_time",
    ],
)
def test_unparse_gives_back_the_same_tree(source: str) -> None:
    expression = only_macro("@@{" + source + "}@@")
    again = only_macro("@@{" + unparse(expression) + "}@@")
    assert without_positions(again) == without_positions(expression)


def test_references_lists_every_reference_in_text_order() -> None:
    found = references("@@{calm_string(S1.port) + x}@@ and @@{S2.address[i]}@@ @@{db_cred.username}@@")
    assert [(r.object, r.attribute, r.position) for r in found] == [
        ("S1", "port", 15),
        (None, "x", 26),
        ("S2", "address", 38),
        (None, "i", 49),
        ("db_cred", "username", 58),
    ]
    assert references("no macros") == []


def test_references_with_a_context_leave_out_credentials() -> None:
    found = references("@@{db_cred.username}@@ @@{S2.vm_ip}@@", context=app_context())
    assert [(r.object, r.attribute) for r in found] == [("S2", "vm_ip")]


# --- the context ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entities", "credentials", "current", "words"),
    [
        ((Entity("Service", "S1"), Entity("Package", "S1")), (), None, "duplicate name 'S1'"),
        ((Entity("Service", "S1"),), (Credential("S1", "u", Secret("r")),), None, "duplicate name 'S1'"),
        ((Entity("Service", "web-1"),), (), None, "not an identifier"),
        ((), (Credential("my cred", "u", Secret("r")),), None, "not an identifier"),
        ((Entity("Service", "Deployment"),), (), None, "is a kind"),
        ((Entity("Service", "S1", parent="nope"),), (), None, "unknown parent 'nope'"),
        ((Entity("Service", "S1"), Entity("Deployment", "d1", parent="S1")), (), None, "must be above it"),
        ((Entity("Package", "p1"), Entity("Package", "p2", parent="p1")), (), None, "must be above it"),
        ((Entity("Application", "a"), Entity("Application", "b")), (), None, "at most one Application"),
        ((Entity("Application", "a", parent="x"),), (), None, "has no parent"),
        ((Entity("Service", "S1"),), (), "S9", "unknown current entity"),
    ],
)
def test_context_refuses_an_inconsistent_structure(
    entities: tuple[Entity, ...], credentials: tuple[Credential, ...], current: str | None, words: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        MacroContext(entities=entities, credentials=credentials, current=current)


def test_context_lineage_follows_the_seed_chain() -> None:
    context = app_context()
    with pytest.raises(ValueError, match="unknown current entity"):
        context.at("nope")
    assert [e.name for e in context.current_lineage()] == ["S1", "p1", "d1", "vm1", "shop-prod"]
    assert [e.name for e in context.at("S2").current_lineage()] == ["S2", "d2", "vm2", "shop-prod"]
    assert [e.name for e in context.at(None).current_lineage()] == ["shop-prod"]
    assert MacroContext().current_lineage() == ()


def test_namespace_is_the_seeds() -> None:
    assert namespace("Deployment", "d1") == "Deployment_d1_"
    assert namespaced_name("Deployment", "d1", "prop") == "Deployment_d1_prop"


# --- resolution ----------------------------------------------------------------------------------


def resolved(text: str, context: MacroContext, runtime: set[tuple[str | None, str]] | None = None) -> Any:
    expression = only_macro(text)
    assert isinstance(expression, Ref | CredRef)
    resolution = resolve(expression, context, runtime or set())
    return (resolution.owner, resolution.attribute, resolution.runtime)


def test_unqualified_names_walk_from_the_service_outwards() -> None:
    context = app_context()
    assert resolved("@@{shared}@@", context) == ("S1", "shared", False)
    assert resolved("@@{version}@@", context) == ("p1", "version", False)
    assert resolved("@@{prop}@@", context) == ("d1", "prop", False)
    assert resolved("@@{os}@@", context) == ("vm1", "os", False)
    assert resolved("@@{region}@@", context) == ("shop-prod", "region", False)
    assert resolved("@@{shared}@@", context.at("d1")) == ("vm1", "shared", False)
    assert resolved("@@{shared}@@", context.at(None)) == ("shop-prod", "shared", False)


def test_qualified_names_inherit_from_the_objects_chain() -> None:
    context = app_context()
    assert resolved("@@{S2.name}@@", context) == ("S2", "name", False)
    assert resolved("@@{S2.ip_address}@@", context) == ("vm2", "ip_address", False)
    assert resolved("@@{S2.region}@@", context) == ("shop-prod", "region", False)
    assert resolved("@@{d1.shared}@@", context) == ("vm1", "shared", False)


def test_kind_names_mean_the_entity_of_that_kind_around_the_task() -> None:
    context = app_context()
    assert resolved("@@{Deployment.prop}@@", context) == ("d1", "prop", False)
    assert resolved("@@{Deployment.os}@@", context) == ("vm1", "os", False)
    assert resolved("@@{Service.port}@@", context) == ("S1", "port", False)
    assert resolved("@@{Application.region}@@", context) == ("shop-prod", "region", False)
    assert resolved("@@{Substrate.ip_address}@@", context.at("S2")) == ("vm2", "ip_address", False)
    with pytest.raises(MacroError, match="no Package around Service S2"):
        resolved("@@{Package.version}@@", context.at("S2"))


def test_runtime_names_mark_references_kept_for_the_run_and_shadow_outer_values() -> None:
    context = app_context()
    runtime: set[tuple[str | None, str]] = {("vm1", "ip_address"), ("S1", "os"), (None, "token")}
    assert resolved("@@{ip_address}@@", context, runtime) == ("vm1", "ip_address", True)
    assert resolved("@@{os}@@", context, runtime) == ("S1", "os", True)
    assert resolved("@@{S1.undeclared}@@", context, runtime | {("S1", "undeclared")}) == ("S1", "undeclared", True)
    assert resolved("@@{token}@@", context, runtime) == (None, "token", True)
    with pytest.raises(MacroError, match="unknown name 'os'"):
        resolved("@@{os}@@", context.at("S2"), runtime)  # vm1's os and S1's run-time os are not S2's


def test_namespaced_names_name_the_owner_exactly() -> None:
    context = app_context(current="S2")
    assert resolved("@@{Deployment_d1_prop}@@", context) == ("d1", "prop", False)
    assert resolved("@@{Substrate_vm1_ip_address}@@", context, {("vm1", "ip_address")}) == (
        "vm1",
        "ip_address",
        True,
    )
    with pytest.raises(MacroError, match="names 'nope' of Deployment d1"):
        resolved("@@{Deployment_d1_nope}@@", context)


def test_namespaced_names_with_overlapping_entity_names() -> None:
    context = MacroContext(
        entities=(
            Entity("Service", "web", {"db_port": "1"}),
            Entity("Service", "web_db", {"port": "2"}),
        ),
        current="web",
    )
    assert resolved("@@{Service_web_db_port}@@", context) == ("web_db", "port", False)
    assert resolved("@@{Service_web_db_port}@@", replace(context, entities=context.entities[:1])) == (
        "web",
        "db_port",
        False,
    )


def test_credentials_resolve_by_name() -> None:
    context = app_context()
    assert resolved("@@{db_cred.username}@@", context) == ("db_cred", "username", False)
    assert resolved("@@{db_cred.secret}@@", context) == ("db_cred", "secret", False)
    with pytest.raises(MacroError, match="has 'username' and 'secret', not 'password'"):
        resolved("@@{db_cred.password}@@", context)
    assert resolve(CredRef("db_cred", "secret", 0), context).key == ("db_cred", "secret")


def test_bind_tells_credentials_from_object_references() -> None:
    bound = bind("@@{db_cred.username}@@ @@{calm_b64encode(db_cred.secret)}@@ @@{S1.port}@@", app_context())
    expressions = [macro.expression for macro in bound.macros]
    assert expressions == [
        CredRef("db_cred", "username", 3),
        Call("calm_b64encode", (CredRef("db_cred", "secret", 41),), 26),
        Ref("S1", "port", 63),
    ]
    assert references(bound) == [Ref("S1", "port", 63)]


def test_unknown_objects_and_attributes_are_errors_with_suggestions() -> None:
    context = app_context()
    with pytest.raises(MacroError, match="unknown object 'S3'") as caught:
        resolved("@@{S3.address}@@", context)
    assert caught.value.position == 3
    with pytest.raises(MacroError, match=r"unknown attribute 'portt' of 'S1' .*did you mean 'port'"):
        resolved("@@{S1.portt}@@", context)
    with pytest.raises(MacroError, match=r"unknown name 'regoin' \(looked in Service S1, Package p1"):
        resolved("@@{regoin}@@", context)


# --- check ---------------------------------------------------------------------------------------


def test_check_accepts_known_and_runtime_names() -> None:
    text = "@@{S1.port}@@ @@{ip_address}@@ @@{db_cred.secret}@@ @@{token}@@ @@{calm_unique}@@"
    assert check(text, app_context(), {(None, "token")}) == []


def test_check_reports_every_unknown_name_with_position_and_macro() -> None:
    text = "curl @@{S3.address}@@:@@{S1.prot}@@/@@{calm_string(nope)}@@"
    errors = check(text, app_context())
    assert [(e.position, e.macro) for e in errors] == [
        (8, "@@{S3.address}@@"),
        (25, "@@{S1.prot}@@"),
        (51, "@@{calm_string(nope)}@@"),
    ]
    assert all(str(e).startswith(f"position {e.position}: unknown") for e in errors)


def test_check_validates_literal_time_windows() -> None:
    (error,) = check('@@{calm_is_within("25:00", "06:00")}@@', app_context())
    assert error.position == 3
    assert "two times of day" in error.message
    assert check('@@{calm_is_within("2024-01-01T10:00", "18:00")}@@', app_context())
    assert check('@@{calm_is_within("22:00", "06:00:30")}@@', app_context()) == []


# --- render --------------------------------------------------------------------------------------


def test_render_substitutes_context_values_and_runtime_values() -> None:
    context = app_context()
    text = "@@{S1.port}@@ @@{ip_address}@@ @@{S2.ip_address}@@ @@{token}@@"
    values = {("vm1", "ip_address"): "10.0.0.1", ("vm2", "ip_address"): "10.0.0.2", (None, "token"): "t"}
    assert render(text, context, values) == "8080 10.0.0.1 10.0.0.2 t"


def test_render_values_take_precedence_over_the_context() -> None:
    assert render("@@{port}@@", app_context(), {("S1", "port"): 9090}) == "9090"


def test_render_without_a_value_is_an_error_naming_the_attribute() -> None:
    with pytest.raises(MacroError, match="'ip_address' of Substrate vm1 has no value yet") as caught:
        render("x=@@{ip_address}@@", app_context(), {})
    assert caught.value.position == 5


def test_lists_render_comma_separated_and_index() -> None:
    context = app_context()
    assert render("@@{hosts}@@", context) == "a,b"
    assert render("@@{hosts[calm_array_index]}@@", context) == "b"
    assert render("@@{S2.ip_address[1]}@@", context, {("vm2", "ip_address"): "10.0.0.1,10.0.0.2"}) == "10.0.0.2"
    with pytest.raises(MacroError, match="index 2 is out of range"):
        render("@@{hosts[2]}@@", context)
    with pytest.raises(MacroError, match="must be a whole number"):
        render('@@{hosts["0"]}@@', context)


def test_booleans_render_as_yaml_writes_them() -> None:
    context = MacroContext(entities=(Entity("Application", "a", {"on": True}),))
    assert render("@@{on}@@", context) == "true"


def test_arithmetic_and_joining() -> None:
    context = app_context()
    assert render("@@{calm_int(port) + 1}@@", context) == "8081"
    assert render("@@{calm_array_index + 1}@@", context) == "2"
    assert render("@@{calm_int(replicas) - calm_array_index - 1}@@", context) == "0"
    assert render('@@{"v" + version}@@', context) == "v1.2"
    with pytest.raises(MacroError, match="'\\+' adds two numbers or joins two texts"):
        render("@@{port + 1}@@", context)
    with pytest.raises(MacroError, match="'-' subtracts whole numbers only"):
        render('@@{port - "1"}@@', context)


def test_secrets_are_masked_without_a_secrets_source() -> None:
    text = "@@{db_cred.username}@@:@@{db_cred.secret}@@ key=@@{api_key}@@"
    assert render(text, app_context()) == f"admin:{SECRET_MASK} key={SECRET_MASK}"


def test_secrets_are_fetched_by_reference_only_at_render_and_once() -> None:
    calls: list[str] = []

    def vault(reference: str) -> str:
        calls.append(reference)
        return {"vault-db-password": "hunter2", "vault-api-key": "k3y"}[reference]

    text = "@@{db_cred.secret}@@ @@{db_cred.secret}@@ @@{api_key}@@ @@{calm_b64encode(db_cred.secret)}@@"
    assert render(text, app_context(), secrets=vault) == "hunter2 hunter2 k3y aHVudGVyMg=="
    assert calls == ["vault-db-password", "vault-api-key"]
    assert render("@@{db_cred.username}@@", app_context(), secrets=never) == "admin"


def test_errors_never_quote_a_secret_value() -> None:
    with pytest.raises(MacroError) as caught:
        render("@@{calm_int(db_cred.secret)}@@", app_context(), secrets=lambda reference: "hunter2")
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(caught.value.args)
    with pytest.raises(MacroError) as caught:
        render("@@{calm_b64decode(api_key)}@@", app_context(), secrets=lambda reference: "not base64!")
    assert "not base64!" not in str(caught.value)


# --- built-ins -----------------------------------------------------------------------------------


def test_every_builtin_of_the_issue_exists() -> None:
    assert set(BUILTINS) == {
        "calm_array_index",
        "calm_blueprint_name",
        "calm_blueprint_uuid",
        "calm_application_name",
        "calm_application_uuid",
        "calm_project_name",
        "calm_is_within",
        "calm_time",
        "calm_date",
        "calm_unique",
        "calm_random",
        "calm_unique_hash",
        "calm_int",
        "calm_string",
        "calm_b64encode",
        "calm_b64decode",
    }


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("calm_array_index", "1"),
        ("calm_blueprint_name", "shop"),
        ("calm_blueprint_uuid", "b-uuid"),
        ("calm_application_name", "shop-prod"),
        ("calm_application_uuid", "0b7e4a2c-0000-4000-8000-000000000001"),
        ("calm_project_name", "retail"),
    ],
)
def test_context_builtins(macro: str, expected: str) -> None:
    assert render("@@{" + macro + "}@@", app_context()) == expected


def test_context_builtins_unknown_are_errors_at_render() -> None:
    with pytest.raises(MacroError, match="calm_project_name is not known in this context"):
        render("@@{calm_project_name}@@", MacroContext())


def test_calm_time_and_calm_date_use_the_clock() -> None:
    context = app_context()
    assert render("@@{calm_time}@@ @@{calm_date}@@", context, clock=at(FIXED_NOW)) == "09:30:15 2024-05-17"
    assert render('@@{calm_time("%H%M")}@@/@@{calm_date("%d.%m.%Y")}@@', context, clock=at(FIXED_NOW)) == (
        "0930/17.05.2024"
    )
    with pytest.raises(MacroError, match="the format must be text"):
        render("@@{calm_date(1)}@@", context, clock=at(FIXED_NOW))
    with pytest.raises(MacroError, match="invalid format"):
        render('@@{calm_date("\ud800")}@@', context, clock=at(FIXED_NOW))


@pytest.mark.parametrize(
    ("window", "now", "inside"),
    [
        (("08:00", "18:00"), "09:30", True),
        (("08:00", "18:00"), "07:59", False),
        (("08:00", "18:00"), "18:00", True),
        (("08:00", "18:00"), "08:00", True),
        (("08:00", "18:00"), "18:00:01", False),
        (("22:00", "06:00"), "23:15", True),
        (("22:00", "06:00"), "05:59", True),
        (("22:00", "06:00"), "12:00", False),
        (("9:30:15", "9:30:15"), "09:30:15", True),
    ],
)
def test_calm_is_within_a_daily_window(window: tuple[str, str], now: str, inside: bool) -> None:
    hour, minute, *second = (int(part) for part in now.split(":"))
    moment = FIXED_NOW.replace(hour=hour, minute=minute, second=second[0] if second else 0)
    text = f'@@{{calm_is_within("{window[0]}", "{window[1]}")}}@@'
    assert render(text, app_context(), clock=at(moment)) == ("1" if inside else "0")


def test_calm_is_within_uses_the_clocks_time_zone() -> None:
    paris_summer = timezone(timedelta(hours=2))
    moment = datetime(2024, 5, 17, 7, 30, tzinfo=UTC).astimezone(paris_summer)  # 09:30 in Paris
    assert render('@@{calm_is_within("09:00", "10:00")}@@', app_context(), clock=at(moment)) == "1"


def test_calm_is_within_absolute_moments() -> None:
    context = app_context()
    text = '@@{calm_is_within("2024-05-17T09:00", "2024-05-17T10:00:00+00:00")}@@'
    assert render(text, context, clock=at(FIXED_NOW)) == "1"
    assert render(text, context, clock=at(FIXED_NOW + timedelta(hours=1))) == "0"
    assert render(text, context, clock=at(FIXED_NOW.replace(tzinfo=None))) == "1"
    with pytest.raises(MacroError, match="starts after it ends"):
        render('@@{calm_is_within("2024-05-18", "2024-05-17")}@@', context, clock=at(FIXED_NOW))
    with pytest.raises(MacroError, match="two times of day"):
        render('@@{calm_is_within(S1.port, "10:00")}@@', context, clock=at(FIXED_NOW))
    with pytest.raises(MacroError, match="must be text"):
        render('@@{calm_is_within(1, "10:00")}@@', context, clock=at(FIXED_NOW))


def test_calm_unique_and_unique_hash_are_stable_per_application() -> None:
    context = app_context()
    unique = render("@@{calm_unique}@@", context)
    unique_hash = render("@@{calm_unique_hash}@@", context)
    assert re.fullmatch(r"[1-9][0-9]{5}", unique)
    assert re.fullmatch(r"[0-9a-f]{32}", unique_hash)
    assert render("@@{calm_unique}@@ @@{calm_unique_hash}@@", context.at("S2")) == f"{unique} {unique_hash}"
    other = replace(context, builtins=replace(context.builtins, application_uuid="another"))
    assert render("@@{calm_unique}@@", other) != unique
    assert render("@@{calm_unique_hash}@@", other) != unique_hash
    with pytest.raises(MacroError, match="calm_unique is not known"):
        render("@@{calm_unique}@@", MacroContext())


def test_calm_random_uses_the_random_source() -> None:
    first = render("@@{calm_random}@@ @@{calm_random}@@", app_context(), random_source=random.Random(7))
    again = render("@@{calm_random}@@ @@{calm_random}@@", app_context(), random_source=random.Random(7))
    assert first == again
    assert all(0 <= int(number) < 1_000_000 for number in first.split())
    assert render("@@{calm_random}@@", app_context()).isdigit()


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("calm_int(port)", "8080"),
        ('calm_int(" 42 ")', "42"),
        ('calm_int("-7")', "-7"),
        ("calm_int(3)", "3"),
        ("calm_string(3) + calm_string(hosts)", "3a,b"),
        ('calm_b64encode("héllo")', base64.b64encode("héllo".encode()).decode()),
        ('calm_b64decode("aMOpbGxv")', "héllo"),
        ('calm_b64decode(calm_b64encode("x}@@y"))', "x}@@y"),
    ],
)
def test_conversions(macro: str, expected: str) -> None:
    assert render("@@{" + macro + "}@@", app_context()) == expected


@pytest.mark.parametrize(
    ("macro", "words"),
    [
        ('calm_int("4.5")', "not a whole number"),
        ("calm_int(hosts)", "not a whole number"),
        ('calm_int("")', "not a whole number"),
        ('calm_b64decode("***")', "not base64"),
        ('calm_b64decode("/w==")', "not base64"),
    ],
)
def test_conversion_errors(macro: str, words: str) -> None:
    with pytest.raises(MacroError, match=words) as caught:
        render("x @@{" + macro + "}@@", app_context())
    assert caught.value.position == 5


# --- partial render ------------------------------------------------------------------------------


def test_partial_render_resolves_what_is_known_and_keeps_what_a_task_sets() -> None:
    context = app_context()
    runtime = {("vm1", "ip_address"), ("vm2", "ip_address")}
    text = "ip=@@{ip_address}@@ peer=@@{S2.ip_address}@@ port=@@{S1.port}@@ d=@@{Deployment.prop}@@"
    assert partial_render(text, context, runtime) == (
        "ip=@@{Substrate_vm1_ip_address}@@ peer=@@{Substrate_vm2_ip_address}@@ port=8080 d=deployment-prop"
    )


def test_partial_render_keeps_application_properties_unnamespaced() -> None:
    assert partial_render("@@{later}@@", app_context(), {("shop-prod", "later")}) == "@@{Application.later}@@"


def test_partial_render_keeps_secrets_and_moments_for_the_run() -> None:
    text = (
        "@@{db_cred.username}@@ @@{db_cred.secret}@@ @@{api_key}@@ @@{calm_time}@@ @@{calm_date}@@ "
        '@@{calm_random}@@ @@{calm_is_within("08:00", "18:00")}@@ @@{calm_application_name}@@'
    )
    assert partial_render(text, app_context()) == (
        "admin @@{db_cred.secret}@@ @@{Service_S1_api_key}@@ @@{calm_time}@@ @@{calm_date}@@ "
        '@@{calm_random}@@ @@{calm_is_within("08:00", "18:00")}@@ shop-prod'
    )


def test_partial_render_keeps_app_builtins_the_context_does_not_know_yet() -> None:
    context = replace(app_context(), builtins=BuiltinValues(blueprint_name="shop"))
    assert partial_render("@@{calm_blueprint_name}@@ @@{calm_unique}@@ @@{calm_array_index}@@", context) == (
        "shop @@{calm_unique}@@ @@{calm_array_index}@@"
    )


def test_partial_render_folds_what_is_known_inside_kept_macros() -> None:
    context = app_context()
    runtime = {("vm1", "ip_address")}
    text = "@@{calm_string(calm_int(port) + 1) + ip_address}@@ @@{hosts[calm_random - calm_random]}@@"
    assert partial_render(text, context, runtime) == (
        '@@{"8081" + Substrate_vm1_ip_address}@@ @@{Service_S1_hosts[calm_random - calm_random]}@@'
    )


def test_partial_render_then_render_gives_the_same_text_as_render() -> None:
    context = app_context()
    runtime = {("vm1", "ip_address"), ("vm2", "ip_address"), (None, "token")}
    values = {("vm1", "ip_address"): "10.0.0.1", ("vm2", "ip_address"): "10.0.0.2", (None, "token"): "tk"}
    text = (
        "#!/bin/sh\nssh @@{db_cred.username}@@@@@{S2.ip_address}@@ -p @@{calm_int(port) + calm_array_index}@@\n"
        "echo @@{calm_b64encode(db_cred.secret)}@@ @@{token}@@ @@{hosts[0]}@@ @@{Deployment_d1_prop}@@ "
        '@@{calm_time("%Y")}@@ @@{calm_unique_hash}@@\n'
    )
    kept = partial_render(text, context, runtime)
    assert "@@{Substrate_vm2_ip_address}@@" in kept
    assert "@@{token}@@" in kept
    assert "hunter2" not in kept
    options: dict[str, Any] = {"secrets": lambda reference: "hunter2", "clock": at(FIXED_NOW)}
    assert render(kept, context, values, **options) == render(text, context, values, **options)


def test_partial_render_protects_values_that_look_like_macros() -> None:
    context = MacroContext(
        entities=(Entity("Application", "a", {"evil": "@@{db.secret}@@", "at": "@@", "brace": "{x}@@"}),),
        credentials=(Credential("db", "u", Secret("r")),),
    )
    kept = partial_render("@@{evil}@@ @@{at}@@@@{brace}@@ @@{at}@@{brace", context)
    assert render(kept, context, secrets=never) == "@@{db.secret}@@ @@{x}@@ @@{brace"


def test_partial_render_raises_on_unknown_names_and_missing_values() -> None:
    with pytest.raises(MacroError, match="unknown object 'S9'") as caught:
        partial_render("echo @@{S9.x}@@", app_context())
    assert caught.value.position == 8
    with pytest.raises(MacroError, match="has no value before the run and no task of this action sets it"):
        partial_render("@@{ip_address}@@", app_context())
    with pytest.raises(MacroError, match="not a whole number"):
        partial_render("@@{calm_int(version)}@@", app_context())


def test_partial_render_of_macro_free_text_is_the_text() -> None:
    assert partial_render("plain {text} @@ }@@", MacroContext()) == "plain {text} @@ }@@"


# --- properties ----------------------------------------------------------------------------------

MACRO_SYMBOLS = ["@", "@@", "@@{", "}@@", "{", "}", ".", "(", ")", '"', "'", ",", "\\", "[", "]", "+", "-", " ", "\n"]
MACRO_WORDS = ["1", "42", "x", "S1", "port", "calm_int", "calm_time", "calm_is_within", "é", "\x00"]
MACRO_ALPHABET = st.sampled_from([*MACRO_SYMBOLS, *MACRO_WORDS])
BIASED_TEXT = st.lists(MACRO_ALPHABET | st.text(max_size=3), max_size=40).map("".join)
ANY_TEXT = st.text() | BIASED_TEXT


@settings(max_examples=400)
@given(ANY_TEXT)
def test_parse_returns_a_template_or_raises_macro_error(text: str) -> None:
    try:
        template = parse(text)
    except MacroError as error:
        assert 0 <= error.position <= len(text)
        return
    assert isinstance(template, Template)
    assert template.source == text


@settings(max_examples=300)
@given(ANY_TEXT)
def test_rendering_any_parsed_text_returns_text_or_raises_macro_error(text: str) -> None:
    try:
        template = parse(text)
    except MacroError:
        return
    for context in (MacroContext(), app_context()):
        try:
            rendered = render(template, context, clock=at(FIXED_NOW), random_source=random.Random(0))
        except MacroError:
            continue
        assert isinstance(rendered, str)


@given(ANY_TEXT.filter(lambda text: "@@{" not in text))
def test_macro_free_text_renders_unchanged(text: str) -> None:
    assert parse(text).is_literal
    assert render(text, MacroContext()) == text
    assert partial_render(text, MacroContext()) == text


@settings(max_examples=300)
@given(BIASED_TEXT)
def test_unparse_round_trips_every_parsed_macro(text: str) -> None:
    try:
        template = parse(text)
    except MacroError:
        return
    for macro in template.macros:
        again = parse("@@{" + unparse(macro.expression) + "}@@").macros[0].expression
        assert without_positions(again) == without_positions(macro.expression)


LITERAL_TEXT = st.text(alphabet=st.sampled_from(["@", "{", "}", "a", " ", '"'])).filter(lambda t: "@@{" not in t)


@settings(max_examples=200)
@given(LITERAL_TEXT, st.text(), LITERAL_TEXT, st.text(), LITERAL_TEXT)
def test_partial_render_then_render_equals_render(
    before: str, known: str, middle: str, produced: str, after: str
) -> None:
    """Whatever the values (even ones that read like macros) and the text around them."""
    context = MacroContext(entities=(Entity("Application", "a", {"known": known, "produced": None}),))
    text = f"{before}@@{{known}}@@{middle}@@{{produced}}@@{after}"
    runtime = {("a", "produced")}
    values = {("a", "produced"): produced}
    assert render(partial_render(text, context, runtime), context, values) == before + known + middle + produced + after
