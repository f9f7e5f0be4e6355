"""A chaos run: shards, gateways and the jobs worker killed, a shard paused, Redis restarted,
all under chat load; nothing may be lost (tests/support/chaos.py).

`make test` runs a short version (`DURACHAT_CHAOS_SECONDS`, 20 s of faults: each kind once).
`make chaos` runs it for 10 minutes with random faults and writes its report
(`DURACHAT_CHAOS_REPORT`); docs/operations.md keeps the figures of the last long run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.chaos import FAULTS, ChaosConfig, run_chaos
from support.chaos_load import LoadConfig

SECONDS = float(os.environ.get("DURACHAT_CHAOS_SECONDS", "20"))
LONG = SECONDS > 60
REPORT = os.environ.get("DURACHAT_CHAOS_REPORT")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(int(SECONDS + 400))]


def _config() -> ChaosConfig:
    if LONG:
        kinds = os.environ.get("DURACHAT_CHAOS_FAULTS")
        return ChaosConfig(
            seconds=SECONDS,
            sequence=FAULTS,
            kinds=tuple(kinds.split(",")) if kinds else FAULTS,
            seed=int(os.environ.get("DURACHAT_CHAOS_SEED", "1")),
            load=LoadConfig(users=8, conversations_per_user=4, slow_share=0.6),
        )
    # Each kind of fault once, in a few seconds each, under a light load.
    return ChaosConfig(
        seconds=SECONDS,
        pause=(0.5, 1.5),
        sequence=FAULTS,
        settle=60,
        load=LoadConfig(users=4, conversations_per_user=2, slow_share=0.5, turn_timeout=60),
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_nothing_is_lost_under_chaos(tmp_path: Path) -> None:
    report = await run_chaos(_config(), tmp_path)
    print(report.to_json())
    if REPORT:
        _write(Path(REPORT), report.to_json() + "\n")
    assert report.turns > 0
    assert sum(report.faults.values()) >= (len(FAULTS) if not LONG else 10), report.faults
    assert report.losses == 0, report.to_json()
    assert report.duplicates == 0, report.to_json()
    assert report.unterminated == [], report.to_json()
    assert report.open_in_sql == [], report.to_json()
    assert report.mismatches == [], report.to_json()
    assert report.client_failures == [], report.to_json()
