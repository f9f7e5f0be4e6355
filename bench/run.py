"""`python -m bench`: start durachat and the baseline, measure both, print and save the results."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import pstats
import re
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from types import FrameType
from typing import Any

from bench.auth_cost import auth_rows, paired_rows, render_auth, run_paired
from bench.branches import BRANCHES_HEADER, branches_rows, run_branches
from bench.loadgen import ClientPool
from bench.model_layer import budget_rows, run_model_layer
from bench.phases import (
    PHASES,
    Params,
    Runner,
    machine_busy,
    parse_phases,
    reply_timeout,
    warmup_ramp,
)
from bench.procs import REPO_ROOT, Cleanup, loadavg
from bench.recovery import recovery_rows, run_recovery
from bench.report import reference_rows, render, rows
from bench.stats import render_table
from bench.targets import Target, remove_tree, start_baseline, start_durachat
from bench.tracing_cost import render_tracing, tracing_rows
from durachat_infra.runtime import raise_open_files_limit

RESULTS_DIR = Path(__file__).resolve().parent / "results"

DURACHAT_TARGETS: dict[str, dict[str, Any]] = {
    "durachat": {},
    "durachat-auth": {"auth": True},
    "durachat-traced": {"traced": True},
    "durachat-redis-cluster": {"redis_masters": 3},
}
"""The durachat load targets: how each one's cluster differs from the default."""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _phases(text: str) -> list[str]:
    try:
        return parse_phases(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--conversations", type=int, default=None, help="concurrent conversations (200)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="measured rounds after a warm-up (2)"
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--words", type=int, default=40, help="words per message in the load (40)")
    parser.add_argument("--idle-connections", type=int, default=None, help="idle sockets (2000)")
    parser.add_argument(
        "--client-procs", type=int, default=2, help="load-generator processes (2; see README)"
    )
    parser.add_argument("--no-deflate", action="store_true", help="do not offer permessage-deflate")
    parser.add_argument(
        "--delta-interval",
        type=float,
        default=20.0,
        help="milliseconds between a reply's deltas, for durachat's scripted model and the "
        "relay's producer alike (20: 50 deltas a second per streaming chat)",
    )
    parser.add_argument(
        "--shards", type=_positive, default=2, help="shards of the durachat targets (2)"
    )
    parser.add_argument(
        "--gateways",
        type=_positive,
        default=1,
        help="gateways of the durachat targets (1); conversations are spread over all of them",
    )
    parser.add_argument(
        "--ramp",
        type=float,
        default=None,
        help="seconds over which the load's conversations send their first, unmeasured "
        "message (0 up to 200 conversations, then 1 s per 100; 0: all at once)",
    )
    parser.add_argument(
        "--phases",
        type=_phases,
        default=list(PHASES),
        help=f"comma-separated phases to run after the warm-up ({','.join(PHASES)})",
    )
    parser.add_argument(
        "--targets",
        default="durachat,baseline,model-layer,recovery,branches",
        help="comma-separated: durachat,baseline,model-layer (the model layer's CPU alone, "
        "against the shards' budget),recovery,branches,durachat-auth (durachat in "
        "auth mode; `make bench-auth` compares it with durachat),durachat-traced (every turn "
        "traced and exported; `make bench-tracing`),durachat-redis-cluster (on an embedded "
        "Redis Cluster of three masters)",
    )
    parser.add_argument(
        "--kills", type=int, default=None, help="SIGKILLs in the recovery bench (6; quick: 2)"
    )
    parser.add_argument(
        "--profile",
        default=os.environ.get("BENCH_PROFILE", ""),
        help="roles to run under cProfile, e.g. gateway,shard (env BENCH_PROFILE)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs, data)")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS_DIR,
        help="where <UTC timestamp>.json and latest.json go (bench/results)",
    )
    return parser.parse_args(argv)


def make_params(args: argparse.Namespace) -> Params:
    if args.quick:
        params = Params(
            conversations=20,
            rounds=1,
            sequential=5,
            burst=10,
            idle_connections=100,
            idle_conversations=10,
            timeout=20.0,
            sequential_budget=30.0,
            quick=True,
        )
    else:
        params = Params()
    if args.conversations is not None:
        params.conversations = args.conversations
    if args.rounds is not None:
        params.rounds = args.rounds
    if args.idle_connections is not None:
        params.idle_connections = args.idle_connections
        params.idle_conversations = max(
            1, min(params.idle_conversations, args.idle_connections // 10)
        )
    params.words = args.words
    params.client_procs = max(1, args.client_procs)
    params.deflate = not args.no_deflate
    if args.delta_interval <= 0:
        raise SystemExit("--delta-interval must be positive")
    params.delta_interval_ms = args.delta_interval
    # A slower pacing lengthens every reply by the same amount, loaded or not.
    slower_reply_s = (params.words + 1) * max(0.0, params.delta_interval_ms - 20.0) / 1e3
    params.timeout = reply_timeout(params.conversations, params.timeout) + slower_reply_s
    params.shards = args.shards
    params.gateways = args.gateways
    params.phases = list(args.phases)
    params.ramp_s = warmup_ramp(params.conversations) if args.ramp is None else max(0.0, args.ramp)
    return params


def git_commit() -> str | None:
    """The checked-out commit, read from .git without running git (in a linked worktree,
    `.git` is a file naming the worktree's git directory, whose `commondir` holds the refs)."""
    git = REPO_ROOT / ".git"
    try:
        if git.is_file():
            git = Path(git.read_text().strip().removeprefix("gitdir: "))
        common = git
        if (git / "commondir").exists():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for base in (git, common):
            if (base / ref).exists():
                return (base / ref).read_text().strip()
        for line in (common / "packed-refs").read_text().splitlines():
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
    for phase in ("warmup", *params.phases):
        started = time.monotonic()
        out[phase] = getattr(runner, phase)()
        took = time.monotonic() - started
        log(f"  {target.name}: {phase} done in {took:.1f}s {_brief(phase, out[phase])}")
    out["memory"] = runner.memory()
    return out


def vars_of(proc: Any) -> dict[str, Any]:
    return {"role": proc.role, "name": proc.name, "pid": proc.pid}


def _brief(phase: str, result: dict[str, Any]) -> str:
    if phase == "idle":
        return f"({result['connections']} conns, {fmt_num(result['kib_per_connection'])} KiB/conn)"
    if phase in ("sequential", "burst"):
        cold, warm = fmt_num(result["cold"]["p50"]), fmt_num(result["warm"]["p50"])
        done = result.get("cold_done")
        ended = f", new conversations' replies done p50 {fmt_num(done['p50'])} ms" if done else ""
        return f"(TTFT p50 new conversation {cold} ms, 2nd message {warm} ms{ended})"
    if phase == "load":
        return (
            f"({result['deltas']} deltas, {fmt_num(result['chunks_per_s'])}/s, "
            f"delivery p50 {fmt_num(result['latency_ms']['p50'])} ms, "
            f"p99 {fmt_num(result['latency_ms']['p99'])} ms, "
            f"errors {result['errors']['requests_with_errors']}{_lag(result)})"
        )
    return ""


def _lag(result: dict[str, Any]) -> str:
    lag = result.get("event_lag_ms")
    if not lag:
        return ""
    return f", event feed lag p50 {fmt_num(lag['p50'])} ms, p99 {fmt_num(lag['p99'])} ms"


def fmt_num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _profile_group(file: str, function: str) -> str:
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1].split("/", 1)[0]
    if str(REPO_ROOT) in file:
        return "/".join(Path(file).relative_to(REPO_ROOT).parts[:4])
    if file == "~":
        return "builtin " + re.sub(r" at 0x[0-9a-f]+", "", function)[:60]
    if file.startswith("<frozen"):
        return "import machinery"
    return "stdlib " + "/".join(Path(file).parts[-2:])


def profile_summary(profile_dir: Path, limit: int = 25) -> dict[str, str]:
    """Own time grouped by package, then the top functions, of every profile written.

    cProfile counts every resumption of a coroutine as a call, and greenlet switches
    (SQLAlchemy's async layer) blur the attribution of time within SQLAlchemy and the redis
    client; read the numbers as where CPU goes, not as call counts.
    """
    out = {}
    for path in sorted(profile_dir.glob("*.prof")):
        buffer = StringIO()
        stats = pstats.Stats(str(path), stream=buffer)
        groups: Counter[str] = Counter()
        total = 0.0
        for (file, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
            groups[_profile_group(file, function)] += row[2]
            total += row[2]
        buffer.write(f"own time by package (total {total:.1f}s):\n")
        for name, seconds in groups.most_common(limit):
            buffer.write(f"  {seconds:8.2f}s {100 * seconds / max(total, 1e-9):5.1f}%  {name}\n")
        buffer.write("\n")
        stats.sort_stats("tottime").print_stats(limit)
        out[path.stem] = buffer.getvalue()
    return out


def write_results(document: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}.json"
    text = json.dumps(document, indent=2, default=str)
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path


def notes(params: Params) -> list[str]:
    """How to read the table."""
    reply_s = params.words * params.delta_interval_ms / 1e3
    ideal = params.conversations * (params.words + 1) / reply_s
    return [
        "targets apply to durachat; ratio = durachat / baseline; 'relay' targets are set "
        "against the baseline's figure in this run",
        "chunk delivery = client receive time - stamp taken when the text delta left the model "
        "(same clock); measured rounds only",
        "chunks/s = text deltas received in the measured rounds / (start of the measured rounds "
        f"-> last frame received); the model's pacing caps it near {ideal:,.0f}/s",
        "TTFT = request sent -> first text delta; 'new conv' includes activating the "
        "conversation on its shard, '2nd msg' is the next message of the same conversation; "
        "replies done = request sent -> the reply's terminal frame",
        "KiB per idle connection = gateway/relay VmRSS growth / connections (permessage-deflate "
        f"{'on' if params.deflate else 'off'}, as browsers negotiate it)",
        "CPU us/delta = utime+stime of each process over the measured rounds / text deltas "
        "delivered (includes each request's fixed costs), summed over a role's processes "
        "(both shards together)",
        "'other CPU' is what processes outside the bench used meanwhile (a shared machine "
        "makes every figure noisier)",
    ]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    params = make_params(args)
    # One descriptor per client socket (the idle phase opens thousands).
    raise_open_files_limit()
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
        if any(t.startswith("durachat") for t in targets):
            log(
                f"durachat targets: {params.gateways} gateway(s), {params.shards} shard(s); "
                f"phases warmup,{','.join(params.phases)}; reply timeout {params.timeout:.0f}s; "
                f"the load's first messages over {params.ramp_s:g}s"
            )
        load_targets = [t for t in targets if t not in ("recovery", "branches", "model-layer")]
        # The load generators serve only the load targets.
        pool = ClientPool(params.client_procs) if load_targets else None
        if pool is not None:
            cleanup.add("load generators", pool.close)
        for name in load_targets:
            assert pool is not None
            busy = machine_busy()
            log(f"machine busy {busy:.0f}% of a core before {name} (other sessions, if any)")
            started_target = time.monotonic()
            log(f"starting {name} ...")
            target: Target | None = None
            pool.reset()
            try:
                if name in DURACHAT_TARGETS:
                    target = start_durachat(
                        run_dir / name,
                        cleanup,
                        profile=profile,
                        profile_dir=profile_dir,
                        shards=params.shards,
                        gateways=params.gateways,
                        delta_interval=params.delta_interval_ms / 1e3,
                        **DURACHAT_TARGETS[name],
                    )
                elif name == "baseline":
                    target = start_baseline(
                        run_dir / "baseline",
                        cleanup,
                        profile=profile,
                        profile_dir=profile_dir,
                        delta_interval=params.delta_interval_ms / 1e3,
                    )
                else:
                    raise ValueError(f"unknown target {name!r}")
                startup = time.monotonic() - started_target
                log(f"{name} up in {startup:.1f}s")
                result = run_target(target, pool, params)
                result["startup_s"] = round(startup, 1)
                if target.otlp_endpoint is not None:
                    result["otlp_received"] = target.exported()
                    log(f"{name}: the OTLP receiver got {result['otlp_received']}")
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
        if pool is not None and {"durachat", "durachat-auth"} <= set(load_targets):
            log("auth cost: both clusters side by side, alternating blocks ...")
            pool.reset()
            try:
                document["auth_paired"] = run_paired(
                    run_dir / "paired", cleanup, pool, params, log=log
                )
            except Exception:
                failed = True
                document["failures"]["auth_paired"] = traceback.format_exc()
                log(f"auth cost failed:\n{traceback.format_exc()}")
        if pool is not None and {"durachat", "durachat-traced"} <= set(load_targets):
            log("tracing cost: both clusters side by side, alternating blocks ...")
            pool.reset()
            try:
                document["tracing_paired"] = run_paired(
                    run_dir / "paired-tracing", cleanup, pool, params, log=log, variant="traced"
                )
            except Exception:
                failed = True
                document["failures"]["tracing_paired"] = traceback.format_exc()
                log(f"tracing cost failed:\n{traceback.format_exc()}")
        if pool is not None:
            pool.close()
            cleanup.remove("load generators")
        if "recovery" in targets:
            kills = args.kills if args.kills is not None else (2 if params.quick else 6)
            log(f"recovery: {kills} SIGKILLs of the shard streaming a reply ...")
            try:
                document["recovery"] = run_recovery(
                    run_dir / "recovery",
                    cleanup,
                    kills=kills,
                    log=log,
                    undisturbed=1 if params.quick else 2,
                )
            except Exception:
                failed = True
                document["failures"]["recovery"] = traceback.format_exc()
                log(f"recovery failed:\n{traceback.format_exc()}")
        if "branches" in targets:
            log("branches: branch views of a 10,000-message conversation over 100 branches ...")
            try:
                document["branches"] = run_branches(
                    run_dir / "branches", cleanup, quick=params.quick, log=log
                )
            except Exception:
                failed = True
                document["failures"]["branches"] = traceback.format_exc()
                log(f"branches failed:\n{traceback.format_exc()}")
        if "model-layer" in targets:
            log("model layer: the load's reply through litellm, in a process of its own ...")
            try:
                document["model_layer"] = run_model_layer(
                    params.words, calls=10 if params.quick else 100
                )
            except Exception:
                failed = True
                document["failures"]["model_layer"] = traceback.format_exc()
                log(f"model layer failed:\n{traceback.format_exc()}")
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        cleanup.run()
        log(f"nothing written; logs of the run are in {run_dir}")
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
    document["notes"] = notes(params)
    print()
    if document["results"]:
        print(render(document["table"], document["reference"]))
        print()
    if document["results"].get("durachat-auth") and document["results"].get("durachat"):
        paired = document.get("auth_paired")
        document["auth_table"] = auth_rows(
            document["results"], document["params"], judged=paired is None
        ) + (paired_rows(paired) if paired else [])
        print(render_auth(document["auth_table"]))
        print()
    if document["results"].get("durachat-traced") and document["results"].get("durachat"):
        document["tracing_table"] = tracing_rows(
            document["results"], document["params"], document.get("tracing_paired")
        )
        print(render_tracing(document["tracing_table"]))
        print()
    if "recovery" in document:
        document["recovery_table"] = recovery_rows(document["recovery"])
        print(
            render_table(
                ["recovery (production timing)", "durachat", "baseline", "ratio", "target"],
                document["recovery_table"],
            )
        )
        print()
    if "branches" in document:
        document["branches_table"] = branches_rows(document["branches"])
        print(render_table(BRANCHES_HEADER, document["branches_table"]))
        print()
    if "model_layer" in document:
        document["model_layer_table"] = budget_rows(
            document["model_layer"], document["results"], document["machine"]["nproc"] or 1
        )
        print(render_table(["model layer (one process)", "value"], document["model_layer_table"]))
        print()
    if document["results"]:
        for line in document["notes"]:
            print(f"* {line}")
    path = write_results(document, args.results_dir)
    print(f"\nresults: {path} (and latest.json next to it); {document['seconds']:.0f}s total")
    if args.keep or failed or profile:
        print(f"run directory kept: {run_dir}")
    else:
        remove_tree(run_dir)
    return 1 if failed else 0
