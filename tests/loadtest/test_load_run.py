"""`durachat load run` against a real local cluster: every kind of simulated user, a Locust
master with a worker process, the recorded metrics and the report files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from durachat_infra.local.cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

DURACHAT = str(Path(sys.executable).with_name("durachat"))
SCENARIO = "chat,long,resume,tools,branches,idle,tabs,events"
EVERY_ENTRY = (
    "WS connect",
    "TURN chat",
    "TURN long",
    "TURN resume",
    "TURN tool",
    "TURN approval",
    "TURN client tool",
    "TURN regenerate",
    "TURN edit",
    "TURN second tab",
    "IDLE hold",
    "CHUNK ttfc",
    "CHUNK gap",
    "CHUNK delivery",
    "RESUME gap",
    "RESUME replay",
    "EVENT subscribe",
    "EVENT lag",
)


def load(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DURACHAT, "load", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_distributed_run_records_every_metric_and_writes_the_report(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    completed = load(
        "run",
        *("--url", cluster.urls[0], "--users", "8", "--spawn-rate", "8", "--duration", "20s"),
        *("--scenario", SCENARIO, "--workers", "1", "--agent", "loadtest-agent"),
        *("--think", "0.1-0.3", "--idle-hold", "2-3", "--messages", "2"),
        *("--memory", "--memory-interval", "2s", "--out", str(out)),
        *("--max-ttfc-p99", "10s", "--max-error-rate", "0%"),
    )
    logs = "".join(p.read_text()[-3000:] for p in sorted(out.glob("locust-*.log")))
    assert completed.returncode == 0, completed.stdout + completed.stderr + logs

    for name in (
        "locust_stats.csv",
        "locust_failures.csv",
        "locust_stats_history.csv",
        "locust.html",
        "timeline.jsonl",
        "memory.jsonl",
        "run.json",
        "summary.json",
        "ttfc.png",
        "delivery.png",
        "throughput.png",
        "memory.png",
    ):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    entries = summary["entries"]
    missing = [name for name in EVERY_ENTRY if not entries.get(name, {}).get("count")]
    assert not missing, (missing, entries, summary["errors_by_code"])
    assert summary["totals"]["failures"] == 0, summary["errors_by_code"]
    assert summary["errors_by_code"] == {}
    assert summary["totals"]["peak_users"] == 8
    assert summary["totals"]["chunks"] > entries["CHUNK ttfc"]["count"]
    assert summary["totals"]["resumes"] >= 1
    for metric in ("ttfc", "delivery", "gap", "resume_gap", "connect"):
        values = summary["latency_ms"][metric]
        # Locust keeps times above 100 ms to two significant digits: p99 may pass max a little.
        assert 0 <= values["p50"] <= values["p99"] <= values["max"] * 1.05 + 1, (metric, values)
    assert summary["passed"] and [s["passed"] for s in summary["slos"]] == [True, True]
    # The gateway and both shards answered on their metrics endpoints throughout.
    assert {"gw-1", "shard-1", "shard-2"} <= set(summary["memory"]), summary["memory"]
    assert all(m["samples"] >= 3 for m in summary["memory"].values())
    timeline = [json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines()]
    assert max(row["workers"] for row in timeline) == 1
    assert "ttfc p50" in completed.stdout and "SLO error rate" in completed.stdout

    # The same run judged against an objective it missed exits 1.
    strict = load("report", str(out), "--max-ttfc-p99", "1ms", timeout=60)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "MISSED" in strict.stdout
    assert json.loads((out / "summary.json").read_text())["passed"] is False
