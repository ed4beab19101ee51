"""Masking: every known value (and its encoded forms) disappears from any text, overlaps included."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import subprocess
import textwrap
import zlib
from urllib.parse import quote, quote_plus

import pytest
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


# --- issue 25: the encodings a tenant's script printed beside the mask ------------------------------

ATTACKED = ["s3cr3t-Pass", "pa ss'wo\"rd$!", "clé-ünïcødé-42", "tok/en+=&<x>;"]
"""Secrets a tenant's script prints: plain, with shell and markup specials, non-ASCII."""


def _printed(secret: str, script: str) -> list[str]:
    """What a real shell prints for `script`, with the secret in $S (stdout and stderr, as lines)."""
    done = subprocess.run(["bash", "-c", script], env={"S": secret, "PATH": os.environ["PATH"], "LC_ALL": "C.UTF-8"},
                          capture_output=True, text=True, timeout=30, check=True)
    return (done.stdout + done.stderr).splitlines()


def _python(code: str) -> str:
    """A shell line running Python `code`, with the secret in `s`."""
    return "python3 -c '" + "import base64, html, os, shlex, zlib; s = os.environ[\"S\"]; " + code + "'"


SCRIPTS = {
    "base32": 'printf %s "$S" | base32; printf "user:%s" "$S" | base32 -w0; echo; printf %s "$S" | basenc --base32hex',
    "gzip+base64": 'printf %s "$S" | gzip | base64; printf "PASSWORD=%s\\n" "$S" | gzip -n | base64 -w0; echo',
    "zlib+base64": _python("print(base64.b64encode(zlib.compress(s.encode())).decode())"),
    "json-all-escaped": _python("print(\"\".join(\"\\\\u%04x\" % ord(c) for c in s))"),
    "html": _python("print(html.escape(s)); print(\"\".join(\"&#%d;\" % ord(c) for c in s)); "
                    "print(\"\".join(\"&#x%x;\" % ord(c) for c in s))"),
    "xml": _python("from xml.sax.saxutils import escape; "
                   "print(escape(s, {chr(39): \"&apos;\", chr(34): \"&quot;\"}))"),
    "bash -x": 'set -x; echo "$S" >/dev/null; : "$S"',
    "printf %q": 'printf "%q\\n" "$S"',
    "shlex.quote": _python("print(shlex.quote(s))"),
    "python repr": _python("print(repr(s)); print(ascii(s)); print([s], {\"k\": s})"),
}


@pytest.mark.parametrize("encoding", SCRIPTS)
def test_a_secret_a_script_prints_in_another_encoding_is_masked(encoding: str) -> None:
    for secret in ATTACKED:
        masker = Masker([secret])
        carry = masker.carry()
        lines = _printed(secret, SCRIPTS[encoding])
        masked = [masker.mask(line, carry) for line in lines]
        assert all(MASK in line for line in masked), (encoding, secret, lines, masked)
        for line in masked:
            for part in line.split(MASK):
                assert secret[:4] not in part and secret[-4:] not in part, (encoding, secret, line)


def test_a_secret_split_across_two_lines_is_masked_on_both_at_every_cut() -> None:
    """`echo ${S:0:k}; echo ${S:k}` for every k: the first line may keep fewer characters than the
    edge threshold, never more; the rest is masked however short."""
    for secret in ["0123456789abcdef-secret", "s3cr3t-Pass", "pw-Zq81x"]:
        masker = Masker([secret])
        edge = min(8, -(-len(secret) // 2))
        for k in range(1, len(secret)):
            carry = masker.carry()
            first, second = masker.mask(secret[:k], carry), masker.mask("  " + secret[k:] + " done", carry)
            assert second == f"  {MASK} done", (secret, k, second)
            assert first == (secret[:k] if k < edge else MASK), (secret, k, first)


def test_a_value_over_three_lines_is_followed_through_the_middle_one() -> None:
    secret = "0123456789abcdef-a-long-secret-0123456789"
    masker = Masker([secret])
    carry = masker.carry()
    out = [masker.mask(part, carry) for part in (secret[:12], secret[12:30], secret[30:])]
    assert out == [MASK, MASK, MASK]


def test_gzip_base64_wrapped_over_lines_is_inflated_line_by_line() -> None:
    secret = "gz-" + "0123456789abcdef" * 3
    text = "".join(os.urandom(150).hex() + secret + "\n" for _ in range(3))
    payload = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    lines = textwrap.wrap(payload, 76)
    assert len(lines) > 1
    masker = Masker([secret])
    carry = masker.carry()
    masked = [masker.mask(line, carry) for line in lines]
    assert MASK in "".join(masked)
    kept = "".join(line for line in masked if line != MASK)
    with contextlib.suppress(Exception):  # what is left must not inflate to the secret
        assert secret not in zlib.decompressobj(wbits=47).decompress(base64.b64decode(kept + "==")).decode()


def test_a_compressed_bomb_is_inflated_only_up_to_the_limit() -> None:
    bomb = base64.b64encode(gzip.compress(b"\0" * (64 << 20) + b"s3cr3t-Pass", mtime=0)).decode()
    masker = Masker(["s3cr3t-Pass"])
    assert masker.mask(bomb) == bomb  # 64 MiB of zeros first: the secret is beyond INFLATE_LIMIT, nothing hangs


def test_the_start_of_a_starred_value_at_the_end_of_a_mask_does_not_grow_the_mask() -> None:
    """"*****a" starts with stars: the end of a mask is the start of that form, and masking it again
    would add a mask to a mask for ever."""
    masker = Masker(["*****a", "a*b*c*d"])
    assert masker.mask("x *****a y") == f"x {MASK} y"
    assert masker.mask("a*b*") == MASK and masker.mask("before ********") == "before ********"
