"""`python -m bench --quick` runs end to end and writes its results (timings are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_runs_and_writes_results(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--kills", "1", "--results-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    output = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, output

    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert "latest.json" in written and len(written) == 2, written
    document = json.loads((tmp_path / "latest.json").read_text())

    assert {"timestamp", "git_commit", "machine", "params", "results", "table", "reference"} <= set(
        document
    )
    assert {"nproc", "python"} <= set(document["machine"])
    assert document["params"]["quick"] is True
    for target in ("durachat", "baseline"):
        result = document["results"][target]
        assert {"idle", "sequential", "burst", "load", "memory"} <= set(result), target
        load = result["load"]
        assert {"connect_ms", "ttft_ms", "latency_ms", "chunks_per_s", "errors", "cpu"} <= set(load)
        assert load["deltas"] > 0
        assert {"p50", "p99"} <= set(load["latency_ms"])
        assert result["idle"]["connections"] > 0
    burst = document["results"]["durachat"]["burst"]
    assert burst["cold_done"]["n"] == document["params"]["burst"]
    assert burst["cold_done"]["p50"] >= burst["cold"]["p50"]
    metrics = {row["metric"] for row in document["table"]}
    assert any(m.startswith("chunk delivery p50") for m in metrics)
    assert any(m.startswith("replies done p50") for m in metrics)
    chunks = next(r for r in document["table"] if r["metric"].startswith("chunks/s delivered"))
    assert chunks["target"].startswith(">= 0.7x relay ")
    layer = document["model_layer"]
    words = document["params"]["words"]
    for path in ("layer", "provider"):
        assert layer[path]["deltas_per_call"] == words + 1, path
        assert layer[path]["us_per_delta"] > 0, path
    assert layer["setup"]["ms_per_call"] > 0
    assert layer["first"]["ms_p50"] > 0
    assert any(row[0].startswith("shards' budget") for row in document["model_layer_table"])
    assert all({"durachat", "baseline", "ratio", "target"} <= set(row) for row in document["table"])
    recovery = document["recovery"]
    assert recovery["kills"] == 1 and recovery["exactly_once"] == 1
    assert recovery["first_recovered_chunk_s"]["n"] == 1
    assert any(
        row[0].startswith("kill -> first recovered chunk") for row in document["recovery_table"]
    )
