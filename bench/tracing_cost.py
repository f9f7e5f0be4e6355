"""What tracing costs (docs/observability.md#traces): durachat with every turn traced (100 %
sampling) and exported over OTLP/HTTP to a local receiver (`durachat-traced`) against durachat
with tracing off, in the same run: each target's full phases one after the other (for
information), then both side by side in alternating blocks (`run_paired` with the `traced`
variant), which is what the 10 % budget is judged on."""

from __future__ import annotations

from typing import Any, Final

from bench.auth_cost import _rows, paired_rows
from bench.stats import fmt, ratio, render_table

TRACING_HEADER: Final = ["tracing cost", "off", "traced", "traced / off", "target"]
MAX_COST: Final = 0.10
"""The most tracing may cost on the metrics that have a target: 10 %."""


def tracing_rows(
    results: dict[str, Any], params: dict[str, Any], paired: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """One row per metric of the full phases (not judged when a paired measurement exists),
    then the paired rows, judged against the budget."""
    off, traced = results.get("durachat", {}), results.get("durachat-traced", {})
    out = []
    for metric, get, higher_better in _rows(params):
        a, b = get(off), get(traced)
        verdict = ""
        if paired is None and higher_better is not None and a and b is not None:
            cost = (a - b) / a if higher_better else (b - a) / a
            verdict = f"cost <= 10 % {'PASS' if cost <= MAX_COST else 'MISS'} ({100 * cost:+.1f} %)"
        out.append({"metric": metric, "open": a, "traced": b, "target": verdict})
    if paired is not None:
        out += paired_rows(paired, variant="traced", budget=MAX_COST)
    return out


def render_tracing(table: list[dict[str, Any]]) -> str:
    """The table as text."""
    return render_table(
        TRACING_HEADER,
        [
            [
                r["metric"],
                fmt(r["open"]),
                fmt(r["traced"]),
                ratio(r["traced"], r["open"]),
                r["target"],
            ]
            for r in table
        ],
    )
