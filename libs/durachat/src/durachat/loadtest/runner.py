"""Running Locust for `durachat load`: a headless master (or one local process), its worker
processes, and a progress line while it runs.

Locust runs as child processes (`python -m locust`): importing it here would monkey-patch this
process with gevent. Its distributed mode is Locust's own (`--master` / `--worker`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from durachat.loadtest.units import format_duration

LOCUSTFILE: Final = str(Path(__file__).with_name("locustfile.py"))
"""durachat's own locustfile (every user class of `durachat.loadtest.users`)."""

CSV_PREFIX: Final = "locust"
TIMELINE: Final = "timeline.jsonl"
GRACE_S: Final = 60.0
"""How long past its planned end a run may take before it is stopped."""


@dataclass
class RunPlan:
    """What `durachat load run` starts."""

    url: str
    users: int
    spawn_rate: float
    duration_s: float
    out: Path
    user_classes: list[str]
    durachat_options: list[str] = field(default_factory=list)
    workers: int = 0
    remote_workers: int = 0
    master_bind_host: str = "127.0.0.1"
    master_port: int = 0
    locustfile: str = LOCUSTFILE
    extra_args: list[str] = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        """Whether a master and workers run (rather than one local process)."""
        return self.workers + self.remote_workers > 0

    def master_command(self) -> list[str]:
        """The command line of the master (or of the single process)."""
        command = [
            *locust_base(self.locustfile),
            "--headless",
            "--host",
            self.url,
            "--users",
            str(self.users),
            "--spawn-rate",
            str(self.spawn_rate),
            "--run-time",
            f"{max(1, round(self.duration_s))}s",
            "--csv",
            str(self.out / CSV_PREFIX),
            "--csv-full-history",
            "--html",
            str(self.out / "locust.html"),
            "--only-summary",
            "--durachat-timeline",
            str(self.out / TIMELINE),
            *self.durachat_options,
        ]
        if self.distributed:
            command += [
                "--master",
                "--expect-workers",
                str(self.workers + self.remote_workers),
                "--expect-workers-max-wait",
                "120",
                "--master-bind-host",
                self.master_bind_host,
                "--master-bind-port",
                str(self.master_port),
            ]
        return [*command, *self.extra_args, *self.user_classes]

    def worker_command(self) -> list[str]:
        """The command line of a local worker."""
        return [
            *locust_base(self.locustfile),
            "--worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(self.master_port),
            *self.durachat_options,
        ]


def locust_base(locustfile: str) -> list[str]:
    """`python -m locust -f <locustfile>` with this interpreter."""
    return [sys.executable, "-m", "locust", "-f", locustfile]


def free_port() -> int:
    """A TCP port free on this machine right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_locust(
    plan: RunPlan,
    *,
    progress: IO[str],
    on_tick: Callable[[], None] | None = None,
) -> int:
    """Start Locust for `plan`, show progress on `progress` until it ends, stop the workers.

    Returns:
        Locust's exit code (1 when any request failed; `durachat load` judges by its SLOs),
        or 130 when interrupted.
    """
    plan.out.mkdir(parents=True, exist_ok=True)
    if plan.distributed and not plan.master_port:
        plan.master_port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(plan.out / "locust-master.log", "wb") as log:
        master = subprocess.Popen(
            plan.master_command(), stdout=log, stderr=subprocess.STDOUT, env=env
        )
    workers: list[subprocess.Popen[bytes]] = []
    for index in range(plan.workers):
        with open(plan.out / f"locust-worker-{index + 1}.log", "wb") as log:
            workers.append(
                subprocess.Popen(
                    plan.worker_command(), stdout=log, stderr=subprocess.STDOUT, env=env
                )
            )
    deadline = time.monotonic() + plan.duration_s + GRACE_S + (120 if plan.distributed else 0)
    display = Progress(plan, progress)
    interrupted = False
    try:
        while master.poll() is None:
            if time.monotonic() > deadline:
                progress.write("\nthe run overran its time; stopping Locust\n")
                master.send_signal(signal.SIGTERM)
                break
            display.update()
            if on_tick is not None:
                on_tick()
            with contextlib.suppress(subprocess.TimeoutExpired):
                master.wait(timeout=1.0)
    except KeyboardInterrupt:
        interrupted = True
        progress.write("\ninterrupted: stopping Locust (it writes its report) ...\n")
        master.send_signal(signal.SIGINT)
    finally:
        try:
            code = master.wait(timeout=30)
        except subprocess.TimeoutExpired:
            master.kill()
            code = master.wait()
        for worker in workers:
            _stop(worker)
        display.update(final=True)
    return 130 if interrupted else code


def _stop(process: subprocess.Popen[bytes]) -> None:
    # Workers quit when the master does; this is for the ones that did not hear it.
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Progress:
    """The progress line, read from the timeline the master writes every second."""

    def __init__(self, plan: RunPlan, out: IO[str]) -> None:
        """Show `plan`'s progress on `out` (rewritten in place on a terminal)."""
        self._plan = plan
        self._out = out
        self._tty = out.isatty()
        self._offset = 0
        self._rows: list[dict[str, Any]] = []
        self._started: float | None = None
        self._shown = 0.0

    def update(self, *, final: bool = False) -> None:
        """Read what the timeline gained and show a line (every 2 s on a terminal, every
        10 s otherwise)."""
        self._read()
        now = time.monotonic()
        if not self._rows or (not final and now - self._shown < (2 if self._tty else 10)):
            return
        self._shown = now
        line = self.line(self._rows)
        if self._tty:
            self._out.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self._out.write(line + "\n")
        self._out.flush()

    def line(self, rows: list[dict[str, Any]]) -> str:
        """One line about the run so far."""
        last = rows[-1]
        if self._started is None and last.get("users"):
            self._started = last["t"]
        elapsed = last["t"] - (self._started or last["t"])
        earlier = next((r for r in reversed(rows) if last["t"] - r["t"] >= 6), rows[0])
        span = max(last["t"] - earlier["t"], 1e-9)
        chunks = last["counters"].get("chunks", 0) - earlier["counters"].get("chunks", 0)
        entries = last["entries"]
        ttfc = entries.get("CHUNK ttfc", {})
        turns = sum(v["n"] for k, v in entries.items() if k.startswith("TURN "))
        failures = sum(v["fail"] for k, v in entries.items() if k.split(" ")[0] in FAILURE_TYPES)
        workers = f"  workers {last['workers']}" if self._plan.distributed else ""
        return (
            f"{format_duration(elapsed)}/{format_duration(self._plan.duration_s)}"
            f"  users {last['users']}/{self._plan.users}{workers}"
            f"  chunks/s {chunks / span:,.0f}"
            f"  ttfc p50 {_ms(ttfc.get('p50'))} p99 {_ms(ttfc.get('p99'))}"
            f"  turns {turns}  failures {failures}"
        )

    def _read(self) -> None:
        path = self._plan.out / TIMELINE
        try:
            with open(path, encoding="utf-8") as timeline:
                timeline.seek(self._offset)
                for line in timeline:
                    if not line.endswith("\n"):
                        break
                    self._offset += len(line.encode())
                    with contextlib.suppress(ValueError):
                        self._rows.append(json.loads(line))
        except FileNotFoundError:
            return


FAILURE_TYPES: Final = frozenset({"WS", "HTTP", "TURN", "IDLE", "ERROR"})
"""The request types whose failures count as errors (`CHUNK` and `RESUME` never fail)."""


def _ms(value: object) -> str:
    return f"{value} ms" if isinstance(value, int | float) else "n/a"
