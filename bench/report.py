"""The printed tables and the target verdicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.stats import fmt, ratio, render_table

REFERENCE_TTFT_SEQUENTIAL_MS = 8.5
"""Cloudflare reference (`AIChatAgent` on workerd, run locally on this machine, driven by the
real-client harness): one new conversation at a time, first chunk p50."""
REFERENCE_TTFT_BURST_MS = 202.0
"""The reference, 50 clients each opening a new conversation and sending at once: first chunk
p50."""
REFERENCE_DONE_BURST_MS = 645.0
"""The reference, the same burst: the reply's end p50."""

TTFT_SEQUENTIAL_LIMIT_MS = 7.0
"""Target: a new conversation's first chunk p50, one at a time."""
TTFT_BURST_LIMIT_MS = 100.0
"""Target: first chunk p50 of a burst of new conversations (half the reference's)."""
DONE_BURST_LIMIT_MS = 320.0
"""Target: the burst's replies done, p50 (half the reference's)."""
CHUNKS_RATIO_FLOOR = 0.7
"""Target: chunks/s delivered under load, at least this fraction of the relay's in the same run."""
DELIVERY_P50_MARGIN_MS = 2.0
"""Target: delivery p50 at most the relay's plus this."""
DELIVERY_P99_FACTOR = 2.0
"""Target: delivery p99 at most this times the relay's."""
SHARDS_CPU_LIMIT_US = 150.0
"""Target: the shards' CPU per delivered delta, all shards together."""
GATEWAY_CPU_LIMIT_US = 80.0
"""Target: the gateways' CPU per delivered delta, all gateways together."""

Getter = Callable[[dict[str, Any]], Any]


def _get(*path: str) -> Getter:
    def get(result: dict[str, Any]) -> Any:
        value: Any = result
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    return get


def _verdict(value: float | int | None, limit: float, *, at_least: bool = False) -> str:
    if value is None:
        return "n/a"
    ok = value >= limit if at_least else value <= limit
    return "PASS" if ok else "MISS"


def _errors(result: dict[str, Any]) -> int | None:
    errors = _get("load", "errors")(result)
    if not isinstance(errors, dict):
        return None
    return int(
        errors["requests_with_errors"]
        + errors["connect_failures"]
        + errors["durachat_error_frames"]
    )


def _mib(name_match: Callable[[str], bool]) -> Getter:
    def get(result: dict[str, Any]) -> float | None:
        memory = result.get("memory")
        if not memory:
            return None
        values = [v["VmHWM_kib"] for k, v in memory.items() if name_match(k)]
        return sum(values) / 1024 if values else None

    return get


def _cpu(name_match: Callable[[str], bool]) -> Getter:
    def get(result: dict[str, Any]) -> float | None:
        per = _get("load", "cpu_us_per_delta")(result)
        if not isinstance(per, dict):
            return None
        values = [v for k, v in per.items() if name_match(k) and v is not None]
        return sum(values) if values else None

    return get


def _seq_cpu(name_match: Callable[[str], bool]) -> Getter:
    def get(result: dict[str, Any]) -> float | None:
        per = _get("sequential", "cpu_ms_per_request")(result)
        if not isinstance(per, dict):
            return None
        values = [v for k, v in per.items() if name_match(k) and v is not None]
        return sum(values) if values else None

    return get


def _util(result: dict[str, Any]) -> float | None:
    cpu = _get("load", "cpu")(result)
    if not isinstance(cpu, dict) or not cpu.get("wall_s"):
        return None
    return 100 * float(cpu["other_cpu_s"]) / float(cpu["wall_s"])


def _front(name: str) -> bool:
    # Every gateway of a cluster (gw-1, gw-2, ...): a role's figures sum over its processes.
    return name.startswith("gw-") or name == "relay"


def model_side(name: str) -> bool:
    """Whether a process of a run produces the deltas (a shard, or the relay's producer)."""
    return name.startswith("shard") or name == "producer"


def _servers(name: str) -> bool:
    return not name.startswith("client")


Target = Callable[[float | int | None, float | int | None], str]
"""A row's verdict from durachat's value and the relay's in the same run."""


def _at_most(limit: float, unit: str = "ms") -> Target:
    return lambda v, _b: f"<= {limit:g} {unit} {_verdict(v, limit)}"


def _relative(text: str, bound: Callable[[float], float], *, at_least: bool = False) -> Target:
    """A target set against the relay's figure of the same run (n/a without it)."""

    def verdict(value: float | int | None, base: float | int | None) -> str:
        if base is None:
            return f"{text} n/a"
        return f"{text} {_verdict(value, bound(float(base)), at_least=at_least)}"

    return verdict


def rows(results: dict[str, Any], params: dict[str, Any]) -> list[dict[str, Any]]:
    """The table rows: metric, both values, ratio, target with verdict (docs/benchmarks.md)."""
    n = params["conversations"]
    burst = params["burst"]
    spec: list[tuple[str, Getter, str, Target | None]] = [
        (f"connect p50 (ms) @{n}", _get("load", "connect_ms", "p50"), "ms", None),
        (f"connect p99 (ms) @{n}", _get("load", "connect_ms", "p99"), "ms", None),
        (f"TTFT p50 (ms) @{n} under load", _get("load", "ttft_ms", "p50"), "ms", None),
        (f"TTFT p99 (ms) @{n} under load", _get("load", "ttft_ms", "p99"), "ms", None),
        (
            f"chunk delivery p50 (ms) @{n}",
            _get("load", "latency_ms", "p50"),
            "ms",
            _relative(
                f"<= relay + {DELIVERY_P50_MARGIN_MS:g} ms", lambda b: b + DELIVERY_P50_MARGIN_MS
            ),
        ),
        (
            f"chunk delivery p99 (ms) @{n}",
            _get("load", "latency_ms", "p99"),
            "ms",
            _relative(f"<= {DELIVERY_P99_FACTOR:g}x relay", lambda b: b * DELIVERY_P99_FACTOR),
        ),
        (
            "chunks/s delivered (aggregate)",
            _get("load", "chunks_per_s"),
            "",
            _relative(
                f">= {CHUNKS_RATIO_FLOOR:g}x relay",
                lambda b: b * CHUNKS_RATIO_FLOOR,
                at_least=True,
            ),
        ),
        (
            "event feed lag p50 (ms) under load",
            _get("load", "event_lag_ms", "p50"),
            "ms",
            _at_most(100.0),
        ),
        ("event feed lag p99 (ms) under load", _get("load", "event_lag_ms", "p99"), "ms", None),
        ("errors (load)", _errors, "", lambda v, _b: f"0 {_verdict(v, 0)}"),
        (
            "TTFT p50 (ms) 1-at-a-time, new conv",
            _get("sequential", "cold", "p50"),
            "ms",
            _at_most(TTFT_SEQUENTIAL_LIMIT_MS),
        ),
        ("TTFT p50 (ms) 1-at-a-time, 2nd msg", _get("sequential", "warm", "p50"), "ms", None),
        (
            f"TTFT p50 (ms) {burst} at once, new conv",
            _get("burst", "cold", "p50"),
            "ms",
            _at_most(TTFT_BURST_LIMIT_MS),
        ),
        (
            f"replies done p50 (ms) {burst} at once, new conv",
            _get("burst", "cold_done", "p50"),
            "ms",
            _at_most(DONE_BURST_LIMIT_MS),
        ),
        (f"TTFT p50 (ms) {burst} at once, 2nd msg", _get("burst", "warm", "p50"), "ms", None),
        (
            f"KiB per idle connection (gw/relay) @{params['idle_connections']}",
            _get("idle", "kib_per_connection"),
            "",
            _at_most(20.0, "KiB"),
        ),
        ("peak RSS gateway/relay (MiB)", _mib(_front), "", None),
        ("peak RSS shards/producer (MiB)", _mib(model_side), "", None),
        ("peak RSS jobs (MiB)", _mib(lambda k: k.startswith("jobs")), "", None),
        ("peak RSS redis (MiB)", _mib(lambda k: k.startswith("redis")), "", None),
        ("CPU us/delta gateway/relay", _cpu(_front), "", _at_most(GATEWAY_CPU_LIMIT_US, "us")),
        (
            "CPU us/delta shards/producer",
            _cpu(model_side),
            "",
            _at_most(SHARDS_CPU_LIMIT_US, "us"),
        ),
        ("CPU us/delta redis", _cpu(lambda k: k.startswith("redis")), "", None),
        ("CPU us/delta all servers", _cpu(_servers), "", None),
        ("CPU us/delta load generator", _cpu(lambda k: k.startswith("client")), "", None),
        ("CPU ms/request gateway/relay, 1-at-a-time", _seq_cpu(_front), "", None),
        ("CPU ms/request shards/producer, 1-at-a-time", _seq_cpu(model_side), "", None),
        ("other CPU on machine (% of a core)", _util, "", None),
    ]
    out = []
    for metric, get, unit, target in spec:
        a = get(results.get("durachat", {}))
        b = get(results.get("baseline", {}))
        out.append(
            {
                "metric": metric,
                "durachat": a,
                "baseline": b,
                "ratio": (a / b) if a is not None and b else None,
                "target": target(a, b) if target is not None else "",
                "unit": unit,
            }
        )
    return out


def reference_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """durachat's time to first chunk and replies' end against the Cloudflare reference."""
    durachat = results.get("durachat", {})
    out = []
    for metric, value, reference, limit in (
        (
            "TTFT p50 1-at-a-time, new conv (ms)",
            _get("sequential", "cold", "p50")(durachat),
            REFERENCE_TTFT_SEQUENTIAL_MS,
            TTFT_SEQUENTIAL_LIMIT_MS,
        ),
        (
            "TTFT p50 50 at once, new conv (ms)",
            _get("burst", "cold", "p50")(durachat),
            REFERENCE_TTFT_BURST_MS,
            TTFT_BURST_LIMIT_MS,
        ),
        (
            "replies done p50 50 at once, new conv (ms)",
            _get("burst", "cold_done", "p50")(durachat),
            REFERENCE_DONE_BURST_MS,
            DONE_BURST_LIMIT_MS,
        ),
    ):
        out.append(
            {
                "metric": metric,
                "durachat": value,
                "reference": reference,
                "ratio": (value / reference) if value is not None else None,
                "target": f"<= {limit:g} ms {_verdict(value, limit)}",
            }
        )
    return out


def render(table: list[dict[str, Any]], reference: list[dict[str, Any]]) -> str:
    """Both tables as text."""
    main = render_table(
        ["metric", "durachat", "baseline", "ratio", "target"],
        [
            [
                r["metric"],
                fmt(r["durachat"]),
                fmt(r["baseline"]),
                ratio(r["durachat"], r["baseline"]),
                r["target"],
            ]
            for r in table
        ],
    )
    ref = render_table(
        ["metric", "durachat", "reference", "ratio", "target"],
        [
            [
                r["metric"],
                fmt(r["durachat"]),
                fmt(r["reference"]),
                ratio(r["durachat"], r["reference"]),
                r["target"],
            ]
            for r in reference
        ],
    )
    return f"{main}\n\n{ref}"
