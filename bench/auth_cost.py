"""What requiring credentials costs (docs/security.md): durachat in auth mode (`durachat-auth`:
every socket holds a client token, quotas counted in Redis) against durachat open, measured in
the same run by the same load generator: each target's full phases one after the other (for
information), then both side by side in alternating blocks (`run_paired`), which is what the
5 % budget is judged on."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from bench.loadgen import ClientPool
from bench.phases import Params, Runner
from bench.procs import Cleanup
from bench.report import Getter, _cpu, _front, _get
from bench.stats import fmt, ratio, render_table
from bench.targets import Target, start_durachat

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


def auth_rows(
    results: dict[str, Any], params: dict[str, Any], *, judged: bool = True
) -> list[dict[str, Any]]:
    """One row per metric: open, auth, their ratio and, where there is one (and `judged`), the
    verdict."""
    open_, auth = results.get("durachat", {}), results.get("durachat-auth", {})
    out = []
    for metric, get, higher_better in _rows(params):
        a, b = get(open_), get(auth)
        verdict = ""
        if judged and higher_better is not None and a and b is not None:
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


PAIRED_BLOCKS: Final = 6


def run_paired(
    run_dir: Path,
    cleanup: Cleanup,
    pool: ClientPool,
    params: Params,
    *,
    log: Callable[[str], None],
    blocks: int = PAIRED_BLOCKS,
    variant: str = "auth",
) -> dict[str, Any]:
    """Both clusters up at the same time, measured in alternating blocks (open, auth, auth,
    open, …): a shared machine's load drifts over minutes, and measuring one target after the
    other turns that drift into a difference between them. The blocks of the one-at-a-time
    phase (next-message TTFT) come first, then those of a load round of half the
    conversations (chunks/s), each on fresh conversations. `variant` is what the second
    cluster adds: `auth` (credentials) or `traced` (every turn traced and exported)."""
    small = replace(
        params,
        sequential=20,
        conversations=max(10, params.conversations // 2),
        rounds=1,
        sequential_budget=60.0,
    )
    targets: dict[str, Target] = {}
    modes = ("open", variant)
    try:
        for mode in modes:
            targets[mode] = start_durachat(
                run_dir / f"paired-{mode}",
                cleanup,
                profile=frozenset(),
                profile_dir=run_dir,
                auth=mode == "auth",
                traced=mode == "traced",
                shards=params.shards,
                gateways=params.gateways,
            )
            Runner(targets[mode], pool, small).warmup()
        ttft: dict[str, list[float | None]] = {mode: [] for mode in modes}
        rate: dict[str, list[float | None]] = {mode: [] for mode in modes}
        # All the one-at-a-time blocks first, then the load blocks: a block measured right
        # after a load round on the same cluster would pay for that round's aftermath.
        for phase, results in (("sequential", ttft), ("load", rate)):
            for block in range(blocks):
                for mode in modes if block % 2 == 0 else modes[::-1]:
                    runner = Runner(targets[mode], pool, small)
                    if phase == "sequential":
                        results[mode].append(runner.sequential()["warm"]["p50"])
                        shown = f"next-message TTFT p50 {fmt(results[mode][-1])} ms"
                    else:
                        results[mode].append(runner.load()["chunks_per_s"])
                        shown = f"{fmt(results[mode][-1])} chunks/s"
                    log(f"  paired {phase} {block + 1}/{blocks} {mode}: {shown}")
        exported = {mode: target.exported() for mode, target in targets.items()}
    finally:
        for target in targets.values():
            if target.stop is not None:
                target.stop()
    return {
        "otlp_received": exported,
        "blocks": blocks,
        "conversations": small.conversations,
        "next_message_ttft_p50_ms": ttft,
        "chunks_per_s": rate,
    }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def paired_rows(
    paired: dict[str, Any], *, variant: str = "auth", budget: float = MAX_COST
) -> list[dict[str, Any]]:
    """The paired measurement's rows: the median over its blocks, against the budget (5 %
    for auth)."""
    out = []
    for metric, name, higher_better in (
        ("paired: TTFT p50 (ms) 1-at-a-time, 2nd msg", "next_message_ttft_p50_ms", False),
        (f"paired: chunks/s @{paired['conversations']}", "chunks_per_s", True),
    ):
        a = _median(paired[name]["open"])
        b = _median(paired[name][variant])
        verdict = ""
        if a and b is not None:
            cost = (a - b) / a if higher_better else (b - a) / a
            verdict = (
                f"cost <= {100 * budget:.0f} % {'PASS' if cost <= budget else 'MISS'} "
                f"({100 * cost:+.1f} %)"
            )
        out.append({"metric": metric, "open": a, variant: b, "target": verdict})
    return out
