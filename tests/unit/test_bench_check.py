"""bench/check.py's decisions (issue 32): what the baseline file must say, and when new/old is a regression."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.check import ALL_BENCHES, BASELINE_FILE, config_figures, judge, parse_baseline, pipeline_figures

NAMES = ["workflow", "compile"]
GOOD = """
commit = "8011922a6a1d186baaf551ad8c05b867b1b72028"
rounds = 3
[tolerance]
workflow = 0.15
compile = 0.2
"""


def test_the_baseline_file_gives_the_commit_rounds_and_a_tolerance_per_bench() -> None:
    baseline = parse_baseline(GOOD, NAMES)
    assert baseline.commit == "8011922a6a1d186baaf551ad8c05b867b1b72028"
    assert baseline.rounds == 3
    assert baseline.tolerance == {"workflow": 0.15, "compile": 0.2}


def test_rounds_default_to_five_and_three_on_a_control_plane() -> None:
    baseline = parse_baseline(GOOD.replace("rounds = 3\n", ""), NAMES)
    assert (baseline.rounds, baseline.plane_rounds) == (5, 3)
    assert parse_baseline(GOOD.replace("rounds = 3\n", "rounds = 3\nplane_rounds = 2\n"), NAMES).plane_rounds == 2


@pytest.mark.parametrize(("text", "field"), [
    (GOOD.replace('commit = "8011922a6a1d186baaf551ad8c05b867b1b72028"', ""), "`commit`"),
    (GOOD.replace('commit = "8011922a6a1d186baaf551ad8c05b867b1b72028"', "commit = 8011922"), "`commit`"),
    (GOOD.replace("rounds = 3", "rounds = 0"), "`rounds`"),
    (GOOD.replace("rounds = 3", "rounds = 3\nplane_rounds = true"), "`plane_rounds`"),
    (GOOD.replace("compile = 0.2\n", ""), "tolerance.compile is missing"),
    (GOOD.replace("compile = 0.2", 'compile = "15%"'), "tolerance.compile must be a fraction"),
    (GOOD + "masking = 0.1\n", "tolerance.masking: no such bench"),
    (GOOD.split("[tolerance]")[0], "[tolerance]"),
    ("commit = ", "not TOML"),
])
def test_a_bad_baseline_file_is_refused_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_baseline(text, NAMES)
    assert field in str(raised.value)


def test_the_committed_baseline_file_is_valid_for_every_bench() -> None:
    baseline = parse_baseline(Path(BASELINE_FILE).read_text(), ALL_BENCHES)
    assert len(baseline.commit) == 40
    assert {"pipeline", "config"} <= set(baseline.tolerance) == set(ALL_BENCHES)


def test_a_slower_median_and_minimum_beyond_the_tolerance_is_a_regression() -> None:
    verdict = judge([1.0, 1.1, 0.9], [1.3, 1.25, 1.4], 0.15)
    assert (verdict.old_min, verdict.old_median, verdict.new_min, verdict.new_median) == (0.9, 1.0, 1.25, 1.3)
    assert verdict.median_ratio == pytest.approx(1.3)
    assert verdict.min_ratio == pytest.approx(1.25 / 0.9)
    assert verdict.regressed


def test_within_the_tolerance_is_not_a_regression() -> None:
    assert not judge([1.0, 1.0, 1.0], [1.14, 1.14, 1.14], 0.15).regressed
    assert judge([1.0, 1.0, 1.0], [1.16, 1.16, 1.16], 0.15).regressed


def test_one_loaded_round_moving_only_the_median_or_only_the_minimum_is_noise() -> None:
    # the new side's minimum is as fast as the old one: its slow median is load, not the code
    assert not judge([1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.5, 1.5, 1.6, 1.7], 0.15).regressed
    # the old side had one lucky round: the minima differ, the medians do not
    assert not judge([0.7, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0], 0.15).regressed


def test_faster_is_never_a_regression() -> None:
    verdict = judge([2.0, 2.0], [1.0, 1.0], 0.0)
    assert verdict.median_ratio == pytest.approx(0.5)
    assert not verdict.regressed


def test_judging_needs_rounds_and_positive_times() -> None:
    with pytest.raises(ValueError, match="at least one round"):
        judge([], [1.0], 0.1)
    with pytest.raises(ValueError, match="positive"):
        judge([0.0], [1.0], 0.1)


PIPELINE_RUN = {"contender": "stead", "count": 300, "seconds": 4.0, "ready": 300, "error": None, "load": 1.5,
                "cpu": {"operator": 0.75, "kube-apiserver": 2.0},
                "audit": {"patches": 300, "patches_by_subresource": {"status": 300}, "operator_requests": 612}}


def test_a_pipeline_run_gives_operator_cpu_status_patches_and_requests_per_object() -> None:
    figures, note = pipeline_figures(PIPELINE_RUN)
    assert figures == {"300 to Ready, operator CPU ms/obj": pytest.approx(2.5), "status PATCHes/obj": 1.0,
                       "operator requests/obj": pytest.approx(2.04)}
    assert "300 Ready in 4.0 s (75/s)" in note


@pytest.mark.parametrize(("change", "says"), [
    ({"seconds": None, "ready": 120, "error": "timeout after 600s"}, "120/300 Ready (timeout after 600s)"),
    ({"audit": None}, "audit log missing"),
    ({"cpu": {}}, "operator CPU missing"),
])
def test_a_pipeline_run_that_did_not_finish_or_measure_is_refused_not_scored(change: dict[str, object],
                                                                           says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        pipeline_figures({**PIPELINE_RUN, **change})


def test_a_config_run_gives_cpu_per_request_and_the_ceiling_over_the_operator() -> None:
    figures, note = config_figures({
        "ceiling": {"rps": 20000.0, "p99_ms": 9.0, "errors": 0, "cpu_us_per_request": 60.0},
        "operator": {"rps": 10000.0, "p99_ms": 18.0, "errors": 0, "cpu_us_per_request": 150.0}})
    assert figures == {"operator server CPU us/req": 150.0, "ceiling/operator req/s": 2.0}
    assert note == "operator 10000 req/s p99 18.0 ms, ceiling 20000 req/s p99 9.0 ms"


def test_a_config_run_with_errors_is_refused_not_scored() -> None:
    with pytest.raises(ValueError, match="operator: 12 errors"):
        config_figures({"ceiling": {"rps": 20000.0, "errors": 0},
                        "operator": {"rps": 30000.0, "errors": 12.0, "cpu_us_per_request": 20.0}})
