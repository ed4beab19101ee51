"""The Environment operator written the way a plain Kopf user would write it: the baseline.

`bench/pipeline_throughput.py` compares Stead against this file to show what Stead's runtime
(one low-level handler, one status PATCH per visible transition) buys over Kopf's ordinary
high-level handlers. For the comparison to mean anything it must do the same work and leave
objects in the same state, so it:

- validates with the kind's own `check_spec` and summarizes with `logic.summarize`, exactly the
  calls of Stead's pipeline steps;
- writes the same status Stead writes (facts, `phase`, `observedGeneration`, and the Ready,
  Reconciling and Stalled conditions, composed by the same function), so that "Ready at its
  generation" means the same thing for both;
- otherwise keeps Kopf's defaults: `@kopf.on.create` / `@kopf.on.update`, progress and the
  last-handled-configuration annotation, its INFO logging, its batching and watching settings.
  Tuning them away would measure a different operator. (Since Kopf 1.45, `posting.loggers` is
  off by default, so handler results are logged but not posted as Events; Stead posts one.)

Handlers are `async def` (the faster of Kopf's two styles for CPU-only work: sync handlers
go through a thread pool). An invalid spec ends in Stalled and the handler returns normally,
as Stead does, rather than raising into Kopf's retry loop.

Run it as Kopf users do, from the repository root (the handlers import `operators`):

    KUBECONFIG=... kopf run bench/kopf_baseline.py --all-namespaces --standalone

or `python bench/kopf_baseline.py`, which calls `kopf.run` with the same options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from operators import GROUP, VERSION
from operators.environment import KIND
from operators.environment.logic import summarize
from operators.environment.models import EnvironmentSpec
from operators.runtime.core.pipeline import INIT, PROVISIONED, Observed, Outcome, PermanentError, compose_status
from operators.runtime.engine.reconciler import utc_now


def environment_status(body: Mapping[str, Any]) -> dict[str, Any]:
    """The status Stead would end with for this object: Provisioned, or Stalled on a bad spec."""
    obj = Observed.from_body(body)
    problems = KIND.check_spec(obj.spec)
    if problems:
        outcome = Outcome(phase=INIT, facts={}, error=PermanentError("InvalidSpec", "; ".join(problems)))
        return compose_status(obj, outcome, utc_now(), phase_shown=str(obj.status.get("phase") or INIT))
    facts = summarize(EnvironmentSpec.model_validate(dict(obj.spec)))
    return compose_status(obj, Outcome(phase=PROVISIONED, facts=facts), utc_now())


@kopf.on.create(GROUP, VERSION, KIND.plural)
async def environment_created(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A new Environment: validate, summarize, and put the result into status."""
    patch.status.update(environment_status(body))


@kopf.on.update(GROUP, VERSION, KIND.plural)
async def environment_updated(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A changed Environment (Kopf calls this for spec and metadata changes): the same again."""
    patch.status.update(environment_status(body))


if __name__ == "__main__":
    kopf.run(standalone=True, clusterwide=True)
