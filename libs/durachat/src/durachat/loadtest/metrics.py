"""The load test's metrics, recorded through Locust's event hooks.

Everything is a Locust request event, so it shows in Locust's console, web UI, CSV and HTML
report, and is gathered from the workers by the master (docs/load-testing.md#what-is-measured):

* `WS connect`: the WebSocket upgrade; `HTTP POST /v1/tokens`: minting a client token.
* `TURN <behaviour>` (`chat`, `long`, `resume`, `tool`, `approval`, ...): request sent →
  terminal frame; a failure carries a short code.
* `CHUNK ttfc`: time to first chunk (the first that is not `start` / `start-step`);
  `CHUNK gap`: between consecutive chunks of a reply; `CHUNK delivery`: server stamp → arrival.
* `RESUME gap`: drop → first chunk not seen before; `RESUME replay`: reconnect → end of replay.
* `IDLE hold`: how long an idle tab stayed connected.
* `ERROR <code>`: errors outside a reply (`durachat_error` codes), always failures.

Counts that are not times (chunks received, resumes whose stream ended while away) travel
beside Locust's own stats in the worker reports (`durachat_counters`).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from typing import Any, Final

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner, WorkerRunner

from durachat.loadtest.settings import Settings, add_arguments

log = logging.getLogger(__name__)

COUNTERS: Final[Counter[str]] = Counter()
"""This process's counts since its last report to the master."""

TOTALS: Final[Counter[str]] = Counter()
"""The run's counts, gathered by the master (or the single local process)."""

REPORT_KEY: Final = "durachat_counters"
TIMELINE_INTERVAL_S: Final = 1.0
PERCENTILES: Final = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
WINDOW_S: Final = 10.0
"""Locust's window for its current percentiles (CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW)."""

_COUNTS: Final[deque[tuple[float, dict[str, int]]]] = deque(maxlen=64)
"""Recent (time, count per entry) of the timeline, to tell an empty window from a fast one."""


class LoadError(Exception):
    """Why a request event failed; its text is a short, stable code (`timeout`,
    `error_frame`, `outcome_aborted`, `seq_gap`, `duplicate_chunk`, `missing_chunks`,
    `replay_mismatch`, `closed_1013`, `connect_failed`, `token_401`, ...)."""


class Recorder:
    """Fires the request events of one simulated user (an `Observer` of its streams)."""

    def __init__(self, environment: Environment) -> None:
        """Record into `environment`'s stats."""
        # Locust's event hooks are not annotated.
        self._request: Any = environment.events.request

    def event(self, kind: str, name: str, ms: float, failure: str | None = None) -> None:
        """Record one event (`failure`: its code, None for a success)."""
        self._request.fire(
            request_type=kind,
            name=name,
            response_time=max(ms, 0.0),
            response_length=0,
            exception=LoadError(failure) if failure is not None else None,
            context={},
        )

    def count(self, name: str, amount: int = 1) -> None:
        """Add to a counter of the run."""
        COUNTERS[name] += amount

    def error(self, code: str) -> None:
        """An error outside any reply."""
        self.event("ERROR", code, 0.0, code)

    def chunk(self) -> None:
        """See `durachat.loadtest.stream.Observer`."""
        COUNTERS["chunks"] += 1

    def first_chunk(self, ms: float) -> None:
        """See `durachat.loadtest.stream.Observer`."""
        self.event("CHUNK", "ttfc", ms)

    def chunk_gap(self, ms: float) -> None:
        """See `durachat.loadtest.stream.Observer`."""
        self.event("CHUNK", "gap", ms)

    def delivery(self, ms: float) -> None:
        """See `durachat.loadtest.stream.Observer`."""
        self.event("CHUNK", "delivery", ms)

    def resume_gap(self, ms: float) -> None:
        """See `durachat.loadtest.stream.Observer`."""
        self.event("RESUME", "gap", ms)


class TabRecorder(Recorder):
    """For a tab that watches replies another tab asked for: its chunks and their delivery
    count, its first chunks and gaps do not (they would be timed from when it first saw the
    reply, not from the request)."""

    def first_chunk(self, ms: float) -> None:
        """Not recorded."""

    def chunk_gap(self, ms: float) -> None:
        """Not recorded."""

    def resume_gap(self, ms: float) -> None:
        """Not recorded."""


def _drain() -> dict[str, int]:
    counts = dict(COUNTERS)
    COUNTERS.clear()
    return counts


def timeline_row(environment: Environment) -> dict[str, Any]:
    """The live metrics now: users, counters, and per stats entry its count, failures, current
    rate and percentiles over the last ~10 s (Locust's window)."""
    TOTALS.update(_drain())
    runner = environment.runner
    now = time.time()
    earlier = next((c for t, c in _COUNTS if now - t <= WINDOW_S), {})
    entries: dict[str, Any] = {}
    for (name, method), entry in environment.stats.entries.items():
        key = f"{method} {name}"
        row: dict[str, Any] = {
            "n": entry.num_requests,
            "fail": entry.num_failures,
            "rps": round(entry.current_rps, 2),
        }
        # Locust answers 0 for a window without samples: leave those out.
        sampled = entry.num_requests > earlier.get(key, 0)
        for label, fraction in PERCENTILES.items():
            row[label] = entry.get_current_response_time_percentile(fraction) if sampled else None
        entries[key] = row
    _COUNTS.append((now, {key: row["n"] for key, row in entries.items()}))
    return {
        "t": round(now, 3),
        "users": runner.user_count if runner is not None else 0,
        "state": runner.state if runner is not None else "",
        "workers": len(runner.clients) if isinstance(runner, MasterRunner) else 0,
        "counters": dict(TOTALS),
        "entries": entries,
    }


def _write_timeline(environment: Environment, path: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        while True:
            out.write(json.dumps(timeline_row(environment)) + "\n")
            out.flush()
            gevent.sleep(TIMELINE_INTERVAL_S)


def install(locust_events: Events) -> None:
    """Add the `--durachat-*` options and the hooks: weights, counters, the timeline."""
    events: Any = locust_events  # Locust's event hooks are not annotated.
    events.init_command_line_parser.add_listener(add_arguments)

    def on_init(environment: Environment, **_: Any) -> None:
        settings = Settings.from_options(environment.parsed_options)
        for user_class in environment.user_classes:
            if user_class.__name__ in settings.weights:
                user_class.weight = settings.weights[user_class.__name__]
        if settings.timeline and not isinstance(environment.runner, WorkerRunner):
            writer = gevent.spawn(_write_timeline, environment, settings.timeline)

            def final_row(**_: Any) -> None:
                writer.kill()
                with open(str(settings.timeline), "a", encoding="utf-8") as out:
                    out.write(json.dumps(timeline_row(environment)) + "\n")

            events.quitting.add_listener(final_row)

    def on_report_to_master(client_id: str, data: dict[str, Any]) -> None:
        data[REPORT_KEY] = _drain()

    def on_worker_report(client_id: str, data: dict[str, Any]) -> None:
        counts = data.get(REPORT_KEY)
        if isinstance(counts, dict):
            TOTALS.update({str(k): int(v) for k, v in counts.items()})

    events.init.add_listener(on_init)
    events.report_to_master.add_listener(on_report_to_master)
    events.worker_report.add_listener(on_worker_report)
