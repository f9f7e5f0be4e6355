"""Recovery timings: SIGKILL the shard streaming a reply and time the rest reaching the client.

A cluster with production timing (1 gateway, 3 shards, 1 jobs worker) serves `slow` replies (50
deltas, 100 ms apart). Each kill round starts a reply, waits for its tenth chunk, finds the owner
with `GET /v1/cluster/owner` and SIGKILLs it; the client, connected through the gateway all
along, records when the first recovered chunk arrives and when the reply ends, and checks that
it got every chunk exactly once. The baseline is the same reply with no kill, measured in the
same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import websockets

from bench.procs import Cleanup
from bench.stats import summary
from bench.targets import cluster_env
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.ports import free_port
from durachat_infra.settings import ClusterTiming

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))
KILL_AT_SEQ = 10


def _request(text: str) -> dict[str, Any]:
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}
    return {
        "type": "cf_agent_use_chat_request",
        "id": uuid.uuid4().hex[:12],
        "init": {"method": "POST", "body": json.dumps({"messages": [message]})},
    }


def _owner_pid(base: str, name: str) -> int:
    url = f"{base}/v1/cluster/owner?agent={AGENT}&name={name}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return int(json.load(response)["pid"])


async def _reply(cluster: LocalCluster, *, kill: bool, timeout: float = 60.0) -> dict[str, Any]:
    """One `slow` reply, optionally with its owner killed mid-way; times in seconds."""
    base = cluster.urls[0]
    name = f"recovery-{uuid.uuid4().hex[:10]}"
    url = base.replace("http", "ws", 1) + f"/agents/{AGENT}/{name}?_pk={uuid.uuid4().hex}"
    request = _request("slow recovery bench")
    rid = request["id"]
    seqs: list[int] = []
    text: list[str] = []
    out: dict[str, Any] = {"killed": kill}
    async with websockets.connect(url, max_size=None) as ws:
        sent = time.monotonic()
        await ws.send(json.dumps(request))
        killed_at: float | None = None
        deadline = sent + timeout
        while True:
            raw = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
            frame = json.loads(raw)
            if frame.get("type") != "cf_agent_use_chat_response" or frame.get("id") != rid:
                continue
            now = time.monotonic()
            if frame.get("done"):
                out["error"] = bool(frame.get("error")) or "outcome" in frame
                out["reply_s"] = now - sent
                if killed_at is not None:
                    out["end_s"] = now - killed_at
                break
            if frame.get("error") or not frame.get("body"):
                continue
            seqs.append(int(frame["seq"]))
            chunk = json.loads(frame["body"])
            if chunk.get("type") == "text-delta":
                text.append(str(chunk["delta"]))
            if killed_at is not None and "first_s" not in out:
                out["first_s"] = now - killed_at
            if kill and killed_at is None and frame["seq"] >= KILL_AT_SEQ:
                pid = await asyncio.to_thread(_owner_pid, base, name)
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                out["pid"] = pid
    out["exact"] = seqs == list(range(len(seqs))) and "".join(text) == SLOW_TEXT
    return out


def _replace_dead(cluster: LocalCluster, pid: int) -> None:
    dead = next(p for p in cluster.processes if p.popen.pid == pid)
    dead.popen.wait(10)
    cluster.processes.remove(dead)
    cluster.spawn_shard(f"{dead.name}-r{time.time_ns() % 100_000}")
    cluster.wait_ready(60)


def run_recovery(
    var_dir: Path, cleanup: Cleanup, *, kills: int, log: Any, undisturbed: int = 2
) -> dict[str, Any]:
    """Start a cluster, measure `kills` killed replies and `undisturbed` undisturbed ones."""
    cluster = LocalCluster(
        var_dir=var_dir,
        port=free_port(),
        gateways=1,
        shards=3,
        jobs=1,
        env=cluster_env(),
        log_dir=var_dir / "logs",
    )
    cleanup.add("recovery cluster", cluster.stop)
    try:
        cluster.start(timeout=120)
        calm = [asyncio.run(_reply(cluster, kill=False)) for _ in range(undisturbed)]
        rounds = []
        for index in range(kills):
            result = asyncio.run(_reply(cluster, kill=True))
            rounds.append(result)
            log(
                f"  recovery kill {index + 1}/{kills}: first recovered chunk "
                f"{result.get('first_s', float('nan')):.2f}s, end {result.get('end_s', 0):.2f}s, "
                f"exactly once: {result['exact']}"
            )
            if index + 1 < kills:
                _replace_dead(cluster, int(result["pid"]))
    finally:
        cluster.stop()
        cleanup.remove("recovery cluster")
    timing = ClusterTiming()
    return {
        "kills": kills,
        "timing": {
            "shard_ttl_s": timing.shard_ttl,
            "lease_ttl_s": timing.lease_ttl,
            "heartbeat_interval_s": timing.heartbeat_interval,
        },
        "first_recovered_chunk_s": summary([r["first_s"] for r in rounds if "first_s" in r]),
        "end_of_reply_s": summary([r["end_s"] for r in rounds if "end_s" in r]),
        "reply_with_kill_s": summary([r["reply_s"] for r in rounds if "reply_s" in r]),
        "reply_undisturbed_s": summary([r["reply_s"] for r in calm if "reply_s" in r]),
        "exactly_once": sum(1 for r in rounds if r["exact"] and not r.get("error")),
        "rounds": rounds,
    }


def recovery_rows(result: dict[str, Any]) -> list[list[str]]:
    """Table rows: metric, value, baseline, ratio, target."""

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    first = result["first_recovered_chunk_s"]
    end = result["end_of_reply_s"]
    with_kill = result["reply_with_kill_s"]["p50"]
    without = result["reply_undisturbed_s"]["p50"]
    floor = result["timing"]["shard_ttl_s"]
    verdict = "met" if first["p50"] is not None and first["p50"] <= 3.0 else "MISSED"
    return [
        [
            "kill -> first recovered chunk p50 (s)",
            num(first["p50"]),
            f"{floor:.2f} (shard TTL)",
            num(first["p50"] / floor if first["p50"] else None),
            f"<= 3 s {verdict}",
        ],
        ["kill -> first recovered chunk p99 (s)", num(first["p99"]), "", "", ""],
        ["kill -> end of reply p50 (s)", num(end["p50"]), "", "", ""],
        ["kill -> end of reply p99 (s)", num(end["p99"]), "", "", ""],
        [
            "reply duration p50 (s), killed vs undisturbed",
            num(with_kill),
            num(without),
            num(with_kill / without if with_kill and without else None),
            "",
        ],
        [
            "replies received exactly once",
            f"{result['exactly_once']}/{result['kills']}",
            "",
            "",
            f"{result['kills']}/{result['kills']}",
        ],
    ]
