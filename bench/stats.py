"""Percentiles and the plain-text results table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of `values` (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """Count, mean, p50, p90, p99 and max of a sample."""
    return {
        "n": len(values),
        "mean": (sum(values) / len(values)) if values else None,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": float(max(values)) if values else None,
    }


def fmt(value: float | int | None, unit: str = "", digits: int = 2) -> str:
    """A number for the table (`-` when missing)."""
    if value is None:
        return "-"
    if isinstance(value, int) or (abs(value) >= 1000 and unit != "ms"):
        return f"{value:,.0f}{unit}"
    return f"{value:.{digits}f}{unit}"


def ratio(a: float | int | None, b: float | int | None) -> str:
    """`a / b` for the table."""
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def render_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """An aligned plain-text table: `a | b | c`."""
    rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append(" | ".join(cells).rstrip())
        if index == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)
