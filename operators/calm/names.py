"""The names users type for Calm's kinds, declared once for the kinds and the `stead` command: the kinds'
short names (`kubectl get ar`) are the CLI nouns' aliases (`stead ar logs R`).

Standard library only, and nothing else imported: `stead --help` reads these without importing the kinds
(their models, the compiler and the Kubernetes client cost most of a second)."""

from __future__ import annotations

APP_SHORT_NAMES = ("app",)
ACTIONRUN_SHORT_NAMES = ("ar", "run")
BLUEPRINT_SHORT_NAMES = ("bp",)

ACTIONRUN_ACTIONS = ("logs", "abort")
"""The actions of `stead actionrun`: after `stead run`, one of them makes `run` the ActionRun's short name
(anything else after `stead run` is the operator's older spelling)."""
