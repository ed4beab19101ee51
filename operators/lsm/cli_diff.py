"""`stead service diff|diagnose`: what a waiting candidate set would change (`status.diff`), and the chain of an
instance's failures across its versions and its App's runs; imported when one of them runs
(`operators.lsm.cli` is the parser)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from operators.lsm.cli import Kube, as_text, table
from operators.lsm.cli_actions import find_instance
from operators.lsm.diagnose import diagnose as assemble_report
from operators.lsm.diagnose import format_report
from operators.runtime import ApiError, custom_path, dump

APPS, ACTIONRUNS = "apps", "actionruns"
APP_UID_LABEL = "stead.dev/app-uid"
"""As `operators.calm.app` names them (a test checks that they agree): the CLI does not import the calm kinds."""


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def format_diff(obj: Mapping[str, Any]) -> str:
    """`status.diff` as `stead service diff` prints it: what waits, how to approve it, what would run, what
    changes (attributes, App inputs)."""
    name = obj["metadata"]["name"]
    namespace = obj["metadata"].get("namespace") or "default"
    diff = (obj.get("status") or {}).get("diff")
    if not diff:
        return f"serviceinstance/{name}: no candidate set waits (nothing would change)"
    status = diff.get("status")
    heading = {"pending": f"would change (candidate set waiting in state {diff.get('state')}, version "
                          f"{diff.get('version')})",
               "applied": f"applied at version {diff.get('appliedVersion')} (computed at version "
                          f"{diff.get('version')})",
               "discarded": f"discarded: the candidate set of version {diff.get('version')} was not promoted"}
    lines = [f"serviceinstance/{name}: {heading.get(str(status), status)}"]
    requests = list(diff.get("requests") or [])
    if status == "pending" and requests:
        lines.append("approve:     " + "; then ".join(f"stead service set-state {name} {r} -n {namespace}"
                                                      for r in requests))
    for transfer in diff.get("transfers") or []:
        lines.append(f"transfer:    {transfer}")
    action = diff.get("action") or "none"
    run = f" (ActionRun {diff['actionRun']})" if diff.get("actionRun") else ""
    lines.append(f"app action:  {action}{run}" + (f" on App {diff['app']}" if diff.get("app") else ""))
    lines.append(f"summary:     {diff.get('message')}")
    attributes = [(str(c.get("name")), _value(c.get("old")), _value(c.get("new")))
                  for c in diff.get("attributes") or []]
    if attributes:
        lines.extend(["", table(("ATTRIBUTE", "ACTIVE NOW", "AFTER"), attributes)])
    inputs = [(str(c.get("variable")) + (" (secret)" if c.get("secret") else ""), _value(c.get("old")),
               _value(c.get("new"))) for c in diff.get("inputs") or []]
    if inputs:
        lines.extend(["", table(("APP INPUT", "LIVE APP", "WOULD GET"), inputs)])
    return "\n".join(lines)


async def diff(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    if args.output:
        print(dump((obj.get("status") or {}).get("diff") or {}, args.output))
    else:
        print(format_diff(obj))
    return 0


async def _find(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return await kube.request("GET", path)
    except ApiError as error:
        if error.status == 404:
            return None
        raise


async def diagnose(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    name = as_text((obj.get("status") or {}).get("app")) or obj["metadata"]["name"]
    app = await _find(kube, custom_path(APPS, args.namespace, name))
    listed = await _find(kube, custom_path(ACTIONRUNS, args.namespace)) or {}
    uid = ((app or {}).get("metadata") or {}).get("uid")
    runs = [r for r in listed.get("items") or [] if (r.get("spec") or {}).get("app") == name
            and (uid is None or ((r.get("metadata") or {}).get("labels") or {}).get(APP_UID_LABEL) in (None, uid))]
    report = assemble_report(obj, app, runs)
    print(dump(report.as_dict(), args.output) if args.output else format_report(report))
    return 0
