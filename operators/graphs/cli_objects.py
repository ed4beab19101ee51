"""`stead graph list|delete`, and what the other actions share of the objects: an API path, the owner the
flags name, the Environment (or a refusal naming those there are). Imported when one of them runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from operators.graphs.cli import COMMAND, ENVIRONMENTS, GRAPHS, OWNER_FLAGS
from operators.graphs.objects import find_graph, graph_items, owner_of, type_of
from operators.graphs.views import format_graphs
from operators.runtime import ApiError, CommandError, Requester, custom_path, dump

__all__ = ["COMMAND", "delete", "environment", "flag_owner", "list_graphs", "object_path"]


def object_path(plural: str, namespace: str, name: str | None = None) -> str:
    return custom_path(plural, namespace, name)


def flag_owner(args: argparse.Namespace) -> tuple[str, str]:
    return next((kind, getattr(args, flag)) for flag, kind in OWNER_FLAGS.items() if getattr(args, flag, None))


async def environment(kube: Requester, namespace: str, name: str) -> dict[str, Any]:
    """The Environment object, or a CommandError naming the environments there."""
    try:
        return await kube.request("GET", object_path(ENVIRONMENTS, namespace, name))
    except ApiError as error:
        if error.status != 404:
            raise
    listed = await kube.request("GET", object_path(ENVIRONMENTS, namespace))
    names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])
    raise CommandError(f"no environment {name!r} in namespace {namespace} (environments here: "
                       f"{', '.join(names) or 'none'})")


async def list_graphs(kube: Requester, args: argparse.Namespace) -> int:
    items = await graph_items(kube, args.namespace)
    if args.env:
        env = await environment(kube, args.namespace, args.env)
        spec = env.get("spec") or {}
        owners = {("environment", args.env), ("release", str(spec.get("release"))),
                  *(("plugin", str(p)) for p in spec.get("plugins") or [])}
        items = [i for i in items if owner_of(i) in owners]
    if args.output:
        print(dump(items, args.output))
    elif items:
        print(format_graphs(items))
    else:
        where = f" for environment {args.env}" if args.env else ""
        print(f"no deployment graphs{where} in namespace {args.namespace}", file=sys.stderr)
    return 0


async def delete(kube: Requester, args: argparse.Namespace) -> int:
    kind, owner = flag_owner(args)
    items = await graph_items(kube, args.namespace)
    found = find_graph(items, kind, owner, args.type)
    if found is None:
        types = sorted(type_of(i) for i in items if owner_of(i) == (kind, owner))
        raise CommandError(f"{kind} {owner} has no {args.type!r} graph in namespace {args.namespace} (its graph "
                           f"types: {', '.join(types) or 'none'})")
    name = found["metadata"]["name"]
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": found["metadata"]["uid"]}}
    await kube.request("DELETE", object_path(GRAPHS, args.namespace, name), options)
    print(f"deploymentgraph/{name} deleted (the {args.type!r} graph of {kind} {owner})")
    return 0
