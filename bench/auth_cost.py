"""What requiring credentials costs (docs/security.md): durachat in auth mode (`durachat-auth`:
every socket holds a client token, quotas counted in Redis) against durachat open, measured in
the same run by the same load generator."""

from __future__ import annotations

from typing import Any, Final

from bench.report import Getter, _cpu, _front, _get
from bench.stats import fmt, ratio, render_table

AUTH_HEADER: Final = ["auth cost", "open", "auth", "auth / open", "target"]
MAX_COST: Final = 0.05
"""The most auth may cost on the metrics that have a target: 5 %."""


def _rows(params: dict[str, Any]) -> list[tuple[str, Getter, bool | None]]:
    """(metric, getter, higher is better; None: no target)."""
    n = params["conversations"]
    return [
        ("TTFT p50 (ms) 1-at-a-time, 2nd msg", _get("sequential", "warm", "p50"), False),
        (f"TTFT p50 (ms) {params['burst']} at once, 2nd msg", _get("burst", "warm", "p50"), None),
        (f"TTFT p50 (ms) @{n} under load", _get("load", "ttft_ms", "p50"), None),
        ("chunks/s delivered (aggregate)", _get("load", "chunks_per_s"), True),
        (f"chunk delivery p50 (ms) @{n}", _get("load", "latency_ms", "p50"), None),
        (f"connect p50 (ms) @{n}", _get("load", "connect_ms", "p50"), None),
        ("CPU us/delta gateway", _cpu(_front), None),
    ]


def auth_rows(results: dict[str, Any], params: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric: open, auth, their ratio and, where there is one, the verdict."""
    open_, auth = results.get("durachat", {}), results.get("durachat-auth", {})
    out = []
    for metric, get, higher_better in _rows(params):
        a, b = get(open_), get(auth)
        verdict = ""
        if higher_better is not None and a and b is not None:
            cost = (a - b) / a if higher_better else (b - a) / a
            verdict = f"cost <= 5 % {'PASS' if cost <= MAX_COST else 'MISS'} ({100 * cost:+.1f} %)"
        out.append({"metric": metric, "open": a, "auth": b, "target": verdict})
    return out


def render_auth(table: list[dict[str, Any]]) -> str:
    """The table as text."""
    return render_table(
        AUTH_HEADER,
        [
            [r["metric"], fmt(r["open"]), fmt(r["auth"]), ratio(r["auth"], r["open"]), r["target"]]
            for r in table
        ],
    )
