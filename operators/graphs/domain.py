"""Deployment graphs as the platform sees them: their kinds, the graphs API, `stead graph`, the auto-runner.

Graphs also extend a kind of another domain, the Environment (`with_merged_graphs`): that edge is
declared where domains meet, in `operators.catalog`."""

from __future__ import annotations

from collections.abc import Sequence

from operators.graphs.api import GraphsApi
from operators.graphs.autorunner import AutoRunner
from operators.graphs.cli import add_graph_actions
from operators.graphs.kinds import KINDS
from operators.runtime import Addon, AddonContext, Domain


def addons(context: AddonContext) -> Sequence[Addon]:
    """The auto-runner: environments that opt in get a GraphRun when their nodes or values change."""
    return [AutoRunner()]


DOMAIN = Domain(name="graphs", kinds=KINDS, api=GraphsApi, cli={"graph": add_graph_actions}, addons=addons)
