"""Processes the bench starts: /proc readings (RSS, peak RSS, CPU time) and cleanup."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Proc:
    """A process the bench watches."""

    role: str
    name: str
    pid: int


def status_kib(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (KiB) of a process; empty if it is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, in seconds (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def system_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


class CpuMeter:
    """CPU seconds used by a set of processes (and the whole machine) between start and stop."""

    def __init__(self, procs: list[Proc]) -> None:
        self.procs = procs
        self._start: dict[int, float | None] = {}
        self._sys_start = (0.0, 0.0)
        self._t0 = 0.0

    def start(self) -> None:
        """Take the first reading."""
        self._t0 = time.monotonic()
        self._sys_start = system_cpu()
        self._start = {p.pid: cpu_seconds(p.pid) for p in self.procs}

    def stop(self) -> dict[str, object]:
        """CPU seconds per process name, machine busy/total, and the wall time."""
        wall = time.monotonic() - self._t0
        busy, total = system_cpu()
        per: dict[str, float | None] = {}
        for p in self.procs:
            before, after = self._start.get(p.pid), cpu_seconds(p.pid)
            per[p.name] = None if before is None or after is None else round(after - before, 3)
        ours = sum(v for v in per.values() if v is not None)
        machine = busy - self._sys_start[0]
        return {
            "wall_s": round(wall, 3),
            "cpu_s": per,
            "ours_cpu_s": round(ours, 3),
            "machine_busy_cpu_s": round(machine, 3),
            "machine_total_cpu_s": round(total - self._sys_start[1], 3),
            "other_cpu_s": round(max(machine - ours, 0.0), 3),
        }


def by_role(per_name: dict[str, float | None], procs: list[Proc]) -> dict[str, float]:
    """CPU seconds per process name summed per role (every gateway, every shard, ...), in the
    order roles first appear in `procs`; processes gone before the reading (None) and names
    not among `procs` count for nothing."""
    out: dict[str, float] = {}
    for proc in procs:
        value = per_name.get(proc.name)
        out.setdefault(proc.role, 0.0)
        if value is not None:
            out[proc.role] = round(out[proc.role] + value, 3)
    return out


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for processes the bench starts: `bench` importable, bytecode cached.

    The environment may set PYTHONDONTWRITEBYTECODE, which makes every child recompile litellm
    (thousands of modules) at start-up; a private PYTHONPYCACHEPREFIX keeps those compiles
    between runs without writing into the virtualenv.
    """
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault(
        "PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "durachat-bench-pycache")
    )
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


def spawn(args: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child with stdout/stderr going to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [sys.executable, *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    finally:
        out.close()


def terminate(popen: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


class Cleanup:
    """Callbacks run once, last registered first, on exit, error, Ctrl-C or SIGTERM."""

    def __init__(self) -> None:
        self._callbacks: list[tuple[str, Callable[[], None]]] = []

    def add(self, name: str, callback: Callable[[], None]) -> None:
        """Register a callback."""
        self._callbacks.append((name, callback))

    def remove(self, name: str) -> None:
        """Forget a callback (its resource was released normally)."""
        self._callbacks = [(n, c) for n, c in self._callbacks if n != name]

    def run(self) -> None:
        """Run every callback; errors are printed, not raised."""
        while self._callbacks:
            name, callback = self._callbacks.pop()
            try:
                callback()
            except BaseException as exc:
                print(f"bench: cleanup of {name} failed: {exc!r}", file=sys.stderr)
