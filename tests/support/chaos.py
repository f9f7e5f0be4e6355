"""A chaos run: a local cluster under chat load while processes are killed, paused and
restarted at random; then a check that nothing was lost (docs/operations.md#chaos-runs).

`run_chaos(config, tmp, redis)` starts 2 gateways, 2 shards and a jobs worker on a Redis of its
own (with AOF), starts the users of `chaos_load`, and for `config.seconds` injects one fault at a
time, each followed by its repair and a wait until the cluster serves again:

* `kill_shard`, `kill_gateway`, `kill_jobs`: SIGKILL, then started again at once (as
  `durachat-local` or Kubernetes would);
* `stop_shard`: SIGSTOP a shard (at a moment it is not writing SQLite) for longer than its
  lease, then SIGCONT;
* `restart_redis`: stop Redis (SIGTERM; it writes its AOF) and start it again on its port.

Then the users finish their turns, and the `Report` holds what a run must show: every turn
reached a terminal frame and no turn is left open in SQL; every reply stored equals what its
client received; no chunk was lost or received twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from durachat_infra.local.cluster import LocalCluster, Process
from durachat_infra.local.redis_server import RedisServer
from support.chaos_load import LoadConfig, TurnRecord, User
from support.cluster import running_cluster
from support.faults import sql_rows, stop_between_writes

FAULTS = ("stop_shard", "kill_gateway", "kill_jobs", "restart_redis", "kill_shard")
"""Every kind of fault; in this order, a run that injects each once needs no shard restarted
before the next fault (a shard takes seconds to start)."""
SHARD_FAULTS = ("kill_shard", "stop_shard")
OPEN = ("accepted", "running")


@dataclass
class ChaosConfig:
    """A chaos run's length, pace and load."""

    seconds: float = 600.0
    """How long faults are injected."""
    pause: tuple[float, float] = (2.0, 6.0)
    """Seconds between a fault's repair and the next fault (uniform)."""
    stop_for: float = 3.0
    """How long a SIGSTOPped shard stays stopped (past its 1.5 s lease)."""
    sequence: tuple[str, ...] = ()
    """Faults to inject in this order first (then at random)."""
    kinds: tuple[str, ...] = FAULTS
    """The faults drawn at random."""
    settle: float = 90.0
    """Seconds left after the last fault for open turns to end."""
    seed: int = 0
    load: LoadConfig = field(default_factory=LoadConfig)


@dataclass
class Report:
    """What a chaos run did and found."""

    seconds: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    turns: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    recovered: int = 0
    """Turns whose client saw `cf_agent_chat_recovering`."""
    reconnects: int = 0
    resent: int = 0
    """Requests sent again (after a reconnect or a silence)."""
    reloaded: int = 0
    """Completed turns whose client lost its socket before the first chunk and read the reply
    from `get-messages` (see `TurnRecord.reloaded`); their stored reply is checked, not
    compared."""
    chunks: int = 0
    losses: int = 0
    """Chunks missing from what a client received (gaps in `seq`)."""
    duplicates: int = 0
    """Chunks a client received twice."""
    duplicated: list[str] = field(default_factory=list)
    unterminated: list[str] = field(default_factory=list)
    """Requests whose client never got a terminal frame."""
    open_in_sql: list[str] = field(default_factory=list)
    """Requests whose turn is still open in SQL at the end."""
    mismatches: list[str] = field(default_factory=list)
    """Completed requests whose stored reply differs from what the client received."""
    client_failures: list[str] = field(default_factory=list)
    unhealthy: int = 0
    """Faults after which the cluster did not serve again within a minute."""

    def clean(self) -> bool:
        """Nothing lost, duplicated, left open or stored differently."""
        return not (
            self.losses
            or self.duplicates
            or self.unterminated
            or self.open_in_sql
            or self.mismatches
            or self.client_failures
        )

    def to_json(self) -> str:
        """The report as JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)


class Faults:
    """Injects one fault at a time into a running cluster and repairs it."""

    def __init__(self, cluster: LocalCluster, redis: RedisServer, config: ChaosConfig) -> None:
        self.cluster = cluster
        self.redis = redis
        self.config = config
        self.random = random.Random(config.seed)
        self.injected: Counter[str] = Counter()
        self.unhealthy = 0

    def _running(self, role: str) -> list[Process]:
        return [p for p in self.cluster.processes if p.role == role and p.popen.poll() is None]

    async def inject(self, kind: str) -> None:
        """Inject `kind`, repair it, and wait until the cluster serves again (every gateway
        lists a shard). A shard fault first waits for every shard, so one is always left."""
        if kind in SHARD_FAULTS and not await self.serving(90, every=True):
            self.unhealthy += 1
        if kind in ("kill_shard", "kill_gateway", "kill_jobs"):
            role = kind.removeprefix("kill_")
            victim = self.random.choice(self._running(role))
            os.kill(victim.pid, signal.SIGKILL)
            await asyncio.to_thread(victim.popen.wait, 10)
            self.cluster.restart_exited()
        elif kind == "stop_shard":
            victim = self.random.choice(self._running("shard"))
            await stop_between_writes(victim, self.cluster.database_url or "")
            try:
                await asyncio.sleep(self.config.stop_for)
            finally:
                os.kill(victim.pid, signal.SIGCONT)
        elif kind == "restart_redis":
            await asyncio.to_thread(self.redis.stop)
            await asyncio.to_thread(self.redis.start)
        else:
            raise ValueError(kind)
        self.injected[kind] += 1
        if not await self.serving(60, every=False):
            self.unhealthy += 1

    async def serving(self, timeout: float, *, every: bool) -> bool:
        """Wait until every gateway answers and lists a live shard (`every`: every process
        runs and every gateway lists every shard)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.cluster.restart_exited()
            if await self._listed(every):
                return True
            await asyncio.sleep(0.2)
        return False

    async def _listed(self, every: bool) -> bool:
        running = {p.pid for p in self._running("shard")}
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                for url in self.cluster.urls:
                    shards = (await http.get(f"{url}/v1/cluster")).json()["shards"]
                    listed = {s["pid"] for s in shards} & running
                    if not listed or (every and listed != running):
                        return False
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            return False
        return True

    async def run(self, seconds: float) -> None:
        """Inject faults for `seconds` (at least the whole configured sequence, first), then
        at random."""
        end = time.monotonic() + seconds
        queue = list(self.config.sequence)
        while queue or time.monotonic() < end:
            await asyncio.sleep(self.random.uniform(*self.config.pause))
            await self.inject(queue.pop(0) if queue else self.random.choice(self.config.kinds))


async def run_chaos(config: ChaosConfig, tmp: Path) -> Report:
    """Run a whole chaos run in a cluster of its own under `tmp`."""
    redis = RedisServer(tmp / "redis", persist=True)
    redis.start()
    try:
        with running_cluster(
            tmp / "cluster",
            redis.url,
            gateways=2,
            shards=2,
            env={"DURACHAT_FORWARD_TIMEOUT": "10"},
        ) as cluster:
            return await _run(cluster, redis, config)
    finally:
        redis.stop()


async def _run(cluster: LocalCluster, redis: RedisServer, config: ChaosConfig) -> Report:
    started = time.monotonic()
    faults = Faults(cluster, redis, config)
    users = [
        User(i, config.load, lambda: cluster.urls, seed=config.seed * 1000 + i)
        for i in range(config.load.users)
    ]
    stop = asyncio.Event()
    load = [asyncio.create_task(u.run(stop)) for u in users]
    try:
        await faults.run(config.seconds)
    finally:
        stop.set()
    await faults.serving(60, every=False)
    # The users finish the turns under way (each bounded by the turn timeout).
    await asyncio.wait(load, timeout=config.settle + config.load.turn_timeout)
    for task in load:
        task.cancel()
    records = [r for u in users for r in u.records]
    report = Report(
        seconds=round(time.monotonic() - started, 1),
        faults=dict(faults.injected),
        turns=len(records),
        outcomes=dict(Counter(r.outcome for r in records)),
        recovered=sum(r.recovering for r in records),
        reconnects=sum(r.reconnects for r in records),
        resent=sum(r.resent for r in records),
        reloaded=sum(r.reloaded for r in records),
        chunks=sum(len(r.chunks) for r in records),
        losses=sum(r.lost for r in records),
        duplicates=sum(r.duplicates for r in records),
        duplicated=[d for r in records for d in r.duplicated],
        unterminated=[r.request_id for r in records if r.terminal is None],
        client_failures=[f for u in users for f in u.failures],
        unhealthy=faults.unhealthy,
    )
    await _check_sql(cluster.database_url or "", records, report, config.settle)
    return report


async def _check_sql(
    database: str, records: list[TurnRecord], report: Report, settle: float
) -> None:
    """Compare what clients received with SQL: no turn left open (once recovery had `settle`
    seconds), and every completed reply stored as received."""
    by_request = {r.request_id: r for r in records}
    deadline = time.monotonic() + settle
    while True:
        turns = await sql_rows(
            database,
            "SELECT t.request_id, t.status, t.message_id, t.conversation_id FROM turns t",
        )
        open_turns = [t.request_id for t in turns if t.status in OPEN]
        if not open_turns or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    report.open_in_sql = open_turns
    for turn in turns:
        record = by_request.get(turn.request_id)
        if record is None or record.outcome != "completed":
            continue
        stored = await _stored_text(database, turn.conversation_id, turn.message_id)
        received = stored if record.reloaded and stored else record.text
        if turn.status != "completed" or stored != received:
            report.mismatches.append(
                f"{turn.request_id} ({turn.status}): stored {stored!r} received {record.text!r}"
            )


async def _stored_text(database: str, conversation_id: int, message_id: Any) -> str | None:
    rows = await sql_rows(
        database,
        "SELECT body FROM messages WHERE conversation_id = :cid AND message_id = :mid "
        "ORDER BY seq DESC",
        cid=conversation_id,
        mid=message_id,
    )
    if not rows:
        return None
    body = json.loads(rows[0].body)
    parts = body.get("parts") or []
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
