"""`stead config set|override --key K --value V` without `--type`: V read by the type the resource's schema
declares at K (2 is a number where the schema says integer). Imported only then: the schema reader imports
jsonschema, which no other action needs."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

from operators.config.cli_run import PREFIX
from operators.config.keys import KeyPathError, parse_key
from operators.config.schema.reading import schema_at, value_from_text
from operators.runtime import RequestFailed, call


def value_by_schema(args: argparse.Namespace) -> Any:
    """`--value` read by the schema at `--key` (a string where there is none)."""
    return value_from_text(args.value, schema_at_key(args))


def schema_at_key(args: argparse.Namespace) -> Any:
    """The resource's schema at `--key`, from the components the environment enables; None when
    there is none or it cannot be read (the value is then a string)."""
    base = str(args.server).rstrip("/") + PREFIX
    try:
        environment = call(args, "GET", f"{base}/environments/{urllib.parse.quote(args.env, safe='')}")
        for component in environment.get("components") or []:
            view = call(args, "GET", f"{base}/components/{urllib.parse.quote(str(component), safe='')}")
            definition = (view.get("resource_definitions") or {}).get(args.resource)
            if definition is not None:
                return schema_at(definition.get("schema"), parse_key(args.key))
    except (RequestFailed, KeyPathError, AttributeError):
        return None
    return None
