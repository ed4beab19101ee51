"""`stead service catalog`: the namespace's service entities and the built-in lifecycles (their models);
imported when it runs (`operators.lsm.cli` is the parser)."""

from __future__ import annotations

import argparse

from operators.lsm.builtin import BUILTINS
from operators.lsm.cli import ENTITIES, Kube, format_catalog
from operators.runtime import custom_path, dump


async def catalog(kube: Kube, args: argparse.Namespace) -> int:
    entities = (await kube.request("GET", custom_path(ENTITIES, args.namespace))).get("items") or []
    builtins = {str(name): spec.model_dump(mode="json", by_alias=True, exclude_none=True)
                for name, spec in BUILTINS.items()}
    if args.output:
        print(dump({"entities": entities, "builtinLifecycles": builtins}, args.output))
    else:
        print(format_catalog(entities, builtins))
    return 0
