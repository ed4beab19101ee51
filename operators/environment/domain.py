"""The Environment domain as the platform sees it: one kind, no routes, nouns or addons of its own (the
graphs domain adds the Environment's merged graphs: `operators.catalog`)."""

from __future__ import annotations

from operators.environment import KIND
from operators.runtime import Domain

DOMAIN = Domain(name="environment", kinds=(KIND,))
