"""`stead crds`: write crds/*.yaml, the chart's copies and the objects Stead ships, from the models (or
`--check` them). Imported only when the command runs: it needs the whole catalog of kinds."""

from __future__ import annotations

import argparse
import sys

from operators.catalog import KINDS
from operators.cli import CRD_DIRS, OBJECTS_DIR, POLICIES_DIR
from operators.runtime.kube import crds as crdgen
from operators.runtime.shard.policy import shard_label_policy


def cmd_crds(args: argparse.Namespace) -> int:
    stale = []
    files = [(directory / f"{kind.plural}.yaml", crdgen.render(kind)) for directory in args.dir or CRD_DIRS
             for kind in KINDS]
    if not args.dir:
        files += [(OBJECTS_DIR / f"{kind.plural}-{obj['metadata']['name']}.yaml", crdgen.render_object(obj))
                  for kind in KINDS for obj in crdgen.shipped_objects(kind)]
        files += [(POLICIES_DIR / "shard-labels.yaml", crdgen.render_object(shard_label_policy()[0]))]
        files += [(POLICIES_DIR / f"{obj['metadata']['name'].removeprefix('stead-')}.yaml",
                   crdgen.render_object(dict(obj)))
                  for kind in KINDS for obj in (kind.cluster_objects() if kind.cluster_objects else ())
                  if obj["kind"] == "ValidatingAdmissionPolicy"]
    for path, text in files:
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale CRDs or shipped objects (run `stead crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


