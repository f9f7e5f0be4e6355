"""`durachat load`: load-test a chat server with Locust and write a report (docs/load-testing.md).

durachat load run --url URL --users 1000 --spawn-rate 50 --duration 5m --scenario chat,resume
durachat load soak --url URL --users 200 --duration 10m      constant load, memory over time
durachat load report DIR [--max-ttfc-p99 2s ...]               rebuild a report, check SLOs
durachat load worker --master-host HOST                        a worker for a distributed run
durachat load locustfile                                       print the path of our locustfile
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, NoReturn

from durachat.loadtest.memory import MemorySampler
from durachat.loadtest.report import RUN_INFO, Slo, build_summary, write_summary
from durachat.loadtest.runner import LOCUSTFILE, RunPlan, locust_base, run_locust
from durachat.loadtest.units import format_duration, parse_duration, parse_fraction

SCENARIOS: Final = {
    "chat": "ChatUser",
    "long": "LongReplyUser",
    "resume": "ResumeUser",
    "tools": "ToolUser",
    "branches": "BranchUser",
    "idle": "IdleTabUser",
    "tabs": "SecondTabUser",
    "events": "EventFeedUser",
}
"""`--scenario` names and the user classes of `durachat.loadtest.users` they run."""

EXIT_SLO: Final = 1
EXIT_FAILED: Final = 2
EXIT_INTERRUPTED: Final = 130
PASSED_THROUGH: Final = (
    "agent",
    "api_key",
    "messages",
    "words",
    "think",
    "long_prompt",
    "reply_timeout",
    "idle_hold",
    "reconnect_delay",
)
"""Options handed to the Locust users as `--durachat-<name>`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run `durachat load` with `argv` (the arguments after `load`); returns the exit status:
    0, 1 when an SLO failed, 2 when the run did not work, 130 when interrupted."""
    args = parser().parse_args(argv)
    try:
        if args.command == "locustfile":
            print(LOCUSTFILE)
            return 0
        if args.command == "report":
            return _report(Path(args.dir), _slos(args), quiet=False)
        if not _have_locust():
            return EXIT_FAILED
        if args.command == "worker":
            return _worker(args)
        return _run(args, soak=args.command == "soak")
    except ValueError as exc:
        print(f"durachat load: {exc}", file=sys.stderr)
        return EXIT_FAILED


def parser() -> argparse.ArgumentParser:
    """The `durachat load` command line."""
    top = argparse.ArgumentParser(
        prog="durachat load",
        description="Load-test a chat server (Locust) and write a report folder.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    slo = argparse.ArgumentParser(add_help=False)
    group = slo.add_argument_group("objectives (a miss makes the command exit 1)")
    group.add_argument("--max-ttfc-p99", metavar="DURATION", help="e.g. 2s")
    group.add_argument("--max-delivery-p99", metavar="DURATION", help="e.g. 250ms")
    group.add_argument("--max-error-rate", metavar="RATE", help="e.g. 0.1%%")
    for name, help_text, duration in (
        ("run", "run a load test", "1m"),
        ("soak", "constant load for a long time, with memory over time", "10m"),
    ):
        command = commands.add_parser(name, parents=[slo], help=help_text, description=help_text)
        _run_options(command, duration, soak=name == "soak")
    report = commands.add_parser(
        "report", parents=[slo], help="rebuild the summary and plots of a run folder"
    )
    report.add_argument("dir", metavar="DIR", help="the run's folder (--out of the run)")
    worker = commands.add_parser("worker", help="run a Locust worker for a distributed run")
    worker.add_argument("--master-host", required=True, help="where `durachat load run` runs")
    worker.add_argument("--master-port", type=int, default=5557, help="(default: %(default)s)")
    worker.add_argument("--processes", type=int, default=1, help="worker processes to fork")
    worker.add_argument("--locustfile", default=LOCUSTFILE, help="(default: ours)")
    commands.add_parser("locustfile", help="print the path of durachat's locustfile")
    return top


def _run_options(command: argparse.ArgumentParser, duration: str, *, soak: bool) -> None:
    add = command.add_argument
    add(
        "--url",
        default=os.environ.get("DURACHAT_URL", "http://127.0.0.1:8080"),
        help="the server's base URL (default: $DURACHAT_URL or %(default)s)",
    )
    add("--users", type=int, default=10, help="simulated users (default: %(default)s)")
    add(
        "--spawn-rate",
        type=float,
        default=None,
        help="users started per second (default: 10; soak: all within 10 s)",
    )
    add("--duration", default=duration, help="how long, e.g. 90s, 5m (default: %(default)s)")
    add(
        "--scenario",
        default="chat",
        help=f"behaviours and weights, e.g. chat:3,resume:1; of {', '.join(SCENARIOS)} "
        "(default: %(default)s)",
    )
    add(
        "--workers",
        type=int,
        default=0,
        help="local Locust worker processes (default: 0, one process does all)",
    )
    add(
        "--remote-workers",
        type=int,
        default=0,
        help="workers on other machines to wait for (durachat load worker)",
    )
    add(
        "--master-bind-host",
        default="127.0.0.1",
        help="where the master listens for workers (0.0.0.0 for remote workers)",
    )
    add("--master-port", type=int, default=0, help="the master's port (default: a free one)")
    add("--out", default=None, help="report folder (default: loadtest-results/<UTC time>)")
    add("--agent", default="chat-agent", help="agent to load (default: %(default)s)")
    add(
        "--api-key",
        default=os.environ.get("DURACHAT_API_KEY"),
        help="tenant API key: a token per conversation (default: $DURACHAT_API_KEY)",
    )
    add("--messages", type=int, default=3, help="messages per conversation (default: 3)")
    add("--words", type=int, default=8, help="words per message (default: 8)")
    add("--think", default=None, help="think time, seconds 'MIN-MAX' (default: 1-3)")
    add("--long-prompt", default="slow", help="message asking for a long reply (default: slow)")
    add("--reply-timeout", default="60", help="seconds a reply may take (default: 60)")
    add("--idle-hold", default=None, help="idle tabs stay 'MIN-MAX' s (default: 30-60)")
    add("--reconnect-delay", default=None, help="resume reconnects after 'MIN-MAX' s")
    add("--locustfile", default=LOCUSTFILE, help="your own locustfile (default: ours)")
    add(
        "--memory",
        action="store_true",
        default=soak,
        help="sample memory from /metrics" + (" (on for soak)" if soak else ""),
    )
    add(
        "--metrics-url",
        action="append",
        default=[],
        metavar="[LABEL=]URL",
        help="a Prometheus endpoint (repeat; default: the gateway and its shards)",
    )
    add("--memory-interval", default="5s", help="time between memory samples (default: 5s)")
    add("locust_args", nargs="*", metavar="-- LOCUST_ARG", help="more Locust options")


def _have_locust() -> bool:
    if importlib.util.find_spec("locust") is None:
        print(
            "durachat load needs Locust and matplotlib: pip install 'durachat[load]'",
            file=sys.stderr,
        )
        return False
    return True


def scenario_classes(text: str) -> tuple[list[str], dict[str, int]]:
    """`"chat:3,resume"` → (["ChatUser", "ResumeUser"], {"ChatUser": 3, "ResumeUser": 1});
    user class names are accepted as they are."""
    classes: list[str] = []
    weights: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, weight = item.partition(":")
        user_class = SCENARIOS.get(name.strip(), name.strip())
        if not user_class[:1].isupper():
            raise ValueError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        classes.append(user_class)
        weights[user_class] = int(weight) if weight else 1
    if not classes:
        raise ValueError("--scenario names no behaviour")
    return classes, weights


def _slos(args: argparse.Namespace) -> list[Slo]:
    slos: list[Slo] = []
    if args.max_ttfc_p99:
        limit = parse_duration(args.max_ttfc_p99) * 1000
        slos.append(Slo("ttfc p99", "latency_ms.ttfc.p99", limit, "ms"))
    if args.max_delivery_p99:
        limit = parse_duration(args.max_delivery_p99) * 1000
        slos.append(Slo("delivery p99", "latency_ms.delivery.p99", limit, "ms"))
    if args.max_error_rate:
        slos.append(Slo("error rate", "totals.error_rate", parse_fraction(args.max_error_rate), ""))
    return slos


def _plan(args: argparse.Namespace, soak: bool) -> RunPlan:
    duration = parse_duration(args.duration)
    classes, weights = scenario_classes(args.scenario)
    if args.users < 1 or duration <= 0:
        raise ValueError("--users and --duration must be positive")
    spawn_rate = args.spawn_rate or (max(1.0, args.users / 10) if soak else 10.0)
    out = Path(args.out or Path("loadtest-results") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
    options = ["--durachat-weights", ",".join(f"{k}={v}" for k, v in weights.items())]
    options += ["--durachat-run-id", out.name[-12:].replace(".", "-") or "run"]
    for name in PASSED_THROUGH:
        value = getattr(args, name)
        if value is not None:
            options += [f"--durachat-{name.replace('_', '-')}", str(value)]
    return RunPlan(
        url=args.url,
        users=args.users,
        spawn_rate=spawn_rate,
        duration_s=duration,
        out=out,
        user_classes=classes,
        durachat_options=options,
        workers=max(0, args.workers),
        remote_workers=max(0, args.remote_workers),
        master_bind_host=args.master_bind_host,
        master_port=args.master_port,
        locustfile=args.locustfile,
        extra_args=list(args.locust_args),
    )


def _run(args: argparse.Namespace, *, soak: bool) -> int:
    slos = _slos(args)
    plan = _plan(args, soak)
    if plan.out.exists() and any(plan.out.iterdir()):
        raise ValueError(f"{plan.out} is not empty: choose another --out")
    plan.out.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {
        "mode": "soak" if soak else "run",
        "url": plan.url,
        "users": plan.users,
        "spawn_rate": plan.spawn_rate,
        "duration_s": plan.duration_s,
        "scenario": args.scenario,
        "user_classes": plan.user_classes,
        "agent": args.agent,
        "workers": plan.workers,
        "remote_workers": plan.remote_workers,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # The machine may be shared: what else ran is part of the result.
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (plan.out / RUN_INFO).write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"durachat load {info['mode']}: {plan.users} users ({args.scenario}) on {plan.url} "
        f"for {format_duration(plan.duration_s)}"
        + (f", {plan.workers} workers" if plan.workers else "")
        + f"; report in {plan.out}",
        file=sys.stderr,
    )
    sampler = None
    if args.memory:
        sampler = MemorySampler(
            plan.url,
            plan.out,
            targets=args.metrics_url,
            interval=parse_duration(args.memory_interval),
        )
        sampler.start()
    try:
        code = run_locust(plan, progress=sys.stderr)
    finally:
        if sampler is not None:
            sampler.stop()
    info["ended_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    info["locust_exit_code"] = code
    info["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    (plan.out / RUN_INFO).write_text(json.dumps(info, indent=2) + "\n")
    status = _report(plan.out, slos, quiet=False)
    return EXIT_INTERRUPTED if code == EXIT_INTERRUPTED else status


def _report(out: Path, slos: list[Slo], *, quiet: bool) -> int:
    if not out.is_dir():
        raise ValueError(f"no such run folder: {out}")
    summary = build_summary(out, slos)
    write_summary(out, summary)
    from durachat.loadtest.plots import write_plots

    started = time.monotonic()
    plots = write_plots(out, summary.get("run", {}).get("mode", "run"))
    if not quiet:
        print_summary(summary, out, plots, time.monotonic() - started)
    if not summary["entries"]:
        print("durachat load: the run recorded nothing (see locust-master.log)", file=sys.stderr)
        return EXIT_FAILED
    return 0 if summary["passed"] else EXIT_SLO


def print_summary(summary: dict[str, Any], out: Path, plots: list[Path], took: float) -> None:
    """A few lines about the run, on stdout."""
    totals = summary["totals"]
    rate = totals["error_rate"]
    lines = [
        f"report: {out}  ({', '.join(p.name for p in plots)})",
        f"  {totals['turns']} turns, {totals['requests']} requests, {totals['failures']} failed"
        + (f" (error rate {rate:.3%})" if rate is not None else "")
        + f"; {totals['chunks']:,} chunks"
        + (f" ({totals['chunks_per_s']:,.0f}/s)" if totals["chunks_per_s"] else "")
        + f"; peak users {totals['peak_users']}",
    ]
    latency = summary["latency_ms"]
    parts = [
        f"{name} p50 {values['p50']:.0f} / p99 {values['p99']:.0f} ms"
        for name, values in latency.items()
        if values.get("p50") is not None and values.get("p99") is not None
    ]
    if parts:
        lines.append("  " + "; ".join(parts))
    if summary["errors_by_code"]:
        lines.append(
            "  errors: " + ", ".join(f"{k} {v}" for k, v in summary["errors_by_code"].items())
        )
    for label, memory in summary.get("memory", {}).items():
        lines.append(
            f"  memory {label}: {memory['first_mib']} → {memory['last_mib']} MiB "
            f"(peak {memory['peak_mib']}, {memory['growth_mib']:+} MiB)"
        )
    for result in summary["slos"]:
        value = result["value"]
        shown = (
            "no samples"
            if value is None
            else (f"{value:.3%}" if result["unit"] == "" else f"{value:.0f} {result['unit']}")
        )
        limit = f"{result['limit']:.3%}" if result["unit"] == "" else f"{result['limit']:.0f} ms"
        verdict = "ok" if result["passed"] else "MISSED"
        lines.append(f"  SLO {result['name']} <= {limit}: {shown} {verdict}")
    print("\n".join(lines), flush=True)


def _worker(args: argparse.Namespace) -> NoReturn:
    command = [
        *locust_base(args.locustfile),
        "--worker",
        "--master-host",
        args.master_host,
        "--master-port",
        str(args.master_port),
    ]
    if args.processes > 1:
        command += ["--processes", str(args.processes)]
    os.execv(command[0], command)
