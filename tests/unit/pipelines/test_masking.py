"""Masking: every known value (and its encoded forms) disappears from any text, overlaps included."""

from __future__ import annotations

import base64
import json
import textwrap
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.masking import MASK, MIN_LENGTH, Masker


def test_values_inside_other_text_are_masked_everywhere() -> None:
    masker = Masker(["s3cr3t-pass", "token-abc"])
    text = "user=admin pass=s3cr3t-pass\nretry with s3cr3t-pass;token-abcdef"
    assert masker.mask(text) == f"user=admin pass={MASK}\nretry with {MASK};{MASK}def"


def test_overlapping_values_leave_no_part_in_clear() -> None:
    masker = Masker(["abcdef", "defghi"])
    # sequential longest-first replacement would leave "ghi", a part of the second value
    assert masker.mask("xx abcdefghi yy") == f"xx {MASK} yy"
    masker = Masker(["password", "pass"])  # one value inside another
    assert masker.mask("password pass passport") == f"{MASK} {MASK} {MASK}port"


def test_adjacent_values_become_one_mask() -> None:
    assert Masker(["alpha-1", "beta-22"]).mask("alpha-1beta-22!") == f"{MASK}!"


def test_short_and_empty_values_are_ignored() -> None:
    masker = Masker(["", "a", "on", "123", "abcd"])
    assert masker.ignored == 4 and len(masker) == 1
    assert masker.mask("a on 123 abcd") == f"a on 123 {MASK}"
    assert Masker([]).mask("anything") == "anything"
    assert Masker(["secret"]).mask("") == ""


def test_values_made_of_the_mask_character_are_ignored() -> None:
    masker = Masker(["****", "**********"])
    assert masker.ignored == 2 and masker.mask("a ** b") == "a ** b"


def test_a_value_that_a_mask_could_complete_is_still_masked() -> None:
    # Masking "SECRETVALUE" would put "********" right before "ab", re-creating "**ab".
    masker = Masker(["SECRETVALUE", "**ab"])
    out = masker.mask("SECRETVALUEab")
    assert "**ab" not in out and "SECRETVALUE" not in out


def test_base64_forms_whole_and_embedded() -> None:
    masker = Masker(["s3cr3t-pass"])
    whole = base64.b64encode(b"s3cr3t-pass").decode()
    assert masker.mask(f"data: {whole}") == f"data: {MASK}"
    for prefix in (b"admin:", b"admin1:", b"admin12:"):  # the three alignments
        header = base64.b64encode(prefix + b"s3cr3t-pass" + b"\n").decode()
        masked = masker.mask(f"Authorization: Basic {header}")
        assert MASK in masked
        assert b"s3cr3t-pass" in base64.b64decode(header)  # the header did carry it...
        before, after = masked.removeprefix("Authorization: Basic ").split(MASK)
        # ...and what stays visible encodes the prefix, the trailing newline and at most one edge character
        assert header.startswith(before) and header.endswith(after)
        assert len(before) <= -(-len(prefix) * 4 // 3) + 1 and len(after.rstrip("=")) <= 3
    urlsafe = base64.urlsafe_b64encode("ü>>?s3cr3t-pass".encode()).decode()
    assert MASK in Masker(["ü>>?s3cr3t-pass"]).mask(urlsafe)


def test_url_and_json_escaped_forms() -> None:
    value = 'p@ss w/"quotes" ü'
    masker = Masker([value])
    for form in (quote(value, safe=""), quote_plus(value, safe=""), json.dumps(value), json.dumps(value)[1:-1],
                 json.dumps(value, ensure_ascii=False)):
        assert masker.mask(f"before {form} after").count(MASK) == 1, form
    assert masker.mask(f"postgres://u:{quote(value, safe='')}@db/x") == f"postgres://u:{MASK}@db/x"


def test_multiline_values_are_masked_line_by_line_too() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----\n"
    masker = Masker([key])
    assert masker.mask(f"key:\n{key}") == f"key:\n{MASK}"
    rewrapped = key.replace("\n", "\r\n    ")
    masked = masker.mask(rewrapped)
    assert "MIIEvQIBADANBgkqhkiG9w0B" not in masked and "AQEFAASCBKcwggSjAgEAAoIB" not in masked
    assert masker.mask(key.rstrip("\n")) == MASK  # the stripped form


def test_repr_reveals_no_value() -> None:
    masker = Masker(["super-secret-value"])
    assert "super" not in repr(masker) and "1 values" in repr(masker)
    more = masker.extended(["another-secret"])
    assert len(more) == 2 and more.mask("another-secret super-secret-value") == f"{MASK} {MASK}"


def test_mask_is_pure_and_idempotent() -> None:
    masker = Masker(["abcdef", "defghi"])
    text = "abcdefghi and abcdef"
    assert masker.mask(text) == masker.mask(text) == masker.mask(masker.mask(text))


# A tiny alphabet on purpose: values then overlap, nest, touch each other and touch the mask.
alphabet = st.sampled_from("abc*\n")
values = st.lists(st.text(alphabet, min_size=0, max_size=8), max_size=5)


@settings(max_examples=1000, deadline=None)
@given(values=values, data=st.data())
def test_masked_text_never_contains_a_known_value(values: list[str], data: st.DataObject) -> None:
    # The text is made of whole values, pieces of values (prefixes and suffixes) and filler.
    pieces = st.text(alphabet, max_size=4)
    if values:
        value = st.sampled_from(values)
        pieces = st.one_of(pieces, value, value.map(lambda v: v[: len(v) // 2]), value.map(lambda v: v[len(v) // 2:]))
    text = "".join(data.draw(st.lists(pieces, max_size=12)))
    masked = Masker(values).mask(text)
    for v in values:
        if len(v) >= MIN_LENGTH and v.strip("*"):
            assert v not in masked


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=200), st.lists(st.text(min_size=MIN_LENGTH, max_size=20), max_size=4))
def test_text_without_secrets_is_unchanged_by_unrelated_values(text: str, secrets: list[str]) -> None:
    masker = Masker(secrets)
    masked = masker.mask(text)
    if not any(secret in text for secret in secrets) and MASK not in masked:
        assert masked == text
    for secret in secrets:
        if secret.strip("*"):
            assert secret not in masked


# --- every encoding a script can print (issue: base64 wrapped, Basic, URL both cases, JSON escapes,
# hex, calm_b64encode/decode), as properties over random secrets ------------------------------------


secrets_st = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="*"),
                     min_size=8, max_size=48)
filler = st.text(st.sampled_from("abc XYZ 012=:\t,;"), max_size=30)


def encodings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    go_json = json.dumps(secret)[1:-1].replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return {
        "literal": secret,
        "base64": base64.b64encode(raw).decode(),
        "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
        "basic": "Basic " + base64.b64encode(b"admin:" + raw).decode(),
        "url-upper": quote(secret, safe=""),
        "url-lower": "".join(p.lower() if p.startswith("%") else p for p in _escapes(quote(secret, safe=""))),
        "url-plus": quote_plus(secret, safe=""),
        "json": json.dumps(secret)[1:-1],
        "json-slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "json-go": go_json,
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }


def _escapes(text: str) -> list[str]:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%":
            out.append(text[i:i + 3])
            i += 3
        else:
            out.append(text[i])
            i += 1
    return out


@settings(max_examples=150, deadline=None)
@given(secret=secrets_st, before=filler, after=filler)
def test_every_encoding_of_a_secret_is_masked(secret: str, before: str, after: str) -> None:
    masker = Masker([secret])
    for name, encoded in encodings(secret).items():
        masked = masker.mask(f"{before}{encoded}{after}")
        assert encoded not in masked, name
        if name != "basic":  # inside Basic only the value's own base64 characters are masked
            assert secret not in masked, name


@settings(max_examples=100, deadline=None)
@given(secret=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=60, max_size=200),
       prefix=st.binary(max_size=5))
def test_base64_wrapped_at_76_columns_is_masked_line_by_line(secret: str, prefix: bytes) -> None:
    """`base64` (the tool) wraps at 76: each line is masked on its own, as output arrives."""
    masker = Masker([secret])
    lines = textwrap.wrap(base64.b64encode(prefix + secret.encode()).decode(), 76)
    masked = [masker.mask(line) for line in lines]
    rejoined = "".join(line for line in masked if MASK not in line)
    # what is left in clear decodes to at most a few bytes of the secret around the edges
    kept = "".join(part for line in masked for part in line.split(MASK))
    assert len(kept) < 2 * 12, (lines, masked)
    assert base64.b64encode(secret.encode()).decode()[4:-4] not in rejoined


@settings(max_examples=100, deadline=None)
@given(inner=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=6, max_size=40))
def test_a_base64_secret_is_masked_as_it_decodes_too(inner: str) -> None:
    """calm_b64decode (or `base64 -d`) of a secret that is base64 prints the text inside it."""
    secret = base64.b64encode(inner.encode()).decode()
    masked = Masker([secret]).mask(f"decoded: {inner} encoded: {secret}")
    assert inner not in masked and secret not in masked


def test_hex_and_lower_case_url_escapes_reached_output_before() -> None:
    """Two of the forms the earlier runs' masker (the literal value only) let through."""
    secret = "p@ss/w0rd&más"
    masked = Masker([secret]).mask(f"{secret.encode().hex()} {quote(secret, safe='').lower()}")
    assert MASK in masked and secret.encode().hex() not in masked


def test_safe_cut_never_splits_a_form() -> None:
    masker = Masker(["0123456789-secret"])
    text = "x" * 100 + "0123456789-secret" + "y" * 100
    for at in range(95, 125):
        cut = masker.safe_cut(text, at)
        assert "0123456789-secret" in (text[:cut] + "|" + text[cut:]).replace("|", "") and (
            cut <= 100 or cut >= 117), at
