"""Fuel's node ranges in subgraphs (`-S start/nodes:end/nodes`), as text: the one parser the CLI and the API share.

Fuel's `fuel2 graph execute -S netconfig/1,2:hiera/3` starts a subgraph at netconfig on nodes 1 and 2 and ends
it at hiera on node 3. In a GraphRun a subgraph names its nodes per side (`startNodes`, `endNodes`); this module
reads the text form. Standard library only: `stead graph` parses its flags without the models.
"""

from __future__ import annotations


def subgraph_range(text: str) -> dict[str, list[str]]:
    """`START[:END]` (each side `TASKS[/NODES]`, `:END` alone: everything up to END) as a Subgraph's fields
    (`start`, `end`, `startNodes`, `endNodes`; a side without nodes has no nodes field). ValueError saying
    what is wrong."""
    start, _, end = text.partition(":")
    out: dict[str, list[str]] = {}
    for side, part in (("start", start), ("end", end)):
        refs, nodes = split_range(part) if part else ([], None)
        out[side] = refs
        if nodes is not None:
            out[f"{side}Nodes"] = nodes
    if not out["start"] and not out["end"]:
        raise ValueError(f"expected START[:END] (task ids, comma-separated, each side optionally /NODES), got {text!r}")
    return out


def split_range(text: str) -> tuple[list[str], list[str] | None]:
    """One side of Fuel's subgraph range, `TASKS[/NODES]` (`netconfig/node-1,node-2`, `/^net/,hiera/node-3`):
    the comma-separated task references and, after the last `/` that does not close a /regex/, the
    comma-separated nodes (None: no node part). A side that ends with `/` is task references only, so a
    /regex/ with nodes is written `/regex//nodes`. ValueError for an empty node list. Fuel named nodes by
    id (`netconfig/1,2`); Stead names them by name."""
    refs_text, nodes = text, None
    if "/" in text and not text.endswith("/"):
        head, _, tail = text.rpartition("/")
        last = head.rsplit(",", 1)[-1]
        if last and ((len(last) >= 2 and last.startswith("/") and last.endswith("/")) or "/" not in last):
            refs_text, nodes = head, [n for n in tail.split(",") if n]
            if not nodes:
                raise ValueError(f"{text!r}: no node after '/'")
    return [r for r in refs_text.split(",") if r], nodes
