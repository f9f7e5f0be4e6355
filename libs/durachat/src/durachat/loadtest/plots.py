"""The PNG plots of a run (matplotlib, no display needed); docs/load-testing.md#reading-the-plots.

* `ttfc.png`, `delivery.png`: percentiles over time, each point over Locust's sliding window
  of about the last 10 s;
* `throughput.png`: chunks/s and connected users, and turns and failures per second;
* `memory.png` (soak, or `--memory`): each process's resident memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from durachat.loadtest.memory import MEMORY_FILE
from durachat.loadtest.report import active_rows, read_jsonl
from durachat.loadtest.runner import FAILURE_TYPES, TIMELINE

RATE_WINDOW_S: Final = 6.0
"""Rates are averaged over this many seconds: a multiple of the 3 s between the reports a
worker sends its master, so that distributed runs do not show their rhythm."""
COLOURS: Final = {"p50": "tab:blue", "p90": "tab:orange", "p99": "tab:red"}


def write_plots(out: Path, title: str) -> list[Path]:
    """Draw the plots of the run in `out`; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    timeline = active_rows(read_jsonl(out / TIMELINE))
    written: list[Path] = []
    if timeline:
        start = timeline[0]["t"]
        written.append(
            _percentiles(
                out / "ttfc.png",
                timeline=timeline,
                start=start,
                entry="CHUNK ttfc",
                title=f"{title}: time to first chunk",
            )
        )
        written.append(
            _percentiles(
                out / "delivery.png",
                timeline=timeline,
                start=start,
                entry="CHUNK delivery",
                title=f"{title}: chunk delivery latency",
                empty="no stamped chunks: serve loadtest-agent to measure delivery",
            )
        )
        written.append(_throughput(out / "throughput.png", timeline, start, title))
    samples = read_jsonl(out / MEMORY_FILE)
    if samples:
        start = timeline[0]["t"] if timeline else samples[0]["t"]
        written.append(_memory(out / "memory.png", samples, start, title))
    return written


def _figure(rows: int = 1) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    return plt.subplots(rows, 1, figsize=(10, 4.2 * rows), sharex=True, squeeze=False)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _percentiles(
    path: Path,
    *,
    timeline: list[dict[str, Any]],
    start: float,
    entry: str,
    title: str,
    empty: str = "no samples",
) -> Path:
    fig, axes = _figure()
    ax = axes[0][0]
    plotted = False
    for label, colour in COLOURS.items():
        points = [
            (row["t"] - start, row["entries"][entry][label])
            for row in timeline
            if isinstance(row["entries"].get(entry, {}).get(label), int | float)
        ]
        if points:
            plotted = True
            ax.plot(*zip(*points, strict=True), label=label, color=colour, linewidth=1.4)
    if plotted:
        ax.legend(loc="upper left")
        ax.set_ylim(bottom=0)
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_ylabel("ms (last ~10 s)")
    ax.set_xlabel("seconds since the first user started")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _grid(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows where anything was counted, and the last row.

    A master's counts move only when a worker's report arrives (every 3 s): rates taken
    between these rows span whole reports, so that distributed runs do not show their rhythm.
    """

    def signature(row: dict[str, Any]) -> int:
        entries = row.get("entries", {})
        return int(row.get("counters", {}).get("chunks", 0)) + sum(
            int(v["n"]) for v in entries.values()
        )

    grid: list[dict[str, Any]] = []
    for row in timeline:
        if not grid or signature(row) != signature(grid[-1]):
            grid.append(row)
    if grid[-1] is not timeline[-1]:
        grid.append(timeline[-1])
    return grid


def _rate(grid: list[dict[str, Any]], value: Any) -> list[tuple[float, float]]:
    """(t, per-second rate of `value(row)` over about RATE_WINDOW_S) on the rows of `grid`."""
    points: list[tuple[float, float]] = []
    earlier = 0
    for index in range(1, len(grid)):
        t = grid[index]["t"]
        while earlier < index - 1 and t - grid[earlier + 1]["t"] >= RATE_WINDOW_S:
            earlier += 1
        t0 = grid[earlier]["t"]
        if t > t0:
            points.append((t, (value(grid[index]) - value(grid[earlier])) / (t - t0)))
    return points


def _throughput(path: Path, timeline: list[dict[str, Any]], start: float, title: str) -> Path:
    fig, axes = _figure(2)
    top, bottom = axes[0][0], axes[1][0]
    grid = _grid(timeline)
    chunks = _rate(grid, lambda row: row.get("counters", {}).get("chunks", 0))
    if chunks:
        top.plot([t - start for t, _ in chunks], [v for _, v in chunks], color="tab:green")
    top.set_ylabel("chunks/s received", color="tab:green")
    top.set_ylim(bottom=0)
    users = top.twinx()
    users.plot(
        [row["t"] - start for row in timeline],
        [row.get("users", 0) for row in timeline],
        color="tab:gray",
        linestyle="--",
    )
    users.set_ylabel("users", color="tab:gray")
    users.set_ylim(bottom=0)
    top.set_title(f"{title}: throughput and users")
    top.grid(alpha=0.3)

    def turns(row: dict[str, Any]) -> int:
        return sum(v["n"] for k, v in row["entries"].items() if k.startswith("TURN "))

    def failures(row: dict[str, Any]) -> int:
        entries = row["entries"]
        return sum(v["fail"] for k, v in entries.items() if k.split(" ")[0] in FAILURE_TYPES)

    for label, series, colour in (
        ("turns/s", _rate(grid, turns), "tab:blue"),
        ("failures/s (all kinds)", _rate(grid, failures), "tab:red"),
    ):
        if series:
            bottom.plot(
                [t - start for t, _ in series], [v for _, v in series], label=label, color=colour
            )
    bottom.legend(loc="upper left")
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel("per second")
    bottom.set_xlabel("seconds since the first user started")
    bottom.grid(alpha=0.3)
    return _save(fig, path)


def _memory(path: Path, samples: list[dict[str, Any]], start: float, title: str) -> Path:
    held = sorted({label for sample in samples for label in sample.get("held", {})})
    fig, axes = _figure(2 if held else 1)
    for ax, key, scale, ylabel, heading in (
        (axes[0][0], "rss", 2**20, "MiB", "resident memory per process"),
        (
            axes[-1][0],
            "held",
            1,
            "count",
            "WebSockets open (gateways), conversations held (shards)",
        ),
    ):
        if key == "held" and not held:
            break
        labels = sorted({label for sample in samples for label in sample.get(key, {})})
        for label in labels:
            points = [
                (sample["t"] - start, sample[key][label] / scale)
                for sample in samples
                if label in sample.get(key, {})
            ]
            ax.plot(*zip(*points, strict=True), label=label, linewidth=1.4)
        if labels:
            ax.legend(loc="upper left")
        else:
            ax.text(
                0.5, 0.5, "no metrics endpoint answered", ha="center", va="center",
                transform=ax.transAxes,
            )  # fmt: skip
        ax.set_ylim(bottom=0)
        ax.set_title(f"{title}: {heading}")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("seconds since the first user started")
    return _save(fig, path)
