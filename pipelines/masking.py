r"""Masking of known secret values in any text before it is stored or shown.

Runs capture the output of scripts that received decrypted credentials; that output ends up in
an ActionRun's status, in Events and in logs, where a secret must never appear. A `Masker` is
built from the values a run could have seen and replaces every occurrence with `MASK`. It is
pure (no I/O, no state after construction), so any layer can apply it, and cheap to reuse.

What is masked, per known value (the *forms* of a value):

- the value itself, its whitespace-stripped form (a trailing newline in a stored password is
  common, output rarely keeps it) and, for a multi-line value such as a PEM key, each of its
  stripped lines, because programs re-wrap, indent or print such values line by line;
- its JSON-escaped forms (a value with quotes, backslashes or non-ASCII text appears escaped in
  JSON output; `\/` for `/` as PHP and some Java writers do; `\u0026`, `\u003c`, `\u003e` for
  `&`, `<`, `>` as Go's encoder does), its URL-encoded forms (`quote` and `quote_plus`, upper- and
  lower-case escapes: a password inside a connection URL) and its hexadecimal forms (both cases:
  `xxd -p`, `od`, a hash tool's dump);
- when the value is itself base64 (a key, a token), the text it decodes to (what
  `calm_b64decode` or `base64 -d` prints);
- its base64 forms, standard and URL-safe alphabets, at the three byte alignments: base64 of a
  value embedded in a longer payload (`Authorization: Basic base64("user:" + password)`, a
  Kubernetes Secret manifest) does not contain `b64(value)`, but it does contain the characters
  that depend only on the value's bytes; those are masked. This is what turns a base64 dump of a
  secret into stars instead of a string anyone can decode.

Cuts. Output is masked a line (or a 64 KiB piece of a long line) at a time, and `base64` wraps at
76 columns: a form can straddle the cut. Two rules cover it. A piece that ends with the start of
a base64 form, or starts with its end (at least `MIN_FORM_LENGTH` characters of it), has that
part masked: a wrapped encoding is masked line by line. And whoever cuts long lines asks
`safe_cut` where to cut, which moves the cut out of any occurrence of any form.

Thresholds. A value shorter than `MIN_LENGTH` (4) characters is not masked: replacing every "a",
"on" or "123" in a run's output would make it unreadable, and the positions of the stars would
then point at the value anyway. Such a value is too short to be a secret worth the name (a
Blueprint validator should warn about it); the escaped and URL-encoded forms follow the same
rule. Fragments (base64 characters, single lines of a multi-line value) must be at least
`MIN_FORM_LENGTH` (8) characters: a 4-character base64 fragment occurs by chance in ordinary
text, and masking it would garble output without protecting anything (fewer than 6 bytes of the
value are behind it). A value made only of `*` cannot be masked (the mask itself
contains it) and is ignored as well.

Why not "longest value first, then the next": with overlapping values (`abcdef` and `defghi` in
`abcdefghi`) sequential replacement masks the first and leaves `ghi`, a part of the second,
in clear. Instead every occurrence of every form is found (overlaps included), the occurrences
are merged into intervals, and each interval becomes one `MASK`, which also hides how long a
value was and how many values were adjacent.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

MASK = "********"
MIN_LENGTH = 4
MIN_FORM_LENGTH = 8


def _base64_cores(data: bytes) -> set[str]:
    """The base64 characters that depend only on `data`, for each of the three alignments.

    At alignment `shift` the value starts `shift` bytes into a 3-byte group: the first characters
    of the encoding also carry bits of the preceding bytes, and the last one (unless the value
    ends on a group boundary) bits of the following byte, so both are cut off.
    """
    cores: set[str] = set()
    for shift, skip in ((0, 0), (1, 2), (2, 3)):
        total = shift + len(data)
        tail = 0 if total % 3 == 0 else 1
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(bytes(shift) + data).decode("ascii").rstrip("=")
            cores.add(encoded[skip:len(encoded) - tail])
    # At alignment 0 the standalone, padded encoding is a form of its own.
    cores.add(base64.b64encode(data).decode("ascii"))
    cores.add(base64.urlsafe_b64encode(data).decode("ascii"))
    return cores


_HTML_SAFE = {"&": "\\u0026", "<": "\\u003c", ">": "\\u003e"}
_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _json_forms(value: str) -> set[str]:
    forms = set()
    for ascii_only in (True, False):
        plain = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        html = "".join(_HTML_SAFE.get(c, c) for c in plain)
        forms |= {plain, html, plain.replace("/", "\\/"), html.replace("/", "\\/")}
    return forms


def _decoded(value: str) -> str | None:
    """The text a base64 value decodes to, if it is base64 of UTF-8 text."""
    compact = "".join(value.split())
    if len(compact) < MIN_LENGTH or len(compact) % 4 == 1:
        return None
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            text = decode(compact + "=" * (-len(compact) % 4)).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if text.isprintable() or text.strip().isprintable():
            return text
    return None


def _forms(value: str) -> set[str]:
    """Every string whose presence in a text would disclose `value` (see the module docstring)."""
    whole = {value, value.strip()} | _json_forms(value)
    for encoded in (quote(value, safe=""), quote_plus(value, safe="")):
        whole |= {encoded, _ESCAPE.sub(lambda m: m.group(0).lower(), encoded)}
    fragments: set[str] = set()
    if "\n" in value or "\r" in value:
        fragments.update(line.strip() for line in value.splitlines())
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: no byte form, the others stay
        raw = value.encode("utf-8")
        whole |= {raw.hex(), raw.hex().upper()}
        fragments.update(_base64_cores(raw))
    decoded = _decoded(value)
    if decoded is not None and decoded.strip() != value.strip():
        whole |= {decoded, decoded.strip()}
    forms = {f for f in whole if len(f) >= MIN_LENGTH}
    forms.update(f for f in fragments if len(f) >= MIN_FORM_LENGTH)
    return {f for f in forms if f.strip("*")}


_B64_EDGE = re.compile(r"[A-Za-z0-9+/_-]+")


def _occurrences(text: str, form: str) -> Iterable[tuple[int, int]]:
    """Every (start, end) of `form` in `text`, overlapping ones included (`aa` twice in `aaa`)."""
    start = text.find(form)
    while start >= 0:
        yield start, start + len(form)
        start = text.find(form, start + 1)


class Masker:
    """Replaces every known secret value (and its encoded forms) in a text with `MASK`.

    Built once per run (or per project) from the decrypted values; `mask` can then be applied to
    every line or chunk of output. `repr` never shows a value.
    """

    __slots__ = ("_encodings", "_forms", "_ignored", "_longest", "_refixpoint", "_values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        accepted: list[str] = []
        forms: set[str] = set()
        ignored = 0
        for value in dict.fromkeys(values):  # ordered de-duplication
            found = _forms(value) if len(value) >= MIN_LENGTH and value.strip("*") else set()
            if not found:
                ignored += 1
                continue
            accepted.append(value)
            forms.update(found)
        self._values = tuple(accepted)
        # Longest first: not needed for correctness (all intervals are merged) but an early long
        # hit covers the short forms inside it, which keeps the interval list short.
        self._forms = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        self._ignored = ignored
        self._longest = max((len(f) for f in self._forms), default=0)
        # The base64 forms, whose wrapped lines are masked at piece edges (see the docstring).
        self._encodings = tuple(f for f in self._forms
                                if len(f) >= MIN_FORM_LENGTH and _B64_EDGE.fullmatch(f.rstrip("=")))
        # Only a form containing the mask character can be re-created by a mask next to text.
        self._refixpoint = any("*" in f for f in self._forms)

    @property
    def ignored(self) -> int:
        """How many given values were too short (or all `*`) to be masked."""
        return self._ignored

    def __len__(self) -> int:
        """How many distinct values are masked."""
        return len(self._values)

    def __repr__(self) -> str:
        return f"Masker({len(self._values)} values, {len(self._forms)} forms, {self._ignored} ignored)"

    def extended(self, values: Iterable[str]) -> Masker:
        """A masker for these values and the ones already known (a run that decrypted one more)."""
        return Masker([*self._values, *values])

    def mask(self, text: str) -> str:
        """`text` with every occurrence of every form of every known value replaced by `MASK`.

        Without a form containing `*` one pass suffices: a form without `*` cannot overlap a mask,
        so any occurrence left would lie in unmasked original text and would have been found. A
        form with `*` may appear where a mask meets text; passes repeat until none is left, and
        each pass replaces at least one character other than `*`, so they end.
        """
        while True:
            masked = self._mask_once(text)
            if masked is text or not self._refixpoint:
                return masked
            text = masked

    @property
    def longest(self) -> int:
        """The length of the longest form: a cut needs at most this much text after it to be judged."""
        return self._longest

    def _spans(self, text: str) -> list[tuple[int, int]]:
        spans = [span for form in self._forms for span in _occurrences(text, form)]
        spans += self._edges(text)
        return sorted(spans)

    def _edges(self, text: str) -> list[tuple[int, int]]:
        """Parts of base64 forms cut by the start or the end of `text` (a wrapped or cut encoding)."""
        if not self._encodings:
            return []
        found: list[tuple[int, int]] = []
        head = _B64_EDGE.match(text)
        tail = _B64_EDGE.search(text[-self._longest:]) if text else None
        whole = head is not None and head.end() == len(text.rstrip("=\r\n"))
        for form in self._encodings:
            core = form.rstrip("=")
            if whole and head is not None and len(head.group(0)) >= MIN_FORM_LENGTH and head.group(0) in core:
                found.append((0, len(text)))  # a whole wrapped line from the middle of a form
                break
            if head is not None:  # the text starts with the end of a form
                run = head.group(0)
                for size in range(min(len(run), len(core) - 1), MIN_FORM_LENGTH - 1, -1):
                    if core.endswith(run[:size]):
                        found.append((0, size))
                        break
            if tail is not None and tail.end() + len(text) - min(len(text), self._longest) == len(text):
                run = tail.group(0)
                for size in range(min(len(run), len(core) - 1), MIN_FORM_LENGTH - 1, -1):
                    if core.startswith(run[-size:]):
                        found.append((len(text) - size, len(text)))
                        break
        return found

    def safe_cut(self, text: str, at: int) -> int:
        """Where to cut `text` near `at` so that no occurrence of a form is split: `at`, or the start
        of an occurrence that covers it (its end, when it starts the text). `text` should reach at
        least `longest` characters past `at`."""
        cut = at
        for start, end in sorted(span for form in self._forms for span in _occurrences(text, form)):
            if start < cut < end:
                cut = start if start > 0 else end
        return cut

    def _mask_once(self, text: str) -> str:
        if not self._forms or not text:
            return text
        spans = self._spans(text)
        if not spans:
            return text
        pieces: list[str] = []
        written = 0
        start, end = spans[0]
        for next_start, next_end in spans[1:]:
            if next_start <= end:  # overlapping or adjacent: one interval, one mask
                end = max(end, next_end)
                continue
            pieces += (text[written:start], MASK)
            written = end
            start, end = next_start, next_end
        pieces += (text[written:start], MASK, text[end:])
        return "".join(pieces)
