"""bench/pipeline_throughput.py's accounting (issue 32): what its explanation of a run is read from."""

from __future__ import annotations

from pathlib import Path

from bench.pipeline_throughput import metrics_since, parse_apiserver_metrics, profile_shares, summarize_audit

WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST = "apiserver_request_duration_seconds"


def sample(metric: str, value: float, **labels: str) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "} " + str(value)


APPS = {"name": "apps.stead.dev", "type": "validating"}
EVENTS = {"group": "", "resource": "events", "subresource": "", "verb": "POST"}
STATUS = {"group": "stead.dev", "resource": "environments", "subresource": "status", "verb": "PATCH"}
METRICS = "\n".join([
    "# HELP apiserver_admission_webhook_admission_duration_seconds Admission webhook latency",
    sample(WEBHOOK + "_bucket", 2, **APPS, operation="CREATE", rejected="false", le="0.005"),
    sample(WEBHOOK + "_sum", 0.5, **APPS, operation="CREATE", rejected="false"),
    sample(WEBHOOK + "_count", 2, **APPS, operation="CREATE", rejected="false"),
    sample(WEBHOOK + "_count", 1, **APPS, operation="UPDATE", rejected="true"),
    sample(WEBHOOK + "_sum", 0.25, **APPS, operation="UPDATE", rejected="true"),
    sample(REQUEST + "_sum", 1.5, **EVENTS), sample(REQUEST + "_count", 3, **EVENTS),
    sample(REQUEST + "_count", 4, **STATUS), sample(REQUEST + "_sum", 0.4, **STATUS),
    sample(REQUEST + "_count", 9, group="", resource="pods", subresource="", verb="WATCH"),
])


def test_webhook_calls_and_request_times_are_summed_over_the_other_labels_and_watches_left_out() -> None:
    parsed = parse_apiserver_metrics(METRICS)
    assert parsed == {"webhook apps.stead.dev (validating)": (3.0, 0.75), "POST events": (3.0, 1.5),
                      "PATCH environments/status": (4.0, 0.4)}
    later = {**parsed, "POST events": (5.0, 2.0)}
    assert metrics_since(parsed, later) == {"POST events": (2.0, 0.5)}


def test_event_creates_are_told_apart_before_and_after_all_were_ready() -> None:
    def create(resource: str, at: str, verb: str = "create", sub: str | None = None) -> dict[str, object]:
        return {"auditID": f"{resource}{at}{verb}", "verb": verb, "stage": "ResponseComplete",
                "requestReceivedTimestamp": f"2026-01-01T00:00:{at}Z", "user": {"username": "u"},
                "userAgent": "stead-operator", "responseStatus": {"code": 201},
                "objectRef": {"resource": resource, "namespace": "ns", "subresource": sub}}

    ready = 1767225605.0  # 2026-01-01T00:00:05Z
    events = [create("environments", "01"), create("environments", "02", "patch", "status"),
              create("events", "03"), create("events", "09"), create("events", "07")]
    summary = summarize_audit(iter(events), "ns", since=ready - 10, until=ready)
    assert summary.writes == {"create environments": 1, "patch environments/status": 1, "create events": 3}
    assert summary.events_in_time == 1 and summary.events_trail == 4.0


def test_profile_samples_count_for_every_bucket_their_stack_passes(tmp_path: Path) -> None:
    raw = tmp_path / "pyspy.txt"
    raw.write_text("main;Watch._handle (w.py:1);ConfigCache._tap (c.py:2) 3\n"
                   "main;Reconciler._turn (r.py:1);BaseModel.model_validate (p.py:9) 1\n"
                   "main;EventRecorder.run (e.py:1) 1\n")
    shares = dict(profile_shares(raw))
    assert shares["samples"] == 5
    assert shares["watch: lines decoded, dispatched"] == 0.6 and shares["  of which the config API's cache"] == 0.6
    assert shares["  of which spec parses (pydantic)"] == 0.2 and shares["metrics"] == 0.0
