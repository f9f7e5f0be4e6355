"""`python -m bench`: start durachat and the baseline, measure both, print and save the results."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import pstats
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench.loadgen import ClientPool
from bench.phases import Params, Runner, machine_busy
from bench.procs import REPO_ROOT, Cleanup, loadavg
from bench.report import reference_rows, render, rows
from bench.targets import Target, remove_tree, start_baseline, start_durachat

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--conversations", type=int, default=None, help="concurrent conversations (200)")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds after a warm-up (2)")
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--words", type=int, default=40, help="words per message in the load (40)")
    parser.add_argument("--idle-connections", type=int, default=None, help="idle sockets (2000)")
    parser.add_argument(
        "--client-procs", type=int, default=2, help="load-generator processes (2; see README)"
    )
    parser.add_argument("--no-deflate", action="store_true", help="do not offer permessage-deflate")
    parser.add_argument(
        "--targets", default="durachat,baseline", help="comma-separated: durachat,baseline"
    )
    parser.add_argument(
        "--profile",
        default=os.environ.get("BENCH_PROFILE", ""),
        help="roles to run under cProfile, e.g. gateway,shard (env BENCH_PROFILE)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs, data)")
    return parser.parse_args(argv)


def make_params(args: argparse.Namespace) -> Params:
    if args.quick:
        params = Params(
            conversations=20, rounds=1, sequential=5, burst=10, idle_connections=100,
            idle_conversations=10, timeout=20.0, sequential_budget=30.0, quick=True,
        )
    else:
        params = Params()
    if args.conversations is not None:
        params.conversations = args.conversations
    if args.rounds is not None:
        params.rounds = args.rounds
    if args.idle_connections is not None:
        params.idle_connections = args.idle_connections
        params.idle_conversations = max(1, min(params.idle_conversations, args.idle_connections // 10))
    params.words = args.words
    params.client_procs = max(1, args.client_procs)
    params.deflate = not args.no_deflate
    return params


def git_commit() -> str | None:
    """The checked-out commit, read from .git without running git."""
    git = REPO_ROOT / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        pass
    return None


def source_digest() -> str:
    """SHA-256 over the project's Python sources (the working tree may differ from the commit)."""
    digest = hashlib.sha256()
    roots = [REPO_ROOT / "libs", REPO_ROOT / "services", REPO_ROOT / "bench"]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(REPO_ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def machine() -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "loadavg_at_start": loadavg(),
    }


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_target(target: Target, pool: ClientPool, params: Params) -> dict[str, Any]:
    """Every phase against one running target."""
    runner = Runner(target, pool, params)
    out: dict[str, Any] = {"processes": [vars_of(p) for p in target.procs]}
    for phase in ("warmup", "idle", "sequential", "burst", "load"):
        started = time.monotonic()
        out[phase] = getattr(runner, phase)()
        log(f"  {target.name}: {phase} done in {time.monotonic() - started:.1f}s {_brief(phase, out[phase])}")
    out["memory"] = runner.memory()
    return out


def vars_of(proc: Any) -> dict[str, Any]:
    return {"role": proc.role, "name": proc.name, "pid": proc.pid}


def _brief(phase: str, result: dict[str, Any]) -> str:
    if phase == "idle":
        return f"({result['connections']} conns, {fmt_num(result['kib_per_connection'])} KiB/conn)"
    if phase in ("sequential", "burst"):
        return f"(TTFT p50 new {fmt_num(result['cold']['p50'])} ms, 2nd {fmt_num(result['warm']['p50'])} ms)"
    if phase == "load":
        return (
            f"({result['deltas']} deltas, {fmt_num(result['chunks_per_s'])}/s, "
            f"p50 {fmt_num(result['latency_ms']['p50'])} ms, p99 {fmt_num(result['latency_ms']['p99'])} ms, "
            f"errors {result['errors']['requests_with_errors']})"
        )
    return ""


def fmt_num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def profile_summary(profile_dir: Path, limit: int = 25) -> dict[str, str]:
    """Top functions (by own time) of every profile written."""
    out = {}
    for path in sorted(profile_dir.glob("*.prof")):
        from io import StringIO

        buffer = StringIO()
        stats = pstats.Stats(str(path), stream=buffer)
        stats.sort_stats("tottime").print_stats(limit)
        out[path.stem] = buffer.getvalue()
    return out


def write_results(document: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"{stamp}.json"
    text = json.dumps(document, indent=2, default=str)
    path.write_text(text)
    (RESULTS_DIR / "latest.json").write_text(text)
    return path


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    params = make_params(args)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    profile = frozenset(r.strip() for r in args.profile.split(",") if r.strip())
    signal.signal(signal.SIGTERM, _interrupt)
    run_dir = Path(tempfile.mkdtemp(prefix="durachat-bench-"))
    profile_dir = run_dir / "profiles"
    profile_dir.mkdir()
    started = time.monotonic()
    document: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "source_sha256": source_digest(),
        "machine": machine(),
        "params": {
            **asdict(params),
            "targets": targets,
            "profile": sorted(profile),
        },
        "results": {},
        "failures": {},
    }
    cleanup = Cleanup()
    failed = False
    try:
        log(f"run directory {run_dir}; {params.client_procs} load-generator process(es)")
        pool = ClientPool(params.client_procs)
        cleanup.add("load generators", pool.close)
        for name in targets:
            busy = machine_busy()
            log(f"machine busy {busy:.0f}% of a core before {name} (other sessions, if any)")
            started_target = time.monotonic()
            log(f"starting {name} ...")
            target: Target | None = None
            try:
                if name == "durachat":
                    target = start_durachat(
                        run_dir / "durachat", cleanup, profile=profile, profile_dir=profile_dir
                    )
                elif name == "baseline":
                    target = start_baseline(
                        run_dir / "baseline", cleanup, profile=profile, profile_dir=profile_dir
                    )
                else:
                    raise ValueError(f"unknown target {name!r}")
                startup = time.monotonic() - started_target
                log(f"{name} up in {startup:.1f}s")
                result = run_target(target, pool, params)
                result["startup_s"] = round(startup, 1)
                result["machine_busy_before_pct"] = round(busy, 1)
                document["results"][name] = result
            except KeyboardInterrupt:
                raise
            except Exception:
                failed = True
                document["failures"][name] = traceback.format_exc()
                log(f"{name} failed:\n{traceback.format_exc()}")
                if target is not None and target.log_dir is not None:
                    for path in sorted(target.log_dir.glob("*.log")):
                        tail = path.read_text(errors="replace")[-2000:]
                        print(f"----- {path.name} (tail) -----\n{tail}", file=sys.stderr)
            finally:
                if target is not None and target.stop is not None:
                    target.stop()
                document["results"].setdefault(name, {})["seconds"] = round(
                    time.monotonic() - started_target, 1
                )
        pool.close()
        cleanup.remove("load generators")
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        cleanup.run()
        return 130
    finally:
        cleanup.run()
    document["machine"]["loadavg_at_end"] = loadavg()
    document["seconds"] = round(time.monotonic() - started, 1)
    document["client"] = {
        "processes": params.client_procs,
        "note": "load generator: websockets sans-I/O protocol on uvloop, "
        f"{params.client_procs} process(es), conversations split round-robin",
    }
    document["table"] = rows(document["results"], document["params"])
    document["reference"] = reference_rows(document["results"])
    if profile:
        document["profiles"] = profile_summary(profile_dir)
        for name, text in document["profiles"].items():
            print(f"\n===== cProfile {name} (top by own time) =====\n{text}")
    print()
    print(render(document["table"], document["reference"]))
    path = write_results(document)
    print(f"\nresults: {path.relative_to(REPO_ROOT)} (and bench/results/latest.json); "
          f"{document['seconds']:.0f}s total")
    if args.keep or failed:
        print(f"run directory kept: {run_dir}")
    else:
        remove_tree(run_dir)
    return 1 if failed else 0
