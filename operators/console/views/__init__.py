"""The console's views: each part's routes and stream topics, joined here (the one place a view is added)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from operators.console.stream import events_topic, list_topic, object_topic
from operators.console.views import objects
from operators.console.web import ConsoleRoute, TopicSource
from operators.runtime import Kind


def all_routes(kinds: Sequence[Kind]) -> tuple[ConsoleRoute, ...]:
    return (*objects.routes(kinds),)


def all_topics(kinds: Sequence[Kind]) -> Mapping[str, TopicSource]:
    plurals = frozenset(kind.plural for kind in kinds)
    cluster_scoped = frozenset(kind.plural for kind in kinds if kind.cluster_scoped)
    return {
        "object": object_topic(plurals, cluster_scoped),
        "list": list_topic(plurals - cluster_scoped),
        "events": events_topic,
    }
