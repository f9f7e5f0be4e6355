"""The measurements, run against one target: idle connections, time to first chunk, load."""

from __future__ import annotations

import contextlib
import secrets
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.event_lag import EventLag
from bench.loadgen import ClientPool, Command
from bench.procs import CpuMeter, Proc, by_role, status_kib, system_cpu
from bench.stats import percentile, summary
from bench.targets import Target

PHASES = ("idle", "sequential", "burst", "load")
"""The measured phases, in the order they run (a warm-up always comes first)."""


@dataclass(slots=True)
class Params:
    """Everything the run is parameterised by (goes into the JSON)."""

    conversations: int = 200
    rounds: int = 2
    words: int = 40
    ttft_words: int = 8
    sequential: int = 30
    burst: int = 50
    idle_connections: int = 2000
    idle_conversations: int = 200
    client_procs: int = 2
    deflate: bool = True
    timeout: float = 30.0
    """Seconds to wait for one reply's terminal frame before counting it as timed out."""
    sequential_budget: float = 90.0
    connect_concurrency: int = 50
    quick: bool = False
    shards: int = 2
    """Shards of a durachat target."""
    gateways: int = 1
    """Gateways of a durachat target; clients spread their conversations over all of them."""
    phases: list[str] = field(default_factory=lambda: list(PHASES))
    """The phases to run after the warm-up (a subset of PHASES, in that order)."""
    ramp_s: float = 0.0
    """Seconds over which the load phase's conversations send their first (unmeasured)
    message, which activates them on their shards."""
    delta_interval_ms: float = 20.0
    """Milliseconds between a reply's deltas (the scripted model's and the relay's pacing)."""

    def load_timeout(self) -> float:
        """Seconds the parent waits for the load generators to finish the load phase: every
        reply of the warm-up and the measured rounds may take up to `timeout`, plus connecting
        and closing."""
        return max(600.0, (1 + self.rounds) * self.timeout + self.ramp_s + 180.0)


def reply_timeout(conversations: int, base: float = 30.0) -> float:
    """Seconds to wait for one reply under load: `base` up to 200 conversations, growing in
    proportion beyond, since a saturated cluster shares its throughput among all of them (at
    1,000 conversations and ~1,500 chunks/s a 41-chunk reply takes ~27 s)."""
    return base * max(1.0, conversations / 200)


def warmup_ramp(conversations: int) -> float:
    """The default `ramp_s`: none up to 200 conversations (all at once, as the benchmark has
    always run), then 1 s per 100 conversations, as conversations arrive over time rather than
    in one instant; the measured rounds, all conversations streaming at once, are not ramped
    (docs/benchmarks.md#scale)."""
    return 0.0 if conversations <= 200 else conversations / 100


def parse_phases(text: str) -> list[str]:
    """`--phases`: a comma-separated subset of PHASES, returned in the order they run."""
    # The warm-up always runs; naming it (`warmup,idle`) is allowed.
    wanted = {p.strip() for p in text.split(",") if p.strip()} - {"warmup"}
    unknown = wanted - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phase(s) {', '.join(sorted(unknown))}; known: {PHASES}")
    if not wanted:
        raise ValueError("no phase given")
    return [p for p in PHASES if p in wanted]


def split(names: list[str], parts: int) -> list[list[str]]:
    """Round-robin `names` over `parts` lists."""
    return [names[i::parts] for i in range(parts)]


def spread(names: list[str], ports: list[int], parts: int) -> list[tuple[list[str], list[int]]]:
    """Round-robin `names` over `parts` load generators, each conversation on the next of
    `ports` in turn (so several gateways get an equal share whatever the number of load
    generators): per generator, its names and the port of each."""
    port_of = {name: ports[i % len(ports)] for i, name in enumerate(names)}
    return [(part, [port_of[n] for n in part]) for part in split(names, parts)]


def _command(
    target: Target,
    params: Params,
    op: str,
    names: list[str],
    ports: list[int] | None = None,
    **extra: Any,
) -> Command:
    return {
        "op": op,
        "host": target.host,
        "port": target.port,
        "ports": ports,
        "agent": target.agent,
        "query": target.query,
        "names": names,
        "deflate": params.deflate,
        "timeout": params.timeout,
        "connect_concurrency": params.connect_concurrency,
        **extra,
    }


def _request_errors(requests: list[dict[str, Any]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for request in requests:
        for error in request["errors"]:
            counts[error] += 1
    return dict(counts)


def _ttft(requests: list[dict[str, Any]]) -> dict[str, Any]:
    values = [r["ttft_ms"] for r in requests if r["ttft_ms"] is not None]
    return {**summary(values), "errors": _request_errors(requests)}


def _done(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return summary([r["total_ms"] for r in requests if r["total_ms"] is not None])


class RedisStats:
    """`INFO commandstats` of the target's Redis over a window (calls and µs per command)."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def _client(self) -> Any:
        from redis import Redis

        assert self.url is not None
        return Redis.from_url(self.url, decode_responses=True, socket_timeout=5)

    def reset(self) -> None:
        """CONFIG RESETSTAT (best effort)."""
        if self.url is None:
            return
        with contextlib.suppress(Exception), self._client() as client:
            client.config_resetstat()

    def read(self) -> dict[str, Any]:
        """Calls and total µs per command since the reset, busiest first."""
        if self.url is None:
            return {}
        try:
            with self._client() as client:
                stats = client.info("commandstats")
        except Exception:
            return {}
        rows = sorted(stats.items(), key=lambda kv: -kv[1]["usec"])
        return {
            name.removeprefix("cmdstat_"): {
                "calls": v["calls"],
                "usec": v["usec"],
                "usec_per_call": v["usec_per_call"],
            }
            for name, v in rows
        }


def machine_busy(seconds: float = 2.0) -> float:
    """Percent of one core the whole machine was busy over `seconds` (before a target starts)."""
    busy0, _ = system_cpu()
    time.sleep(seconds)
    busy1, _ = system_cpu()
    return 100 * (busy1 - busy0) / seconds


class Runner:
    """Runs the phases against one target."""

    def __init__(self, target: Target, pool: ClientPool, params: Params) -> None:
        self.target = target
        self.pool = pool
        self.params = params
        self.run_id = secrets.token_hex(3)

    def names(self, kind: str, count: int) -> list[str]:
        """Fresh conversation names."""
        return [f"{kind}-{self.run_id}-{i}" for i in range(count)]

    def warmup(self) -> dict[str, Any]:
        """A few short conversations so every shard has imported and run everything once."""
        count = 4 if self.params.quick else 8
        [(names, ports)] = spread(self.names("warm", count), self.target.client_ports(), 1)
        command = _command(
            self.target,
            self.params,
            "converse",
            names,
            ports,
            warmup=0,
            rounds=2,
            chain=False,
            sync=False,
            words=5,
        )
        result = self.pool.run([command] + [None] * (self.pool.size - 1), timeout=180)[0]
        return {
            "requests": len(result["requests"]),
            "errors": _request_errors(result["requests"]),
            "connect_failures": result["connect"]["failures"],
        }

    def idle(self) -> dict[str, Any]:
        """RSS of the front process before and after opening many idle connections."""
        params = self.params
        names = self.names("idle", params.idle_conversations)
        per_name = max(1, params.idle_connections // max(1, params.idle_conversations))
        commands = [
            _command(self.target, params, "idle", part, per_name=per_name, connect_concurrency=100)
            for part in split(names, self.pool.size)
        ]
        pid = self.target.front.pid
        time.sleep(1.0)
        before = status_kib(pid).get("VmRSS", 0)
        readings: list[int] = []
        opened: list[int] = []
        started = time.monotonic()

        # A smoke run only checks that the phase works.
        settle, between = (0.5, 0.2) if params.quick else (2.0, 0.5)

        def hold(ready: list[dict[str, Any]]) -> None:
            opened.append(sum(r["open"] for r in ready))
            time.sleep(settle)
            for _ in range(3):
                readings.append(status_kib(pid).get("VmRSS", 0))
                time.sleep(between)

        results = self.pool.run_idle(commands, hold, timeout=300)
        after = int(statistics.median(readings)) if readings else 0
        count = opened[0] if opened else 0
        identity = [ms for r in results for ms in r["connect"]["identity_ms"]]
        return {
            "connections": count,
            "conversations": len(names),
            "rss_before_kib": before,
            "rss_after_kib": after,
            "rss_readings_kib": readings,
            "kib_per_connection": (after - before) / count if count else None,
            "connect_identity_ms": summary(identity),
            "connect_failures": sum(len(r["connect"]["failures"]) for r in results),
            "dropped_while_idle": sum(r["dropped_while_idle"] for r in results),
            "seconds": round(time.monotonic() - started, 1),
        }

    def sequential(self) -> dict[str, Any]:
        """One conversation at a time: a cold (new conversation) then a warm request each."""
        params = self.params
        [(names, ports)] = spread(
            self.names("seq", params.sequential), self.target.client_ports(), 1
        )
        command = _command(
            self.target,
            params,
            "sequential",
            names,
            ports,
            per_conversation=2,
            words=params.ttft_words,
            budget_s=params.sequential_budget,
        )
        cpu = CpuMeter(self.target.procs)
        cpu.start()
        result = self.pool.run([command] + [None] * (self.pool.size - 1), timeout=300)[0]
        usage = cpu.stop()
        requests = result["requests"]
        return {
            "skipped_over_budget": result["skipped_over_budget"],
            "cold": _ttft([r for r in requests if r["round"] == 0]),
            "warm": _ttft([r for r in requests if r["round"] == 1]),
            "total_ms": _done(requests),
            "connect_failures": result["connect"]["failures"],
            "cpu": usage,
            "cpu_ms_per_request": {
                name: (1000 * s / len(requests)) if s is not None and requests else None
                for name, s in usage["cpu_s"].items()  # type: ignore[attr-defined]
            },
        }

    def burst(self) -> dict[str, Any]:
        """`burst` conversations sending at the same moment: a cold round, then a warm one."""
        params = self.params
        commands: list[Command | None] = [
            _command(
                self.target,
                params,
                "converse",
                part,
                ports,
                warmup=0,
                rounds=2,
                chain=False,
                sync=True,
                words=params.ttft_words,
            )
            for part, ports in spread(
                self.names("burst", params.burst), self.target.client_ports(), self.pool.size
            )
        ]
        results = self.pool.run(commands, timeout=300)
        requests = [r for res in results for r in res["requests"]]
        return {
            "conversations": params.burst,
            "cold": _ttft([r for r in requests if r["round"] == 0]),
            "warm": _ttft([r for r in requests if r["round"] == 1]),
            # Request sent -> its reply's terminal frame received.
            "cold_done": _done([r for r in requests if r["round"] == 0]),
            "warm_done": _done([r for r in requests if r["round"] == 1]),
            "connect_failures": [f for res in results for f in res["connect"]["failures"]],
        }

    def load(self) -> dict[str, Any]:
        """The main load: every conversation streams `rounds` replies back to back."""
        params = self.params
        commands: list[Command | None] = [
            _command(
                self.target,
                params,
                "converse",
                part,
                ports,
                warmup=1,
                ramp_s=params.ramp_s,
                rounds=params.rounds,
                chain=True,
                sync=True,
                words=params.words,
            )
            for part, ports in spread(
                self.names("load", params.conversations),
                self.target.client_ports(),
                self.pool.size,
            )
        ]
        clients = [Proc("client", f"client-{i}", pid) for i, pid in enumerate(self.pool.pids)]
        meter = CpuMeter(self.target.procs + clients)
        usage: dict[str, Any] = {}
        commands_stats: dict[str, Any] = {}
        redis = RedisStats(self.target.redis_url)
        # The event feed's lag, on durachat's gateways (the baseline has no feed).
        lag = EventLag(self.target) if self.target.name.startswith("durachat") else None
        if lag is not None:
            lag.start()

        def on_mark(label: str) -> None:
            if lag is not None:
                lag.mark(label)
            if label == "measure-start":
                meter.start()
                redis.reset()
            elif label == "measure-end":
                usage.update(meter.stop())
                commands_stats.update(redis.read())

        results = self.pool.run(commands, timeout=params.load_timeout(), on_mark=on_mark)
        event_lag = lag.stop() if lag is not None else None
        requests = [r for res in results for r in res["requests"]]
        measured = [r for r in requests if r["round"] >= 0]
        warm = [r for r in requests if r["round"] < 0]
        start = min(res["window_ns"][0] for res in results)
        # The window ends with the last frame received, not when a lost reply timed out.
        end = max([r["last_ns"] for r in measured if r["last_ns"]] or [start])
        window_s = (end - start) / 1e9
        rounds_end = max(res["window_ns"][1] for res in results)
        deltas = sum(r["deltas"] for r in measured)
        latency_us = [
            v
            for res in results
            for r, values in res["latency_us"].items()
            if int(r) >= 0
            for v in values
        ]
        latency_ms = [v / 1000 for v in latency_us]
        identity = [ms for res in results for ms in res["connect"]["identity_ms"]]
        opened = [ms for res in results for ms in res["connect"]["open_ms"]]
        connect_failures = [f for res in results for f in res["connect"]["failures"]]
        errors = _request_errors(measured)
        cpu_s: dict[str, float | None] = usage.get("cpu_s", {})
        roles = by_role(cpu_s, self.target.procs + clients)
        return {
            "conversations": params.conversations,
            "rounds": params.rounds,
            "words": params.words,
            "client_processes": self.pool.size,
            "connect_ms": summary(identity),
            "handshake_ms": summary(opened),
            "ttft_ms": summary([r["ttft_ms"] for r in measured if r["ttft_ms"] is not None]),
            "warmup_ttft_ms": summary([r["ttft_ms"] for r in warm if r["ttft_ms"] is not None]),
            "latency_ms": {
                **summary(latency_ms),
                **{f"p{p}": percentile(latency_ms, p) for p in (1, 10, 25, 75, 95, 99.9)},
            },
            "deltas": deltas,
            "expected_deltas": sum(r["expected"] for r in measured),
            "window_s": window_s,
            "rounds_wall_s": (rounds_end - start) / 1e9,
            "chunks_per_s": deltas / window_s if window_s > 0 else None,
            "errors": {
                "requests_with_errors": sum(1 for r in measured if r["errors"]),
                "by_kind": errors,
                "warmup_requests_with_errors": sum(1 for r in warm if r["errors"]),
                "connect_failures": len(connect_failures),
                "connect_failure_samples": connect_failures[:5],
                "stray_frames": sum(res["stray_frames"] for res in results),
                "unstamped_deltas": sum(res["unstamped"] for res in results),
                "durachat_error_frames": sum(res["other_errors"] for res in results),
            },
            "event_lag_ms": event_lag,
            "cpu": usage,
            "redis_commands": commands_stats,
            "redis_calls_per_delta": {
                name: round(v["calls"] / deltas, 3) for name, v in commands_stats.items()
            }
            if deltas
            else {},
            "cpu_us_per_delta": {
                name: (1e6 * s / deltas) if s is not None and deltas else None
                for name, s in cpu_s.items()
            },
            "gateways": len([p for p in self.target.procs if p.role == "gateway"]),
            "shards": len([p for p in self.target.procs if p.role == "shard"]),
            "cpu_s_by_role": roles,
            "cpu_us_per_delta_by_role": {
                role: 1e6 * s / deltas if deltas else None for role, s in roles.items()
            },
        }

    def memory(self) -> dict[str, dict[str, int]]:
        """Peak and current RSS of every server process (KiB)."""
        out = {}
        for proc in self.target.procs:
            status = status_kib(proc.pid)
            out[proc.name] = {
                "VmHWM_kib": status.get("VmHWM", 0),
                "VmRSS_kib": status.get("VmRSS", 0),
            }
        return out
