"""durachat_jobs.metrics: every job's runs, failures and durations, and what it counts."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from durachat_jobs.metrics import metered


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_job_is_counted_timed_and_its_count_kept() -> None:
    async def trim_logs(ctx: dict[str, Any]) -> int:
        return 7

    before = (
        _sample("durachat_jobs_runs_total", job="trim_logs"),
        _sample("durachat_jobs_duration_seconds_count", job="trim_logs"),
        _sample("durachat_jobs_retention_removed_total", what="log_entries"),
    )
    job = metered(trim_logs)
    assert job.__qualname__.endswith("trim_logs")
    assert await job({}) == 7
    assert _sample("durachat_jobs_runs_total", job="trim_logs") == before[0] + 1
    assert _sample("durachat_jobs_duration_seconds_count", job="trim_logs") == before[1] + 1
    assert _sample("durachat_jobs_retention_removed_total", what="log_entries") == before[2] + 7


async def test_a_failing_job_is_counted() -> None:
    async def recover_orphans(ctx: dict[str, Any]) -> int:
        raise ConnectionError("redis went away")

    failures = _sample("durachat_jobs_failures_total", job="recover_orphans")
    handed = _sample("durachat_jobs_orphans_handed_total")
    with pytest.raises(ConnectionError):
        await metered(recover_orphans)({})
    assert _sample("durachat_jobs_failures_total", job="recover_orphans") == failures + 1
    assert _sample("durachat_jobs_orphans_handed_total") == handed
