"""Real local clusters for end-to-end tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.ports import free_port

TESTS_DIR = str(Path(__file__).resolve().parents[1])

FAST_TIMING = {
    "DURACHAT_HEARTBEAT_INTERVAL": "0.2",
    "DURACHAT_SHARD_TTL": "1.0",
    "DURACHAT_LEASE_TTL": "1.5",
    "DURACHAT_LOG_LEVEL": "INFO",
}


AGENT_MODULES = (
    "durachat.demo",
    "support.agents",
    "support.compat_agents",
    "support.recovery_agents",
    "durachat.loadtest.agent",
)
"""The agents every test cluster serves: the demo one and the test agents."""


@contextmanager
def running_cluster(
    tmp: Path,
    redis_url: str,
    *,
    gateways: int = 2,
    shards: int = 2,
    database_url: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """Start gateways, shards and a jobs worker as real processes; stop them afterwards."""
    cluster = LocalCluster(
        var_dir=tmp,
        port=free_port(),
        gateways=gateways,
        shards=shards,
        redis_url=redis_url,
        database_url=database_url,
        env={
            **FAST_TIMING,
            "DURACHAT_KEY_PREFIX": f"e{uuid.uuid4().hex[:8]}",
            "DURACHAT_AGENTS": ",".join(AGENT_MODULES),
            "PYTHONPATH": TESTS_DIR,
            **(env or {}),
        },
        log_dir=tmp / "logs",
    )
    try:
        cluster.start(timeout=90)
        yield cluster
    except BaseException:
        _dump_logs(tmp / "logs")
        raise
    finally:
        cluster.stop()


def _dump_logs(log_dir: Path) -> None:
    if not log_dir.exists():
        return
    for path in sorted(log_dir.glob("*.log")):
        print(f"----- {path.name} -----")
        print(path.read_text(errors="replace")[-4000:])
