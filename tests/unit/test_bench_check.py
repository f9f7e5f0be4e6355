"""`bench.check`'s verdict: regressions are named, figures within the margins pass."""

from __future__ import annotations

from typing import Any

from bench.check import ratios, verdict

REFERENCE: dict[str, Any] = {
    "ratios": {"chunks_per_s_ratio": 0.2, "delivery_p99_ratio": 10.0, "errors": 0},
    "min_fraction": 0.6,
    "max_growth": 3.0,
}


def _run(chunks: float, p99: float, errors: int = 0) -> dict[str, Any]:
    return {
        "durachat": {
            "load": {
                "chunks_per_s": chunks,
                "latency_ms": {"p99": p99},
                "errors": {"requests_with_errors": errors},
            }
        },
        "baseline": {"load": {"chunks_per_s": 10_000.0, "latency_ms": {"p99": 10.0}}},
    }


def test_figures_as_good_as_recorded_pass() -> None:
    assert verdict(ratios(_run(2_000, 100)), REFERENCE) == []


def test_a_slower_machine_that_slows_both_sides_passes() -> None:
    slow = _run(1_000, 200)
    slow["baseline"]["load"] = {"chunks_per_s": 5_000.0, "latency_ms": {"p99": 20.0}}
    assert verdict(ratios(slow), REFERENCE) == []


def test_timeouts_fail_the_check() -> None:
    [problem] = verdict(ratios(_run(2_000, 100, errors=18)), REFERENCE)
    assert "18 requests" in problem


def test_throughput_below_the_floor_fails_the_check() -> None:
    # 0.05x the relay, as at the regression, against a floor of 0.6 * 0.2 = 0.12x.
    [problem] = verdict(ratios(_run(500, 100)), REFERENCE)
    assert "chunks/s" in problem


def test_delivery_p99_past_the_ceiling_fails_the_check() -> None:
    [problem] = verdict(ratios(_run(2_000, 310)), REFERENCE)
    assert "p99" in problem
