"""`stead service expert set-state|edit|destroy`: expert mode (issue 31; `operators.lsm.expert`), run with the
API client (`Kube`); imported when one of them runs (`operators.lsm.cli` is the parser).

Each writes `spec.expert` once, at the version read, with `user` set to the caller's name as the API server
knows it (a SelfSubjectReview: the name the policy compares it with). Without the permission (verb expert on
serviceinstances.stead.dev) the API server's refusal, naming it, is the command's one line on stderr.
"""

from __future__ import annotations

import argparse
from typing import Any

from operators.lsm.cli import INSTANCES, CliError, Kube, parse_attrs, typed_attrs
from operators.lsm.cli_actions import entity_of, find_instance, instance_version
from operators.runtime import custom_path


async def whoami(kube: Kube) -> str:
    """The caller's user name, as the API server authenticates it (what spec.expert.user must be)."""
    review = await kube.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    name = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    if not name:
        raise CliError("the API server did not say who you are (SelfSubjectReview): cannot sign an expert request")
    return str(name)


async def _send(kube: Kube, args: argparse.Namespace, obj: dict[str, Any], request: dict[str, Any]) -> int:
    name, version = obj["metadata"]["name"], instance_version(obj)
    if version is None:
        raise CliError(f"serviceinstance/{name} has no version yet (not taken in by the operator): try again")
    request = {**request, "user": await whoami(kube), "currentVersion": version}
    if args.message:
        request["message"] = args.message
    # a JSON patch replaces the request whole (a merge patch would keep the last one's other fields)
    await kube.request("PATCH", custom_path(INSTANCES, args.namespace, name),
                       [{"op": "add", "path": "/spec/expert", "value": request}],
                       content_type="application/json-patch+json")
    print(f"serviceinstance/{name}: expert {request['operation']} sent by {request['user']} at version {version}")
    return 0


async def set_state(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    return await _send(kube, args, obj, {"operation": "setState", "state": args.state})


async def edit(kube: Kube, args: argparse.Namespace) -> int:
    given = parse_attrs(args.attr)
    if not given:
        raise CliError("nothing to edit: give --attr NAME=VALUE")
    obj = await find_instance(kube, args.namespace, args.id)
    entity = await entity_of(kube, obj)
    current = dict((obj.get("status") or {}).get(f"{args.set}Attributes") or {})
    values = {k: v for k, v in {**current, **typed_attrs(given, entity)}.items() if v is not None}
    return await _send(kube, args, obj, {"operation": "editAttributes", "set": args.set, "attributes": values})


async def destroy(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    return await _send(kube, args, obj, {"operation": "destroy"})
