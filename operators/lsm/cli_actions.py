"""`stead service list|create|get|update|set-state|migrate|delete|log`: the actions on service instances, run with the
API client (`Kube`); imported when one of them runs (`operators.lsm.cli` is the parser)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from typing import Any

from operators import API_VERSION
from operators.lsm.cli import (
    ENTITIES,
    INSTANCES,
    CliError,
    Kube,
    as_text,
    format_instance,
    format_list,
    format_log,
    parse_attrs,
    typed_attrs,
)
from operators.runtime import ApiError, custom_path, dump

UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _path(plural: str, namespace: str, name: str | None = None) -> str:
    return custom_path(plural, namespace, name)


async def find_instance(kube: Kube, namespace: str, ident: str) -> dict[str, Any]:
    """The instance an ID names: a name, a uid, or `<identity>=<value>` (CliError when none or several)."""
    if "=" not in ident and not UID.match(ident):
        try:
            return await kube.request("GET", _path(INSTANCES, namespace, ident))
        except ApiError as error:
            if error.status != 404:
                raise
            raise CliError(f"no service instance {ident!r} in namespace {namespace}") from None
    items = (await kube.request("GET", _path(INSTANCES, namespace))).get("items") or []
    if "=" in ident:
        key, _, value = ident.partition("=")
        entities = (await kube.request("GET", _path(ENTITIES, namespace))).get("items") or []
        identity = {str(e["metadata"]["name"]): (e.get("spec") or {}).get("identity") for e in entities}
        found = [i for i in items if identity.get(str((i.get("spec") or {}).get("entity"))) == key
                 and not (i.get("status") or {}).get("deleted")
                 and _identity(i, key) == value]
    else:
        found = [i for i in items if (i.get("metadata") or {}).get("uid") == ident]
    if not found:
        raise CliError(f"no service instance {ident!r} in namespace {namespace}")
    if len(found) > 1:
        names = ", ".join(f"{(i.get('spec') or {}).get('entity')}/{i['metadata']['name']}" for i in found)
        raise CliError(f"{ident!r} names {len(found)} service instances in namespace {namespace} ({names}): "
                       "give a name")
    return dict(found[0])


def _identity(obj: Mapping[str, Any], key: str) -> str:
    known = (obj.get("status") or {}).get("identity")
    return as_text(known if known is not None else ((obj.get("spec") or {}).get("attributes") or {}).get(key))


async def entity_of(kube: Kube, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The instance's ServiceEntity, to read `--attr` values by their types; None when it is gone (the values are
    then read as JSON or text, and the webhook judges them)."""
    namespace, name = obj["metadata"]["namespace"], str((obj.get("spec") or {}).get("entity"))
    try:
        return dict(await kube.request("GET", _path(ENTITIES, namespace, name)))
    except ApiError as error:
        if error.status != 404:
            raise
        return None


def instance_version(obj: Mapping[str, Any]) -> int | None:
    """The version an instance is at (status.version), as requests send it back; None before it is taken in."""
    version = (obj.get("status") or {}).get("version")
    return int(version) if version is not None else None



async def list_instances(kube: Kube, args: argparse.Namespace) -> int:
    try:
        await kube.request("GET", _path(ENTITIES, args.namespace, args.entity))
    except ApiError as error:
        if error.status != 404:
            raise
        raise CliError(f"no service entity {args.entity!r} in namespace {args.namespace}") from None
    items = [i for i in (await kube.request("GET", _path(INSTANCES, args.namespace))).get("items") or []
             if (i.get("spec") or {}).get("entity") == args.entity]
    if args.output:
        print(dump(items, args.output))
    elif items:
        print(format_list(items))
    else:
        print(f"no instances of {args.entity} in namespace {args.namespace}", file=sys.stderr)
    return 0


async def create(kube: Kube, args: argparse.Namespace) -> int:
    given = parse_attrs(args.attr)
    try:
        entity = await kube.request("GET", _path(ENTITIES, args.namespace, args.entity))
    except ApiError as error:
        if error.status != 404:
            raise
        raise CliError(f"no service entity {args.entity!r} in namespace {args.namespace}; nothing created") from None
    body = {"apiVersion": API_VERSION, "kind": "ServiceInstance",
            "metadata": {"name": args.name, "namespace": args.namespace},
            "spec": {"entity": args.entity, "attributes": typed_attrs(given, entity)}}
    made = await kube.request("POST", _path(INSTANCES, args.namespace), body)
    print(f"serviceinstance/{made['metadata']['name']} created (entity {args.entity})")
    return 0


async def get(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    print(dump(obj, args.output) if args.output else format_instance(obj))
    return 0


async def update(kube: Kube, args: argparse.Namespace) -> int:
    given = parse_attrs(args.attr)
    if not given:
        raise CliError("nothing to update: give --attr NAME=VALUE")
    obj = await find_instance(kube, args.namespace, args.id)
    name, spec = obj["metadata"]["name"], obj.get("spec") or {}
    entity = await entity_of(kube, obj)
    attributes = {**dict(spec.get("attributes") or {}), **typed_attrs(given, entity)}
    attributes = {k: v for k, v in attributes.items() if v is not None}
    version = instance_version(obj)
    patch: dict[str, Any] = {"spec": {"attributes": attributes, "currentVersion": version}}
    removed = set(dict(spec.get("attributes") or {})) - set(attributes)
    for key in removed:  # a merge patch keeps what it does not name: null removes
        patch["spec"]["attributes"][key] = None
    await kube.request("PATCH", _path(INSTANCES, args.namespace, name), patch,
                       content_type="application/merge-patch+json")
    print(f"serviceinstance/{name}: update sent at version {version}")
    return 0


async def set_state(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    name, version = obj["metadata"]["name"], instance_version(obj)
    if version is None:
        raise CliError(f"serviceinstance/{name} has no version yet (not taken in by the operator): try again")
    request: dict[str, Any] = {"target": args.target, "currentVersion": version}
    if args.message:
        request["message"] = args.message
    await kube.request("PATCH", _path(INSTANCES, args.namespace, name), {"spec": {"stateRequest": request}},
                       content_type="application/merge-patch+json")
    print(f"serviceinstance/{name}: state {args.target} requested at version {version} "
          f"(from {(obj.get('status') or {}).get('state')})")
    return 0


def version_attributes(entity: Mapping[str, Any] | None, number: int) -> dict[str, Any] | None:
    """The entity as `typed_attrs` reads it, with the attributes of version `number` (the top-level fields are the
    current version, `spec.versions` the others)."""
    spec = (entity or {}).get("spec") or {}
    if int(spec.get("version") or 1) == number:
        return dict(entity or {})
    other = next((v for v in spec.get("versions") or [] if v.get("version") == number), None)
    return None if other is None else {"spec": other}


async def migrate(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    name, spec, version = obj["metadata"]["name"], obj.get("spec") or {}, instance_version(obj)
    if version is None:
        raise CliError(f"serviceinstance/{name} has no version yet (not taken in by the operator): try again")
    entity = await entity_of(kube, obj)
    migration: dict[str, Any] = {"targetState": args.state, "currentVersion": version}
    given = typed_attrs(parse_attrs(args.attr), version_attributes(entity, args.version))
    if given:
        migration["attributes"] = given
    if args.remove:
        migration["remove"] = list(args.remove)
    if args.message:
        migration["message"] = args.message
    # the migration replaces the one before whole: a merge patch keeps what it does not name, null removes it
    before = dict(spec.get("migration") or {})
    patch = {**{key: None for key in before}, **migration}
    if given:
        patch["attributes"] = {**{key: None for key in before.get("attributes") or {}}, **given}
    await kube.request("PATCH", _path(INSTANCES, args.namespace, name),
                       {"spec": {"entityVersion": args.version, "migration": patch}},
                       content_type="application/merge-patch+json")
    now = (obj.get("status") or {}).get("entityVersion")
    print(f"serviceinstance/{name}: migration to entity version {args.version} (state {args.state}) sent at version "
          f"{version} (from entity version {now if now is not None else '-'})")
    return 0


async def delete(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    name = obj["metadata"]["name"]
    await kube.request("DELETE", _path(INSTANCES, args.namespace, name),
                       {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": obj["metadata"]["uid"]}})
    print(f"serviceinstance/{name}: delete requested (in state {(obj.get('status') or {}).get('state')})")
    return 0


async def log(kube: Kube, args: argparse.Namespace) -> int:
    obj = await find_instance(kube, args.namespace, args.id)
    print(format_log(obj))
    return 0
