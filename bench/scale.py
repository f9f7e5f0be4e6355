"""`python -m bench.scale` (`make bench-scale`): scale-out curves and a per-core capacity model.

It runs the load phase alone (`python -m bench --phases load`) once per cluster shape, each in a
process of its own on a fresh cluster: 1, 2 and 3 shards behind 1 gateway, then 1 and 2
gateways in front of 2 shards (the shape both curves share runs once), and the bare relay once.
Each run writes its own `bench/results/<UTC timestamp>.json` (its run id); this writes them
together, with a table and the capacity model, to `bench/results/scale-<UTC timestamp>.json`.

The capacity model divides CPU, not wall-clock time: the CPU-seconds a role (every gateway,
every shard, Redis) used in the measured window over the chunks delivered in it is that role's
cost per chunk, and a core's worth of it, divided by the chunk rate of one streaming chat, is
how many chats streaming at once a core of that role carries (docs/deployment.md#sizing). On a
machine with fewer cores than processes, throughput stops growing with shards long before the
cost per chunk changes, so the wall-clock curve says where this machine saturates, not what a
shard costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.procs import REPO_ROOT
from bench.stats import fmt, render_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ROLES = ("gateway", "shard", "redis", "jobs")
"""The roles of a durachat cluster, as the capacity model reports them."""


def int_list(text: str) -> list[int]:
    """`1,2,3` -> [1, 2, 3] (each at least 1, duplicates dropped, in the order given)."""
    values: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        value = int(part)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
        if value not in values:
            values.append(value)
    if not values:
        raise argparse.ArgumentTypeError("no value given")
    return values


def shapes(shards: list[int], gateways: list[int], curve_shards: int) -> list[tuple[int, int]]:
    """The cluster shapes to measure, as (gateways, shards): every shard count behind one
    gateway, then every gateway count in front of `curve_shards` shards, each shape once."""
    out: list[tuple[int, int]] = []
    for shape in [(1, n) for n in shards] + [(g, curve_shards) for g in gateways]:
        if shape not in out:
            out.append(shape)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument(
        "--conversations", type=int, default=200, help="conversations streaming at once (200)"
    )
    parser.add_argument("--client-procs", type=int, default=2, help="load-generator processes (2)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (3)")
    parser.add_argument("--words", type=int, default=40, help="words per message (40)")
    parser.add_argument(
        "--shards", type=int_list, default=[1, 2, 3], help="the shard curve, 1 gateway (1,2,3)"
    )
    parser.add_argument("--gateways", type=int_list, default=[1, 2], help="the gateway curve (1,2)")
    parser.add_argument(
        "--curve-shards", type=int, default=2, help="shards behind the gateway curve (2)"
    )
    parser.add_argument(
        "--chunk-rate",
        type=float,
        default=25.0,
        help="chunks/s of one streaming chat, for the capacity model (25)",
    )
    parser.add_argument(
        "--ramp",
        type=float,
        default=None,
        help="seconds over which the conversations send their first, unmeasured message "
        "(python -m bench's default: 1 s per 100 conversations past 200)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the relay run")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f"[bench.scale {time.strftime('%H:%M:%S')}] {message}", flush=True)


def bench_args(args: argparse.Namespace, target: str, gateways: int, shards: int) -> list[str]:
    """The `python -m bench` arguments of one run."""
    ramp = [] if args.ramp is None else ["--ramp", str(args.ramp)]
    return [
        *ramp,
        "--targets",
        target,
        "--phases",
        "load",
        "--conversations",
        str(args.conversations),
        "--client-procs",
        str(args.client_procs),
        "--rounds",
        str(args.rounds),
        "--words",
        str(args.words),
        "--shards",
        str(shards),
        "--gateways",
        str(gateways),
    ]


def run_one(args: argparse.Namespace, target: str, gateways: int, shards: int) -> dict[str, Any]:
    """One `python -m bench` run; its document, run id and exit code."""
    with tempfile.TemporaryDirectory(prefix="durachat-bench-scale-") as out:
        command = [sys.executable, "-m", "bench", *bench_args(args, target, gateways, shards)]
        done = subprocess.run([*command, "--results-dir", out], cwd=REPO_ROOT, check=False)
        written = sorted(p for p in Path(out).glob("*.json") if p.name != "latest.json")
        if not written:
            return {"run_id": None, "exit_code": done.returncode, "document": None}
        path = written[-1]
        args.results_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, args.results_dir / path.name)
        document: dict[str, Any] = json.loads(path.read_text())
    return {"run_id": path.stem, "exit_code": done.returncode, "document": document}


def summarise(document: dict[str, Any], target: str) -> dict[str, Any]:
    """The load phase's figures of one run (what the table and the model read)."""
    result = document.get("results", {}).get(target, {})
    load = result.get("load") or {}
    cpu = load.get("cpu") or {}
    errors = load.get("errors") or {}
    wall = cpu.get("wall_s") or 0.0
    latency = load.get("latency_ms") or {}
    return {
        "chunks_per_s": load.get("chunks_per_s"),
        "deltas": load.get("deltas"),
        "expected_deltas": load.get("expected_deltas"),
        "window_s": load.get("window_s"),
        "delivery_ms": {"p50": latency.get("p50"), "p99": latency.get("p99")},
        "ttft_ms": {k: (load.get("ttft_ms") or {}).get(k) for k in ("p50", "p99")},
        "connect_ms": {k: (load.get("connect_ms") or {}).get(k) for k in ("p50", "p99")},
        "requests_with_errors": errors.get("requests_with_errors"),
        "errors_by_kind": errors.get("by_kind"),
        "connect_failures": errors.get("connect_failures"),
        "cpu_s_by_role": load.get("cpu_s_by_role") or {},
        "cpu_us_per_delta_by_role": load.get("cpu_us_per_delta_by_role") or {},
        "cpu_wall_s": wall or None,
        "machine_busy_before_pct": result.get("machine_busy_before_pct"),
        "other_cpu_pct": 100 * cpu["other_cpu_s"] / wall if wall else None,
        "failed": bool(document.get("failures")),
    }


def delivered_share(summary: dict[str, Any]) -> float:
    """The share of the expected chunks a run delivered (0 when it expected none)."""
    expected = summary.get("expected_deltas") or 0
    return (summary.get("deltas") or 0) / expected if expected else 0.0


def capacity(
    runs: list[dict[str, Any]], chunk_rate: float, min_delivered: float = 0.95
) -> dict[str, Any]:
    """Concurrent streaming chats per core, per role: the median over the durachat runs of
    the role's CPU µs per delivered chunk, turned into chunks per core-second and divided by
    `chunk_rate` (the chunks/s of one streaming chat). Runs that delivered less than
    `min_delivered` of their chunks are left out: their CPU went to failing requests and
    retries, not to chunks."""
    per_role: dict[str, Any] = {}
    durachat = [r for r in runs if r["target"] == "durachat"]
    measured = [r for r in durachat if delivered_share(r["summary"]) >= min_delivered]
    left_out = [r["run_id"] for r in durachat if r not in measured]
    for role in (*ROLES, "servers"):
        costs = []
        for run in measured:
            by_role = run["summary"]["cpu_us_per_delta_by_role"]
            if role == "servers":
                values = [by_role.get(r) for r in ROLES]
                cost = sum(v for v in values if v is not None) if any(values) else None
            else:
                cost = by_role.get(role)
            if cost:
                costs.append(cost)
        if not costs:
            continue
        median = statistics.median(costs)
        per_role[role] = {
            "cpu_us_per_chunk": {"median": median, "min": min(costs), "max": max(costs)},
            "chunks_per_core_s": 1e6 / median,
            "chats_per_core": 1e6 / median / chunk_rate,
            "runs": len(costs),
        }
    return {
        "chunk_rate": chunk_rate,
        "note": "CPU-seconds of a role in the measured window / chunks delivered in it, "
        "median over the durachat runs; chats per core = 1e6 / (µs per chunk) / chunk rate",
        "min_delivered": min_delivered,
        "left_out": left_out,
        "roles": per_role,
    }


def table_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    """One row per run: throughput, delivery, errors, the machine's other load."""
    out = []
    for run in runs:
        s = run["summary"]
        shape = (
            "relay" if run["target"] == "baseline" else f"{run['gateways']}gw x {run['shards']}sh"
        )
        out.append(
            [
                shape,
                fmt(s["chunks_per_s"]),
                fmt(s["delivery_ms"]["p50"]),
                fmt(s["delivery_ms"]["p99"]),
                fmt(s["ttft_ms"]["p50"]),
                "-" if s["requests_with_errors"] is None else str(s["requests_with_errors"]),
                fmt(s["machine_busy_before_pct"], digits=0),
                fmt(s["other_cpu_pct"], digits=0),
                run["run_id"] or "-",
            ]
        )
    return out


TABLE_HEADER = [
    "shape",
    "chunks/s",
    "delivery p50 ms",
    "p99 ms",
    "TTFT p50 ms",
    "errors",
    "busy before %",
    "other CPU %",
    "run",
]


def cpu_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    """One row per run: CPU µs per delivered chunk and CPU-seconds in the window, per role."""
    out = []
    for run in runs:
        s = run["summary"]
        roles = ("relay", "producer", "redis") if run["target"] == "baseline" else ROLES
        shape = (
            "relay" if run["target"] == "baseline" else f"{run['gateways']}gw x {run['shards']}sh"
        )
        per = s["cpu_us_per_delta_by_role"]
        seconds = s["cpu_s_by_role"]
        out.append(
            [
                shape,
                " / ".join(f"{r} {fmt(per.get(r), digits=0)}" for r in roles),
                " / ".join(f"{r} {fmt(seconds.get(r), digits=1)}" for r in roles),
                fmt(s["cpu_wall_s"], digits=1),
            ]
        )
    return out


CPU_HEADER = ["shape", "CPU us per chunk", "CPU-s in the window", "window s"]


def capacity_rows(model: dict[str, Any]) -> list[list[str]]:
    """The model as table rows."""
    return [
        [
            role,
            fmt(v["cpu_us_per_chunk"]["median"], digits=0),
            f"{fmt(v['cpu_us_per_chunk']['min'], digits=0)}-"
            f"{fmt(v['cpu_us_per_chunk']['max'], digits=0)}",
            fmt(v["chunks_per_core_s"], digits=0),
            fmt(v["chats_per_core"], digits=0),
        ]
        for role, v in model["roles"].items()
    ]


CAPACITY_HEADER = ["role", "CPU us/chunk (median)", "range", "chunks/s per core", "chats/core"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan: list[tuple[str, int, int]] = [] if args.no_baseline else [("baseline", 1, 1)]
    plan += [("durachat", g, s) for g, s in shapes(args.shards, args.gateways, args.curve_shards)]
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    for target, gateways, shards in plan:
        what = "the relay" if target == "baseline" else f"{gateways} gateway(s), {shards} shard(s)"
        log(f"load phase at {args.conversations} conversations: {what} ...")
        one = run_one(args, target, gateways, shards)
        document = one["document"] or {}
        summary = summarise(document, target)
        runs.append(
            {
                "target": target,
                "gateways": gateways,
                "shards": shards,
                "run_id": one["run_id"],
                "exit_code": one["exit_code"],
                "summary": summary,
                "load": document.get("results", {}).get(target, {}).get("load"),
                "memory": document.get("results", {}).get(target, {}).get("memory"),
                "git_commit": document.get("git_commit"),
                "failures": document.get("failures"),
            }
        )
        log(
            f"  {what}: run {one['run_id']} exit {one['exit_code']}, "
            f"{fmt(summary['chunks_per_s'])} chunks/s, delivery p50 "
            f"{fmt(summary['delivery_ms']['p50'])} ms, errors {summary['requests_with_errors']}"
        )
    model = capacity(runs, args.chunk_rate)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    document = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": runs,
        "table": {"header": TABLE_HEADER, "rows": table_rows(runs)},
        "cpu_table": {"header": CPU_HEADER, "rows": cpu_rows(runs)},
        "capacity": model,
        "seconds": round(time.monotonic() - started, 1),
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"scale-{stamp}.json"
    path.write_text(json.dumps(document, indent=2, default=str))
    print()
    print(render_table(TABLE_HEADER, document["table"]["rows"]))
    print()
    print(render_table(CPU_HEADER, document["cpu_table"]["rows"]))
    print()
    print(f"capacity model, {args.chunk_rate:g} chunks/s per streaming chat:")
    if model["left_out"]:
        print(
            f"(left out, under {model['min_delivered']:.0%} of their chunks delivered: "
            f"{', '.join(str(r) for r in model['left_out'])})"
        )
    if model["roles"]:
        print(render_table(CAPACITY_HEADER, capacity_rows(model)))
    else:
        print("no run delivered enough of its chunks to measure what a chunk costs")
    print(f"\nresults: {path}; {document['seconds']:.0f}s total")
    return 1 if any(r["exit_code"] != 0 for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
