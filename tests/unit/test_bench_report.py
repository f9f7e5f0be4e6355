"""The bench table's verdicts follow the targets of docs/benchmarks.md, set against the relay
of the same run where the target is relative; the shards' budget is the arithmetic the docs give."""

from __future__ import annotations

from typing import Any

import pytest
from bench.model_layer import budget_rows, shards_budget_us
from bench.report import reference_rows, rows

pytestmark = pytest.mark.timeout(10)

PARAMS = {"conversations": 200, "burst": 50, "idle_connections": 2000}


def _load(chunks: float, p50: float, p99: float, cpu: dict[str, float]) -> dict[str, Any]:
    return {
        "load": {
            "chunks_per_s": chunks,
            "latency_ms": {"p50": p50, "p99": p99},
            "cpu_us_per_delta": cpu,
        }
    }


def _row(table: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    return next(r for r in table if r["metric"].startswith(prefix))


@pytest.mark.parametrize(
    ("ours", "verdict"),
    [
        # 0.71x the relay's chunks/s, p50 relay + 1.9 ms, p99 1.95x, shards 140 µs together.
        (_load(6400.0, 4.9, 39.0, {"gw-1": 50.0, "shard-1": 70.0, "shard-2": 70.0}), "PASS"),
        # 0.69x, relay + 2.1 ms, 2.05x, and 160 µs for both shards (80 each).
        (_load(6200.0, 5.1, 41.0, {"gw-1": 50.0, "shard-1": 80.0, "shard-2": 80.0}), "MISS"),
    ],
)
def test_relative_targets_are_read_against_the_relay_of_the_run(
    ours: dict[str, Any], verdict: str
) -> None:
    relay = _load(9000.0, 3.0, 20.0, {"relay": 70.0, "producer": 35.0})
    table = rows({"durachat": ours, "baseline": relay}, PARAMS)
    assert _row(table, "chunks/s")["target"] == f">= 0.7x relay {verdict}"
    assert _row(table, "chunk delivery p50")["target"] == f"<= relay + 2 ms {verdict}"
    assert _row(table, "chunk delivery p99")["target"] == f"<= 2x relay {verdict}"
    assert _row(table, "CPU us/delta shards")["target"] == f"<= 150 us {verdict}"


def test_a_relative_target_without_the_relay_is_not_judged() -> None:
    table = rows({"durachat": _load(6400.0, 4.0, 30.0, {})}, PARAMS)
    assert _row(table, "chunks/s")["target"] == ">= 0.7x relay n/a"


def test_first_chunk_and_replies_done_against_their_limits() -> None:
    result = {
        "sequential": {"cold": {"p50": 6.9}},
        "burst": {"cold": {"p50": 101.0}, "cold_done": {"p50": 300.0}},
    }
    table = rows({"durachat": result}, PARAMS)
    assert _row(table, "TTFT p50 (ms) 1-at-a-time, new")["target"] == "<= 7 ms PASS"
    assert _row(table, "TTFT p50 (ms) 50 at once, new")["target"] == "<= 100 ms MISS"
    assert _row(table, "replies done p50")["target"] == "<= 320 ms PASS"
    reference = {r["metric"]: r for r in reference_rows({"durachat": result})}
    done = reference["replies done p50 50 at once, new conv (ms)"]
    assert done["reference"] == 645.0 and done["target"] == "<= 320 ms PASS"


def test_the_shards_budget_is_what_the_target_leaves_after_the_other_processes() -> None:
    results = {
        "baseline": _load(10_000.0, 3.0, 20.0, {}),
        "durachat": _load(
            5000.0,
            50.0,
            300.0,
            {"gw-1": 60.0, "shard-1": 150.0, "shard-2": 150.0, "redis": 30.0, "client-0": 20.0},
        ),
    }
    # 2 cores at 7,000 deltas/s: 285.7 µs per delta in all; 110 of them go to the others.
    assert shards_budget_us(results, cores=2) == pytest.approx(2e6 / 7000 - 110)
    assert shards_budget_us({"durachat": results["durachat"]}, cores=2) is None

    layer = {
        "layer": {"us_per_delta": 200.0, "ms_per_call": 8.2},
        "setup": {"ms_per_call": 2.0},
        "provider": {"us_per_delta": 3.0},
        "first": {"ms_p50": 2.5},
    }
    table = dict(budget_rows(layer, results, cores=2))
    assert table["model layer, call to first text delta (ms, p50)"] == "2.50"
    assert table["shards' budget per delta for 0.7x the relay (us)"] == "175.7"
    assert table["model layer's share of that budget"] == "1.14"
