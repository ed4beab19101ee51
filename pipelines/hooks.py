"""What the caller plugs into a run: macro rendering, secrets, masking.

`pipelines` is generic, so the macro language (Calm's ``@@{...}@@`` with its built-ins) and the
vault live with the caller. A run takes three hooks, all defaulting to identity:

- ``render(text, variables) -> str`` renders one string with the variables visible to a step,
  when that step starts (not before: values set by earlier steps must be seen);
- ``secret(ref) -> str`` turns a secret reference into its value; it is called only while a step
  that uses the secret is starting, never at load time;
- ``mask(text) -> str`` hides secrets in everything that is stored or shown.

On top of the caller's `mask`, the engine masks every value that `secret` returned in this process
(`Masker`), so a secret the caller's hook does not know about still never reaches a record.

A runner process cannot receive Python callables from the operator, and it must not hold the
operator's vault key either. `SealedSecrets` closes that gap: the operator seals the values one run
needs with a fresh per-run key (AES-256-GCM) into the workflow file and hands the key to the runner
on its standard input; the runner decrypts a value only when a step needs it.
"""

from __future__ import annotations

import base64
import importlib
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipelines import masking

RenderHook = Callable[[str, Mapping[str, str]], str]
MaskHook = Callable[[str], str]
SecretHook = Callable[[str], str]

MASK = masking.MASK
SEALED_PREFIX = "sealed:"


def no_render(text: str, variables: Mapping[str, str]) -> str:
    return text


def no_mask(text: str) -> str:
    return text


def no_secret(ref: str) -> str:
    raise LookupError(f"no secret hook configured: cannot resolve secret reference {ref[:16]!r}")


@dataclass(frozen=True)
class Hooks:
    render: RenderHook = no_render
    mask: MaskHook = no_mask
    secret: SecretHook = no_secret


class Masker:
    """Masks the secrets revealed in this process (`pipelines.masking`: every encoding a script
    can print), then applies the caller's mask. Values are added as steps reveal them."""

    def __init__(self, extra: MaskHook = no_mask) -> None:
        self._extra = extra
        self._lock = threading.Lock()
        self._values: dict[str, None] = {}
        self._masker = masking.Masker()

    def add(self, value: str) -> None:
        """Mask `value` from now on. A value is listed only once the masker that hides it is in
        place: a step that finds it listed (another step revealed it concurrently) never masks
        with the masker from before."""
        if value in self._values:
            return
        with self._lock:
            if value in self._values:
                return
            values = {**self._values, value: None}
            self._masker = masking.Masker(values)
            self._values = values

    def __call__(self, text: str, carry: masking.Carry | None = None) -> str:
        """`text` masked; with its stream's `carry` (a line of output), also what continues a value
        begun in the lines before (`masking.Masker.mask`)."""
        return self._extra(self._masker.mask(text, carry) if text else text)

    def safe_cut(self, text: str, at: int) -> int:
        """Where to cut a long line near `at` without splitting a secret (`masking.Masker.safe_cut`)."""
        return self._masker.safe_cut(text, at)

    @property
    def longest(self) -> int:
        return self._masker.longest


def new_run_key() -> bytes:
    """A fresh AES-256 key for one run's sealed secrets."""
    return AESGCM.generate_key(bit_length=256)


def seal(value: str, key: bytes, name: str = "") -> str:
    """Encrypt `value` for one run; `name` is bound as associated data so refs cannot be swapped."""
    nonce = os.urandom(12)
    blob = nonce + AESGCM(key).encrypt(nonce, value.encode(), name.encode())
    return SEALED_PREFIX + (name + ":" if name else ":") + base64.urlsafe_b64encode(blob).decode()


@dataclass
class SealedSecrets:
    """The `secret` hook of a runner process: opens refs made by `seal` with the run's key."""

    key: bytes
    fallback: SecretHook = no_secret
    _cache: dict[str, str] = field(default_factory=dict)

    def __call__(self, ref: str) -> str:
        if not ref.startswith(SEALED_PREFIX):
            return self.fallback(ref)
        cached = self._cache.get(ref)
        if cached is not None:
            return cached
        name, _, blob = ref[len(SEALED_PREFIX):].rpartition(":")
        raw = base64.urlsafe_b64decode(blob.encode())
        value = AESGCM(self.key).decrypt(raw[:12], raw[12:], name.encode()).decode()
        self._cache[ref] = value
        return value


_MACRO = re.compile(r"@@\{\s*([^{}]+?)\s*\}@@")


class MacroError(ValueError):
    pass


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """A minimal renderer: ``@@{name}@@`` becomes the variable's value; unknown names are errors.

    Enough to run workflows without the operators (tests, the CLI on its own); the operators pass
    their full macro engine instead.
    """
    if "@@{" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        try:
            return variables[name]
        except KeyError:
            raise MacroError(f"unresolved macro @@{{{name}}}@@") from None

    return _MACRO.sub(one, text)


SUBSTITUTE = Hooks(render=substitute)
"""Hooks for standalone use: `substitute` macros, no extra masking, no secrets beyond sealed ones."""


def load_hooks(spec: str) -> Hooks:
    """Import ``module:attribute``: a `Hooks`, or a callable that returns one (a factory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"hooks must be given as module:attribute, not {spec!r}")
    obj = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, Hooks):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Hooks):
            return made
    raise TypeError(f"{spec} is neither a pipelines.hooks.Hooks nor a factory of one")
