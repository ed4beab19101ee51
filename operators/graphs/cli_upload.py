"""`stead graph upload|download`: Fuel task files to and from the graphs (the models check them as the admission
webhook would, before anything is written). Imported when one of them runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from operators.graphs.api import levels_of, save_graph
from operators.graphs.cli import LEVELS
from operators.graphs.cli_objects import environment, flag_owner
from operators.graphs.fuel import FuelFormatError, dump_tasks, load_dir, load_file
from operators.graphs.models import check_tasks
from operators.runtime import CommandError, Requester


def load_tasks(args: argparse.Namespace) -> list[Any]:
    try:
        if args.file is not None:
            if not args.file.is_file():
                raise CommandError(f"--file {args.file}: no such file")
            tasks = load_file(args.file)
        else:
            if not args.dir.is_dir():
                raise CommandError(f"--dir {args.dir}: no such directory")
            tasks = load_dir(args.dir)
    except FuelFormatError as error:
        raise CommandError(str(error)) from None
    # the checks the admission webhook makes (duplicate ids, regexes, conditions), said before anything is written
    problems = check_tasks(tasks, str(args.file or args.dir))
    if problems:
        raise CommandError("; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
    return tasks


async def upload(kube: Requester, args: argparse.Namespace) -> int:
    kind, owner = flag_owner(args)
    tasks = load_tasks(args)
    if kind == "environment":
        await environment(kube, args.namespace, owner)
    obj, created = await save_graph(kube, args.namespace, kind, owner, args.type, tasks, args.name)
    print(f"deploymentgraph/{obj['metadata']['name']} {'created' if created else 'updated'}: the {args.type!r} "
          f"graph of {kind} {owner}, {len(tasks)} tasks")
    return 0


async def download(kube: Requester, args: argparse.Namespace) -> int:
    env = await environment(kube, args.namespace, args.env)
    level = next((LEVELS[name] for name in ("release", "plugins", "env_only") if getattr(args, name)), "all")
    try:
        merged = (await levels_of(kube, args.namespace, args.env, args.type, env)).merged(level)
    except ValueError as error:  # MergeError, an invalid graph
        raise CommandError(str(error)) from None
    text = dump_tasks(merged.tasks) if merged.tasks else "[]\n"
    what = "merged" if level == "all" else f"{level} level of the"
    if args.file is None:
        sys.stdout.write(text)
    else:
        args.file.write_text(text)
        print(f"wrote the {what} {args.type!r} graph of environment {args.env} ({len(merged.tasks)} tasks) to "
              f"{args.file}", file=sys.stderr)
    return 0
