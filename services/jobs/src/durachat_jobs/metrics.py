"""Prometheus metrics of the jobs worker (docs/observability.md#metrics).

Every job is wrapped by `metered`: its runs, failures and durations by job name, and what it
did with the count it returns (orphaned conversations handed over, entries and rows removed by
retention).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from arq.typing import WorkerCoroutine
from prometheus_client import Counter, Histogram

RUNS = Counter("durachat_jobs_runs_total", "Job runs, by job", ["job"])
FAILURES = Counter("durachat_jobs_failures_total", "Job runs that raised, by job", ["job"])
DURATION = Histogram(
    "durachat_jobs_duration_seconds",
    "How long a job run took, by job",
    ["job"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
ORPHANS_HANDED = Counter(
    "durachat_jobs_orphans_handed_total",
    "Conversations with an orphaned turn handed to their current owner",
)
RETENTION_REMOVED = Counter(
    "durachat_jobs_retention_removed_total",
    "What retention removed: event log entries trimmed, abandoned streams closed, recovery "
    "incidents and dead shard ids deleted",
    ["what"],
)

_COUNTED: dict[str, Counter] = {"recover_orphans": ORPHANS_HANDED}
_REMOVED = {
    "trim_logs": "log_entries",
    "close_abandoned_streams": "abandoned_streams",
    "sweep_incidents": "incidents",
    "sweep_membership": "shard_ids",
}

Job = Callable[[dict[str, Any]], Coroutine[Any, Any, int]]


def metered(job: Job) -> WorkerCoroutine:
    """`job`, counted and timed under its name; the count it returns goes to its counter."""
    name = job.__name__
    runs, failures, duration = RUNS.labels(name), FAILURES.labels(name), DURATION.labels(name)
    counter: Any = _COUNTED.get(name)
    if counter is None and name in _REMOVED:
        counter = RETENTION_REMOVED.labels(_REMOVED[name])

    @functools.wraps(job)
    async def run(ctx: dict[str, Any]) -> int:
        runs.inc()
        began = time.perf_counter()
        try:
            done = await job(ctx)
        except BaseException:
            failures.inc()
            raise
        finally:
            duration.observe(time.perf_counter() - began)
        if counter is not None and done:
            counter.inc(done)
        return done

    return cast(WorkerCoroutine, run)
