"""The report of a run: `summary.json` from Locust's CSV files, the timeline and the memory
samples, and the SLO checks that make `durachat load` exit non-zero (docs/load-testing.md).
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from durachat.loadtest.memory import MEMORY_FILE
from durachat.loadtest.runner import CSV_PREFIX, FAILURE_TYPES, TIMELINE

SUMMARY: Final = "summary.json"
RUN_INFO: Final = "run.json"
REQUEST_TYPES: Final = frozenset({"WS", "HTTP", "TURN", "IDLE"})
"""Types whose events are requests a user made (the denominator of the error rate)."""
_CODE: Final = re.compile(r"^\w+\((['\"])(.*)\1\)$")
DRIFT_FRACTION: Final = 0.2


@dataclass(frozen=True)
class Slo:
    """One service level objective: `metric` (a summary path) must be at most `limit`."""

    name: str
    metric: str
    limit: float
    unit: str

    def check(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The objective's result against `summary`."""
        value = lookup(summary, self.metric)
        passed = isinstance(value, int | float) and value <= self.limit
        return {
            "name": self.name,
            "metric": self.metric,
            "limit": self.limit,
            "unit": self.unit,
            "value": value,
            "passed": passed,
        }


def lookup(tree: dict[str, Any], path: str) -> Any:
    """`tree["a"]["b"]` for `"a.b"` (None where missing)."""
    node: Any = tree
    for key in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def read_stats(out: Path) -> dict[str, dict[str, Any]]:
    """Locust's final stats per entry (`"TURN chat"`, `"CHUNK ttfc"`, ...), times in ms."""
    path = out / f"{CSV_PREFIX}_stats.csv"
    entries: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return entries
    with open(path, newline="", encoding="utf-8") as source:
        for row in csv.DictReader(source):
            if not row.get("Type"):
                continue  # the Aggregated row mixes every kind of event
            entries[f"{row['Type']} {row['Name']}"] = {
                "count": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "avg": _number(row["Average Response Time"]),
                "p50": _number(row["50%"]),
                "p90": _number(row["90%"]),
                "p95": _number(row["95%"]),
                "p99": _number(row["99%"]),
                "max": _number(row["Max Response Time"]),
                "per_s": _number(row["Requests/s"]),
            }
    return entries


def read_errors(out: Path) -> dict[str, int]:
    """Failures by code (`timeout`, `closed_1013`, `unavailable`, ...), summed over entries."""
    path = out / f"{CSV_PREFIX}_failures.csv"
    codes: dict[str, int] = {}
    if not path.exists():
        return codes
    with open(path, newline="", encoding="utf-8") as source:
        for row in csv.DictReader(source):
            match = _CODE.match(row["Error"].strip())
            code = match.group(2) if match else row["Error"].strip()
            codes[code] = codes.get(code, 0) + int(row["Occurrences"])
    return dict(sorted(codes.items(), key=lambda item: -item[1]))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file of lines (an unfinished last line is skipped)."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as source:
        for line in source:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def active_rows(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline from the first row with users on."""
    start = next((i for i, row in enumerate(timeline) if row.get("users")), len(timeline))
    return timeline[start:]


def build_summary(out: Path, slos: list[Slo]) -> dict[str, Any]:
    """Read a run's folder and return its summary (see docs/load-testing.md#the-report)."""
    run = json.loads((out / RUN_INFO).read_text()) if (out / RUN_INFO).exists() else {}
    stats = read_stats(out)
    errors = read_errors(out)
    timeline = active_rows(read_jsonl(out / TIMELINE))
    requests = sum(v["count"] for k, v in stats.items() if k.split(" ")[0] in REQUEST_TYPES)
    failed = sum(v["failures"] for k, v in stats.items() if k.split(" ")[0] in FAILURE_TYPES)
    counters: dict[str, int] = timeline[-1].get("counters", {}) if timeline else {}
    span = timeline[-1]["t"] - timeline[0]["t"] if len(timeline) > 1 else 0.0
    summary: dict[str, Any] = {
        "run": run,
        "totals": {
            "requests": requests,
            "failures": failed,
            "error_rate": failed / requests if requests else None,
            "turns": sum(v["count"] for k, v in stats.items() if k.startswith("TURN ")),
            "chunks": counters.get("chunks", 0),
            "chunks_per_s": counters.get("chunks", 0) / span if span else None,
            "peak_users": max((row.get("users", 0) for row in timeline), default=0),
            "seconds": round(span, 1),
            "resumes": counters.get("resumes", 0),
            "resumes_after_end": counters.get("resumes_after_end", 0),
            "resumes_not_tried": counters.get("resumes_not_tried", 0),
        },
        "latency_ms": {
            name: {k: stats[key].get(k) for k in ("count", "p50", "p90", "p99", "max")}
            for name, key in (
                ("ttfc", "CHUNK ttfc"),
                ("delivery", "CHUNK delivery"),
                ("gap", "CHUNK gap"),
                ("resume_gap", "RESUME gap"),
                ("connect", "WS connect"),
            )
            if key in stats
        },
        "errors_by_code": errors,
        "entries": stats,
    }
    memory = memory_summary(read_jsonl(out / MEMORY_FILE))
    if memory:
        summary["memory"] = memory
    if timeline:
        summary["drift"] = drift(timeline)
    summary["slos"] = [slo.check(summary) for slo in slos]
    summary["passed"] = all(result["passed"] for result in summary["slos"])
    return summary


def memory_summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process: first, last and peak resident memory (MiB), the growth, and what it held
    at the end (open WebSockets or conversations in memory, where it says)."""
    series: dict[str, list[float]] = {}
    for sample in samples:
        for label, value in sample.get("rss", {}).items():
            series.setdefault(label, []).append(float(value) / 2**20)
    summary: dict[str, Any] = {
        label: {
            "first_mib": round(values[0], 1),
            "last_mib": round(values[-1], 1),
            "peak_mib": round(max(values), 1),
            "growth_mib": round(values[-1] - values[0], 1),
            "samples": len(values),
        }
        for label, values in sorted(series.items())
    }
    for sample in samples[-1:]:
        for label, count in sample.get("held", {}).items():
            if label in summary:
                summary[label]["held_at_end"] = count
    return summary


def drift(timeline: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency and errors at the start against the end of the run: the medians of the
    per-second window percentiles over the first and the last fifth of the time under load."""
    count = max(1, int(len(timeline) * DRIFT_FRACTION))
    head, tail = timeline[:count], timeline[-count:]
    result: dict[str, Any] = {"window_rows": count}
    for entry in ("CHUNK ttfc", "CHUNK delivery", "CHUNK gap"):
        for label in ("p50", "p99"):
            first = _median([row["entries"].get(entry, {}).get(label) for row in head])
            last = _median([row["entries"].get(entry, {}).get(label) for row in tail])
            if first is not None or last is not None:
                key = f"{entry.split(' ')[1]}_{label}_ms"
                result[key] = {"start": first, "end": last}
    result["failures"] = {"start": _failures(head), "end": _failures(tail)}
    return result


def _failures(rows: list[dict[str, Any]]) -> int:
    def total(row: dict[str, Any]) -> int:
        entries = row.get("entries", {})
        return sum(v["fail"] for k, v in entries.items() if k.split(" ")[0] in FAILURE_TYPES)

    return total(rows[-1]) - total(rows[0]) if rows else 0


def _median(values: list[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(present) if present else None


def _number(text: str) -> float | None:
    try:
        return round(float(text), 2)
    except ValueError:
        return None


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    """Write `summary.json` into the run's folder."""
    path = out / SUMMARY
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
