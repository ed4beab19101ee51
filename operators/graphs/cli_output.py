"""`stead graph logs|history`: from the operator's API (as `stead config`: --server, --token), not the
Kubernetes API. Imported when one of them runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import quote

from operators.graphs.cli import COMMAND
from operators.graphs.history import HistoryEntry, to_csv
from operators.graphs.views import format_history
from operators.runtime import RequestFailed, UsageError, call, dump


def logs(args: argparse.Namespace) -> int:
    """Print the whole output of the run's instances that match --node/--task/--type, page by page from the
    operator's API (`GET /api/v1/graphruns/<run>/output/...`): one instance's output as it is; several, each
    after a `==> task@node (type) <==` line, as `tail` heads its files. Instances that printed nothing are left
    out. The output is masked as the runner stored it."""
    base = f"{str(args.server).rstrip('/')}/api/v1/graphruns/{quote(args.run, safe='')}/output"
    filters = {k: v for k, v in (("node", args.node), ("task", args.task), ("type", args.type)) if v}
    try:
        listed = call(args, "GET", base + "/", filters)
        chosen = [i for i in listed.get("instances") or [] if i.get("bytes")]
        if not listed.get("instances"):
            what = " ".join(f"{k} {v}" for k, v in filters.items())
            raise RequestFailed(404, f"graph run {args.run} has no task instances{' for ' + what if what else ''}")
        headed = len(chosen) > 1 or not args.task
        for n, instance in enumerate(chosen):
            if headed:
                where = f"@{instance['node']}" if instance.get("node") else ""
                print(("\n" if n else "") + f"==> {instance['task']}{where} ({instance['type']}) <==", flush=True)
            query = {"type": str(instance["type"])}
            if instance.get("node"):
                query["node"] = str(instance["node"])
            offset: int | None = 0
            while offset is not None:
                page = call(args, "GET", f"{base}/{quote(str(instance['task']), safe='')}/",
                            {**query, "offset": str(offset)})
                sys.stdout.write(page["output"])
                offset = page.get("next_offset")
            sys.stdout.flush()
        if not chosen:
            print(f"{COMMAND}: no output stored for {len(listed['instances'])} task instances of run {args.run}",
                  file=sys.stderr)
    except (RequestFailed, UsageError) as error:
        print(f"{COMMAND}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    return 0


def history(args: argparse.Namespace) -> int:
    """Print the environment's history from the operator's API (`GET /api/v1/clusters/<env>/history/`): a
    table, JSON or CSV, newest first; a page (`--limit`) at a time unless `--all`, the next page's
    `--continue` token on stderr."""
    url = f"{str(args.server).rstrip('/')}/api/v1/clusters/{quote(args.env, safe='')}/history/"
    query = {k: str(v) for k, v in (("node", args.node), ("task", args.task), ("type", args.type),
                                    ("state", args.state), ("run", args.run), ("limit", args.limit)) if v}
    token = args.continue_token
    entries: list[dict[str, Any]] = []
    try:
        while True:
            page = call(args, "GET", url, {**query, **({"continue": token} if token else {})})
            entries.extend(page.get("entries") or [])
            token = page.get("continue")
            if not token or not args.all:
                break
    except (RequestFailed, UsageError) as error:
        print(f"{COMMAND}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    if args.output == "csv":
        sys.stdout.write(to_csv(HistoryEntry.from_json(e) for e in entries))
    elif args.output in ("json", "yaml"):
        print(dump({"entries": entries, "continue": token}, args.output))
    else:
        print(format_history(entries) if entries else f"no history for environment {args.env}"
              + (" with these filters" if query.keys() - {"limit"} else ""))
    if token:
        print(f"{COMMAND}: more entries: add --continue {token} (or --all)", file=sys.stderr)
    return 0
