r"""Masking of known secret values in any text before it is stored or shown.

Runs capture the output of scripts that received decrypted credentials; that output ends up in
an ActionRun's status, in Events and in logs, where a secret must never appear. A `Masker` is
built from the values a run could have seen and replaces every occurrence with `MASK`. It holds no
state after construction, so any layer can apply it; what one line of a stream tells about the
next is kept by the caller in a `Carry`.

Masking is a guard against accidents (a script that echoes its environment, a tool that dumps a
config, `bash -x`), not against a script: a script that wants to print a secret can always
print it in a form no masker knows (reversed, one character per line, encrypted).

What is masked, per known value (the *forms* of a value):

- the value itself, its whitespace-stripped form (a trailing newline in a stored password is
  common, output rarely keeps it) and, for a multi-line value such as a PEM key, each of its
  stripped lines, because programs re-wrap, indent or print such values line by line;
- its escaped forms: JSON (as Python and Go write it: `\/`, `\u0026`, `\u003c`, `\u003e`; and
  with every character `\u`-escaped), URL-encoded (`quote`, `quote_plus`, either case),
  hexadecimal (either case), HTML/XML entities (`&amp;`, `&#39;`, `&apos;`, and every character
  as `&#NN;` or `&#xHH;`), shell quoting (inside `'...'` with `'\''` or `'"'"'` for a quote, as
  `bash -x` and `shlex.quote` write it; `printf %q`'s backslashes or `$'...'`; inside `"..."`) and
  Python's `repr` and `ascii`;
- when the value is itself base64 (a key, a token), the text it decodes to (what
  `calm_b64decode` or `base64 -d` prints);
- its base64 (standard and URL-safe alphabets) and base32 (standard and `base32hex`) forms at
  every byte alignment: base64 of a value embedded in a longer payload (`Authorization: Basic
  base64("user:" + password)`, a Kubernetes Secret manifest) does not contain `b64(value)`, but it
  does contain the characters that depend only on the value's bytes; those are masked;
- compressed and then base64-encoded (`gzip | base64`, zlib): a base64 run that starts like a
  gzip or zlib stream (`H4sI`, `eJ`...) is decoded and inflated (at most `INFLATE_LIMIT` bytes)
  and masked whole when what it inflates to holds a form of a value; a run wrapped over several
  lines is inflated on, line by line, through the `Carry`.

Lines and cuts. Output is masked a line (or a 64 KiB piece of a long line) at a time, so a form
can straddle a line break: `base64` wraps at 76 columns, a tool folds a long token, a script
prints a value in two halves. Three rules cover it. A piece that ends with the start of a form,
or starts with its end, has that part masked (at least half the form, or `MIN_FORM_LENGTH`
characters, whichever is less, and never fewer than `MIN_LENGTH`: a fragment of base64 needs
`MIN_FORM_LENGTH`). A piece that continues the previous piece of its stream (the `Carry` keeps the
end of the stream so far) has the rest of any form completed across the break masked, however
short that rest is. A whole piece that lies inside a base64 or base32 form (a wrapped line from
the middle of an encoded key) is masked. Whoever cuts long lines asks `safe_cut` where to cut,
with `longest` characters of look-ahead, which moves the cut out of any occurrence of any form.
What stays in clear: fewer than the edge threshold of characters of a value at the end of the
line before a break; the middle pieces of a value cut into three or more lines (unless they are
base64 or base32); any form not listed above.

Thresholds. A value shorter than `MIN_LENGTH` (4) characters is not masked: replacing every "a",
"on" or "123" in a run's output would make it unreadable, and the positions of the stars would
then point at the value anyway. Such a value is too short to be a secret worth the name (a
Blueprint validator should warn about it); the escaped and URL-encoded forms follow the same
rule. Fragments (base64 and base32 characters, single lines of a multi-line value) must be at least
`MIN_FORM_LENGTH` (8) characters: a 4-character base64 fragment occurs by chance in ordinary
text, and masking it would garble output without protecting anything (fewer than 6 bytes of the
value are behind it). A value made only of `*` cannot be masked (the mask itself
contains it) and is ignored as well.

How. Every form, and every start and end of a form that the edge rules look for, goes into an
Aho-Corasick automaton (`pyahocorasick`, in C), so a piece is scanned once whatever the number of
values and forms: a loop of `str.find` per form cost 1.1 s per MiB of line-by-line output with
one secret and 12.7 s with fifty (`bench/masking.py`). Starts and ends longer than `EDGE_LIMIT`
are found from their first `EDGE_LIMIT` characters and checked in Python.

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
import html
import json
import math
import re
import string
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus

import ahocorasick

MASK = "********"
MIN_LENGTH = 4
MIN_FORM_LENGTH = 8
EDGE_LIMIT = 128
"""Starts and ends of forms are looked for up to this length, longer ones checked from there."""
INFLATE_LIMIT = 1 << 20
"""Bytes a compressed run in the output (or a stream of them over lines) is inflated to, at most."""

_FORM, _PREFIX, _SUFFIX = 1, 2, 4


def _cores(data: bytes, encode: Callable[[bytes], bytes], bits: int) -> set[str]:
    """The characters of an encoding (`bits` per character) that depend only on `data`, for each
    byte alignment: at alignment `shift` the value starts `shift` bytes into a group, so the first
    characters also carry bits of the preceding bytes and the last one bits of the following
    byte; both are cut off. The standalone, padded encoding is a form of its own."""
    group = 3 if bits == 6 else 5
    cores = {encode(data).decode("ascii")}
    for shift in range(group):
        encoded = encode(bytes(shift) + data).decode("ascii").rstrip("=")
        cores.add(encoded[math.ceil(8 * shift / bits):8 * (shift + len(data)) // bits])
    return cores


def _encodings(data: bytes) -> set[str]:
    """base64 (standard, URL-safe) and base32 (standard, hex) forms at every alignment."""
    return (_cores(data, base64.b64encode, 6) | _cores(data, base64.urlsafe_b64encode, 6)
            | _cores(data, base64.b32encode, 5) | _cores(data, base64.b32hexencode, 5))


_HTML_SAFE = {"&": "\\u0026", "<": "\\u003c", ">": "\\u003e"}
_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _json_forms(value: str) -> set[str]:
    forms = set()
    for ascii_only in (True, False):
        plain = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        escaped = "".join(_HTML_SAFE.get(c, c) for c in plain)
        forms |= {plain, escaped, plain.replace("/", "\\/"), escaped.replace("/", "\\/")}
    units = value.encode("utf-16-be", "surrogatepass")
    every = "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    return forms | {every, every.upper().replace("\\U", "\\u")}


def _markup_forms(value: str) -> set[str]:
    """HTML and XML escapes: the special characters only (`html.escape`, XML's `&apos;`), or every
    character as a decimal or hexadecimal character reference."""
    xml = (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
           .replace('"', "&quot;").replace("'", "&apos;"))
    return {html.escape(value), html.escape(value, quote=False), xml,
            "".join(f"&#{ord(c)};" for c in value), "".join(f"&#x{ord(c):x};" for c in value),
            "".join(f"&#x{ord(c):X};" for c in value)}


_SHELL_SAFE = frozenset(string.ascii_letters + string.digits + "-_./:=@%+")
_ANSI_C = {"\a": "\\a", "\b": "\\b", "\x1b": "\\E", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "'": "\\'", "\\": "\\\\"}


def _printf_q(value: str) -> str:
    """What bash's ``printf %q`` prints: ``$'...'`` when a character is not printable, else a
    backslash before every character the shell would interpret."""
    if not value.isprintable():
        return "$'" + "".join(_ANSI_C.get(c) or (c if c.isprintable() else f"\\{ord(c):03o}") for c in value) + "'"
    return "".join(c if c in _SHELL_SAFE or (c in "~#" and i) or ord(c) > 127 else "\\" + c
                   for i, c in enumerate(value))


def _shell_forms(value: str) -> set[str]:
    r"""A value as shells and tools quote it: inside '...' (`bash -x`, `set -x` traces write a quote
    as '\'', `shlex.quote` as '"'"'), `printf %q`, inside "..." (backslashes before \ " $ `)."""
    return {value.replace("'", "'\\''"), value.replace("'", "'\"'\"'"), _printf_q(value),
            re.sub(r'([\\"$`])', r"\\\1", value)}


def _repr_forms(value: str) -> set[str]:
    """Python's `repr` and `ascii` of a string, without the quotes, and its `unicode_escape`."""
    return {repr(value)[1:-1], ascii(value)[1:-1], value.encode("unicode_escape").decode("ascii")}


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


def _edge(length: int) -> int:
    """How much of the start or end of a whole form of `length` characters a piece must hold at a
    line break to be masked: half of it, at most `MIN_FORM_LENGTH`, at least `MIN_LENGTH`."""
    return max(MIN_LENGTH, min(MIN_FORM_LENGTH, math.ceil(length / 2)))


def _forms(value: str) -> dict[str, int]:
    """Every string whose presence in a text would disclose `value` (see the module docstring),
    with how much of its start or end a piece must hold at a line break to be masked."""
    whole = ({value, value.strip()} | _json_forms(value) | _markup_forms(value) | _shell_forms(value)
             | _repr_forms(value))
    for encoded in (quote(value, safe=""), quote_plus(value, safe="")):
        whole |= {encoded, _ESCAPE.sub(lambda m: m.group(0).lower(), encoded)}
    fragments: set[str] = set()
    if "\n" in value or "\r" in value:
        fragments.update(line.strip() for line in value.splitlines())
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: no byte form, the others stay
        raw = value.encode("utf-8")
        whole |= {raw.hex(), raw.hex().upper()}
        fragments.update(_encodings(raw))
    decoded = _decoded(value)
    if decoded is not None and decoded.strip() != value.strip():
        whole |= {decoded, decoded.strip()}
    forms = {f: MIN_FORM_LENGTH for f in fragments if len(f) >= MIN_FORM_LENGTH}
    forms.update({f: min(_edge(len(f)), forms.get(f, MIN_FORM_LENGTH)) for f in whole if len(f) >= MIN_LENGTH})
    return {f: edge for f, edge in forms.items() if f.strip("*")}


_ENCODED_RUN = re.compile(r"[A-Za-z0-9+/_=-]+")
_COMPRESSED = re.compile(r"(?:H4sI|eJ[w-z]|eN[o-r]|eF[4-7]|eA[E-H])[A-Za-z0-9+/]{4,}={0,2}")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/]+={0,2}")


@dataclass
class Carry:
    """What masking one piece of a stream (a line, or a piece of a long line) keeps for the next:
    the end of the stream so far, and an inflater when the piece ended inside a compressed run.
    One per output stream; `Masker.mask` updates it."""

    tail: str = ""
    """The last `_SHORT` characters of the stream's pieces, joined without their breaks."""
    open: tuple[tuple[str, int], ...] = ()
    """Forms the last piece ended inside, each with how much of it was there (masked)."""
    inflater: Any = None
    """A `zlib.decompressobj` of a compressed base64 run that reached the end of the last piece."""
    pending: str = ""
    """base64 characters of that run not decoded yet (not a multiple of 4)."""
    inflated: str = ""
    """The end of what the inflater produced so far."""
    budget: int = INFLATE_LIMIT


_SHORT = 2 * MIN_FORM_LENGTH
"""A form split with fewer than its edge on either side is shorter than this: the continuation
of the stream looks this far back."""
Hit = tuple[int, int, int, tuple[str, ...]]  # start, end, flags, the forms a long start or end belongs to


def _automaton(keys: dict[str, int], owners: dict[str, tuple[str, ...]]) -> Any:
    """An automaton of `keys` (flags: a form, the start or the end of one), each with its length and
    the forms it is the start (or the reversed end, cut at `EDGE_LIMIT`) of."""
    found = ahocorasick.Automaton(ahocorasick.STORE_ANY)
    for key, flags in keys.items():
        found.add_word(key, (len(key), flags, owners.get(key, ())))
    if keys:
        found.make_automaton()
    return found


class Masker:
    """Replaces every known secret value (and its encoded forms) in a text with `MASK`.

    Built once per run (or per project) from the decrypted values; `mask` can then be applied to
    every line or chunk of output. `repr` never shows a value.
    """

    __slots__ = ("_encodings", "_forms", "_forward", "_ignored", "_longest", "_refixpoint", "_reverse", "_values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        accepted: list[str] = []
        forms: dict[str, int] = {}
        ignored = 0
        for value in dict.fromkeys(values):  # ordered de-duplication
            found = _forms(value) if len(value) >= MIN_LENGTH and value.strip("*") else {}
            if not found:
                ignored += 1
                continue
            accepted.append(value)
            for form, edge in found.items():
                forms[form] = min(edge, forms.get(form, edge))
        self._values = tuple(accepted)
        self._forms = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        self._ignored = ignored
        self._longest = max((len(f) for f in self._forms), default=0)
        forward: dict[str, int] = {}
        reverse: dict[str, int] = {}
        starts: dict[str, tuple[str, ...]] = {}  # a start of forms -> those forms
        ends: dict[str, tuple[str, ...]] = {}  # the reversed end of forms, cut at EDGE_LIMIT -> those forms
        for form, edge in forms.items():
            forward[form] = forward.get(form, 0) | _FORM
            backwards = form[::-1]
            mine = (form,)
            for size in range(edge, min(len(form), EDGE_LIMIT + 1)):
                start = form[:size]
                forward[start] = forward.get(start, 0) | _PREFIX
                starts[start] = starts[start] + mine if start in starts else mine
                reverse[backwards[:size]] = _SUFFIX
            if len(form) > EDGE_LIMIT:
                end = backwards[:EDGE_LIMIT]
                ends[end] = ends[end] + mine if end in ends else mine
        self._forward = _automaton(forward, starts)
        self._reverse = _automaton(reverse, ends)
        # The base64 and base32 forms, whose wrapped lines are masked whole (see the docstring).
        self._encodings = "\n".join(f for f in self._forms
                                    if len(f) >= MIN_FORM_LENGTH and _ENCODED_RUN.fullmatch(f))
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

    @staticmethod
    def carry() -> Carry:
        """A fresh `Carry`, for the first piece of a stream."""
        return Carry()

    def mask(self, text: str, carry: Carry | None = None) -> str:
        """`text` with every occurrence of every form of every known value replaced by `MASK`;
        given the `carry` of its stream, also what continues a form begun in the pieces before.

        Without a form containing `*` one pass suffices: a form without `*` cannot overlap a mask,
        so any occurrence left would lie in unmasked original text and would have been found. A
        form with `*` may appear where a mask meets text; passes repeat until none is left, and
        each pass replaces at least one character other than `*`, so they end.
        """
        masked = self._mask_once(text, carry)
        while masked is not text and self._refixpoint:
            text, masked = masked, self._mask_once(masked, None)
        return masked

    @property
    def longest(self) -> int:
        """The length of the longest form: a cut needs at most this much text after it to be judged."""
        return self._longest

    def _hits(self, automaton: Any, text: str) -> Iterator[Hit]:
        for end, (length, flags, owners) in automaton.iter(text):
            yield end + 1 - length, end + 1, flags, owners

    def _spans(self, text: str, carry: Carry | None) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        if not self._forms:
            return spans
        body = text.strip()
        lead = len(text) - len(text.lstrip())
        stop = lead + len(body)
        opened: list[tuple[str, int]] = []
        if carry is not None and body:
            for form, done in carry.open:  # forms the last piece ended inside
                rest = form[done:]
                if body.startswith(rest):
                    spans.append((lead, lead + len(rest)))
                elif rest.startswith(body):
                    spans.append((lead, stop))
                    opened.append((form, done + len(body)))
            if carry.tail:  # a short form split with less than its edge on both sides
                joined = carry.tail + body[:_SHORT]
                for start, end, flags, _ in self._hits(self._forward, joined):
                    if flags & _FORM and start < len(carry.tail) < end:
                        spans.append((lead, lead + end - len(carry.tail)))
        for start, end, flags, owners in self._hits(self._forward, text):
            if flags & _FORM:
                spans.append((start, end))
            if flags & _PREFIX and (end == stop or end - start == EDGE_LIMIT):
                size = stop - start  # longer than EDGE_LIMIT: the rest of the piece must go on with the form
                ending = [f for f in owners if len(f) > size and (end == stop or text.startswith(f[:size], start))]
                if ending:
                    spans.append((start, stop))  # the piece ends with the start of a form
                    opened += ((f, size) for f in ending)
        head = body[:self._longest]
        for start, end, _, owners in self._hits(self._reverse, head[::-1]):
            size = len(head) - start
            if end == len(head) or any(len(f) > size and f.endswith(head[:size]) for f in owners):
                spans.append((lead, lead + size))  # the piece starts with the end of a form
        if len(body) >= MIN_FORM_LENGTH and self._encodings and _ENCODED_RUN.fullmatch(body) \
                and body.rstrip("=") in self._encodings:
            spans.append((lead, stop))  # a whole wrapped line from the middle of an encoding
        spans += self._compressed(text, body, lead, carry)
        if carry is not None and body:
            carry.tail = (carry.tail + body)[-_SHORT:]
            carry.open = tuple(dict.fromkeys(opened))
        return sorted(spans)

    def _reveals(self, text: str, since: int) -> bool:
        """Whether inflated `text` holds a form ending after `since`, or ends with the start of one."""
        return any((flags & _FORM and end > since) or (flags & _PREFIX and end == len(text))
                   for _, end, flags, _ in self._hits(self._forward, text))

    def _inflate(self, carry: Carry, run: str) -> bool:
        """Feed base64 `run` to the carry's inflater; whether what comes out reveals a value."""
        run = carry.pending + run.rstrip("=")
        usable = len(run) - len(run) % 4
        carry.pending = run[usable:]
        try:
            data = base64.b64decode(run[:usable], validate=True)
            out = carry.inflater.decompress(data, max(carry.budget, 1))
        except (binascii.Error, ValueError, zlib.error):
            carry.inflater = None
            return False
        carry.budget -= len(out)
        if carry.budget <= 0 or carry.inflater.eof:
            carry.inflater = None
        text = carry.inflated + out.decode("utf-8", "replace")
        carry.inflated = text[-max(self._longest - 1, 1):]
        return self._reveals(text, len(text) - len(out.decode("utf-8", "replace")))

    def _compressed(self, text: str, body: str, lead: int, carry: Carry | None) -> list[tuple[int, int]]:
        """Compressed base64 runs (gzip, zlib) that inflate to a form of a value; a run wrapped over
        lines is followed through the carry."""
        spans: list[tuple[int, int]] = []
        if carry is not None and carry.inflater is not None:
            if body and _BASE64_LINE.fullmatch(body) and not _COMPRESSED.match(body):
                if self._inflate(carry, body):
                    spans.append((lead, lead + len(body)))
                return spans
            carry.inflater = None
        for match in _COMPRESSED.finditer(text):
            state = carry if carry is not None and match.end() == lead + len(body) else Carry()
            state.inflater, state.pending, state.inflated = zlib.decompressobj(wbits=47), "", ""
            if self._inflate(state, match.group(0)):
                spans.append(match.span())
        return spans

    def safe_cut(self, text: str, at: int) -> int:
        """Where to cut `text` near `at` so that no occurrence of a form is split: `at`, or the start
        of an occurrence that covers it (its end, when it starts the text). `text` should reach at
        least `longest` characters past `at`."""
        cut = at
        for start, end in sorted((s, e) for s, e, flags, _ in self._hits(self._forward, text) if flags & _FORM):
            if start < cut < end:
                cut = start if start > 0 else end
        return cut

    def _mask_once(self, text: str, carry: Carry | None) -> str:
        if not self._forms or not text:
            return text
        # A span of stars only hides nothing (the start of a form such as "*****a" at the end of a
        # mask): dropping it keeps every pass replacing a character other than `*`, so passes end.
        spans = [(start, end) for start, end in self._spans(text, carry) if text[start:end].strip("*")]
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
