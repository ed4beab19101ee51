"""Masking cost per MiB of run output: what a runner spends hiding secrets in what steps print.

A run masks every line of every step's output (`pipelines.masking.Masker`, through the runner's
`StepOutput`) before it is stored or shown. This times that path on 1 MiB of log-like output (lines
of 40 to 120 characters of words, numbers, paths, key=value pairs and a little base64, one line in
50 carrying a secret in some encoding) for 1, 10 and 50 known values (passwords, tokens, one PEM
key), line by line as the runner does (each line continuing the one before, `Masker.mask` with a
`Carry` when the masker has one), and also as one 64 KiB piece at a time (a long line).

It prints the best of `--repeat` runs per size: ms per MiB, lines per second and the number of forms
the values expand to. The masker is pure Python over `str.find`: its cost grows with
forms x text.

    .venv/bin/python bench/masking.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import base64
import inspect
import random
import string
import time

from pipelines.masking import Masker

MIB = 1024 * 1024


def values(count: int, rng: random.Random) -> list[str]:
    """`count` secrets: passwords with punctuation, hex tokens, and one multi-line PEM-like key."""
    alphabet = string.ascii_letters + string.digits + "!#$%&*+-=?@^_"
    found = ["-----BEGIN KEY-----\n" + "\n".join(
        base64.b64encode(rng.randbytes(48)).decode() for _ in range(8)) + "\n-----END KEY-----"]
    while len(found) < count:
        if len(found) % 2:
            found.append("".join(rng.choice(alphabet) for _ in range(rng.randint(12, 32))))
        else:
            found.append(rng.randbytes(20).hex())
    return found[:count]


def output(secrets: list[str], rng: random.Random) -> list[str]:
    """About 1 MiB of log lines; one in 50 prints a secret, as is or base64."""
    words = ["starting", "service", "config", "/etc/app/conf.d", "ok", "user=admin", "retry", "0x1f",
             "GET /api/v1/items 200", "took 12ms", "warning:", "id=42", "eyJhbGciOiJIUzI1NiJ9"]
    lines: list[str] = []
    size = 0
    while size < MIB:
        if len(lines) % 50 == 49:
            secret = rng.choice(secrets).splitlines()[0]
            line = rng.choice([f"password={secret}", base64.b64encode(secret.encode()).decode()])
        else:
            line = " ".join(rng.choice(words) for _ in range(rng.randint(5, 14)))
        lines.append(line)
        size += len(line) + 1
    return lines


def mask_lines(masker: Masker, lines: list[str]) -> None:
    """Mask `lines` one by one as a runner does: each continuing the one before where the masker
    carries state between lines (`Masker.carry`), line by line where an older masker has none."""
    if "carry" in inspect.signature(Masker.mask).parameters:
        carry = masker.carry()  # type: ignore[attr-defined]
        for line in lines:
            masker.mask(line, carry)  # type: ignore[call-arg]
    else:
        for line in lines:
            masker.mask(line)


def best(repeat: int, run: object) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(25)
    print(f"{'values':>6} {'forms':>6} {'lines ms/MiB':>13} {'lines/s':>9} {'64KiB pieces ms/MiB':>20}")
    for count in (1, 10, 50):
        secrets = values(count, rng)
        masker = Masker(secrets)
        lines = output(secrets, rng)
        text = "\n".join(lines)
        pieces = [text[i:i + 65536] for i in range(0, len(text), 65536)]
        size = len(text) / MIB

        def by_line(masker: Masker = masker, lines: list[str] = lines) -> None:
            mask_lines(masker, lines)

        def by_piece(masker: Masker = masker, pieces: list[str] = pieces) -> None:
            for piece in pieces:
                masker.mask(piece)

        line_time = best(args.repeat, by_line)
        piece_time = best(args.repeat, by_piece)
        forms = repr(masker).split(", ")[1].split()[0]
        print(f"{count:>6} {forms:>6} {line_time / size * 1000:>13.0f} {len(lines) / line_time:>9.0f} "
              f"{piece_time / size * 1000:>20.0f}")


if __name__ == "__main__":
    main()
