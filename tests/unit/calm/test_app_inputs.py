"""App inputs against the blueprint's runtime variables, and the lock's expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from operators.calm.app import active_lock, input_problems, lock_expired
from operators.calm.models import BlueprintSpec

SPEC = BlueprintSpec.model_validate({"variables": [
    {"name": "port", "type": "int", "value": "80", "runtime": True},
    {"name": "env", "options": ["staging", "production"], "runtime": True, "mandatory": True},
    {"name": "who", "runtime": True, "regex": "[a-z]+"},
    {"name": "fixed", "value": "x"},
]})


def test_inputs_are_checked_by_type_options_regex_and_mandatory() -> None:
    assert input_problems(SPEC, {"env": "staging", "port": "8080", "who": "abc"}) == []
    problems = input_problems(SPEC, {"port": "eighty", "who": "ABC", "fixed": "y", "env": "dev"})
    text = "; ".join(problems)
    assert "spec.inputs.port: 'eighty': not a valid int" in text
    assert "spec.inputs.who: 'ABC' does not match '[a-z]+'" in text
    assert "spec.inputs.fixed: not a runtime variable" in text
    assert "spec.inputs.env: 'dev' is not one of staging, production" in text
    assert input_problems(SPEC, {}) == ["spec.inputs.env: required (a mandatory runtime variable without a default)"]


def test_a_lock_older_than_its_ttl_is_no_lock() -> None:
    since = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert lock_expired({"since": since, "ttlSeconds": 10})
    assert not lock_expired({"since": since, "ttlSeconds": 60})
    assert active_lock({"lock": {"lockedBy": "r", "since": since, "ttlSeconds": 60}}) is not None
    assert active_lock({"lock": {"lockedBy": "r", "since": since, "ttlSeconds": 10}}) is None
    assert active_lock({}) is None
