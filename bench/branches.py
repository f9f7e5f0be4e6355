"""Branch views at size: a conversation of 10,000 messages over 100 branches.

The conversation is built directly through the store API (`create_branch`, `insert_chain`,
`set_leaf` in fenced transactions) on SQLite in the run directory, and on PostgreSQL too when
`BENCH_DATABASE_URL` is set. `main` has 100 messages; each of the 99 other branches forks from a
random earlier branch at a random message of its path (seeded, so every run builds the same
tree) and adds 100 messages of its own.

Then three reads are timed, one at a time, each over `runs` calls after a short warm-up:

* a branch's transcript: the branch with the longest path (`Store.branch_path`;
  `GET get-messages?branch=<id>` over HTTP);
* the branch list (`Store.list_branches`; `GET branches`);
* the siblings of a message: the first message of that branch's own part, which has
  alternatives on other branches, found on a path that long (`Store.siblings`;
  `GET messages/<id>/siblings?branch=<id>`).

At the store level, and through a real gateway: a local cluster (1 gateway, 1 shard, embedded
Redis) started on the same database. The baseline is the same three reads, measured in the same
run, on a 100-message conversation with only `main`. Target: p50 ≤ 20 ms each.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import delete

from bench.procs import Cleanup
from bench.stats import summary
from bench.targets import cluster_env
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.redis_server import free_port
from durachat_infra.store import MAIN_BRANCH, ConversationKey, Store, migrate
from durachat_infra.store.models import Conversation as ConversationRow

AGENT = "chat-agent"
"""An agent every local cluster serves (the gateway answers only for served agents)."""
MESSAGES_PER_BRANCH = 100
BRANCHES = 100
BASELINE_MESSAGES = 100
TARGET_P50_MS = 20.0
WARMUP = 5
SEED = 20261201
REFORK = 0.4
"""Share of branches forked at a fork point used before (more alternatives per message)."""
VIEWS = ("transcript", "branches", "siblings")

Log = Callable[[str], None]


@dataclass(slots=True)
class Built:
    """A conversation built for the bench and what to read from it."""

    key: ConversationKey
    conversation_id: int
    messages: int
    branches: int
    branch_id: int
    """The branch read: the one with the longest path."""
    path_length: int
    sibling_branch_id: int
    """The branch the siblings are read on."""
    sibling_id: str
    """A message on that branch with the most alternatives."""
    siblings: int


def _message(index: int, rng: random.Random) -> dict[str, Any]:
    role = "user" if index % 2 == 0 else "assistant"
    words = " ".join(rng.choice(_WORDS) for _ in range(40))
    message: dict[str, Any] = {
        "id": f"m{index:05d}",
        "role": role,
        "parts": [{"type": "text", "text": words}],
    }
    if role == "assistant":
        message["parts"][0]["state"] = "done"
        message["metadata"] = {"finishReason": "stop"}
    return message


_WORDS = [f"{stem}{i}" for stem in ("branch", "leaf", "path", "reply", "model") for i in range(8)]


async def build(store: Store, name: str, *, branches: int, per_branch: int) -> Built:
    """Create conversation `name` with `branches` branches of `per_branch` own messages."""
    rng = random.Random(SEED)
    key = ConversationKey("default", AGENT, name)
    conv = await store.get_or_create_conversation(key)
    epoch = 1
    await store.claim(conv.id, epoch)
    counter = 0
    paths: dict[int, list[tuple[int, str]]] = {}
    own_first: dict[int, str] = {}

    def batch() -> list[dict[str, Any]]:
        nonlocal counter
        out = [_message(counter + i, rng) for i in range(per_branch)]
        counter += per_branch
        return out

    async with store.transaction(conv.id, epoch) as tx:
        messages = batch()
        pks = await tx.insert_chain(None, messages)
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
    main = await store.get_branch(conv.id, MAIN_BRANCH)
    assert main is not None
    paths[main.id] = [(pk, m["id"]) for pk, m in zip(pks, messages, strict=True)]
    forks: list[tuple[int, int]] = []
    children: dict[int, list[int]] = {}
    for index in range(1, branches):
        if forks and rng.random() < REFORK:
            # Another alternative at an existing fork point (a regenerate, an edit).
            parent, cut = rng.choice(forks)
        else:
            parent = rng.choice(list(paths))
            # Before the leaf, so the new branch's first message has a sibling.
            cut = rng.randrange(len(paths[parent]) - 1)
            forks.append((parent, cut))
        parent_path = paths[parent]
        fork_pk, fork_id = parent_path[cut]
        async with store.transaction(conv.id, epoch) as tx:
            created = await tx.create_branch(
                f"branch-{index:03d}", from_branch=parent, fork_message_id=fork_id
            )
            messages = batch()
            pks = await tx.insert_chain(fork_pk, messages)
            await tx.set_leaf(created.name, pks[-1])
        paths[created.id] = parent_path[: cut + 1] + [
            (pk, m["id"]) for pk, m in zip(pks, messages, strict=True)
        ]
        own_first[created.id] = messages[0]["id"]
        children.setdefault(fork_pk, []).append(created.id)
    if branches == 1:
        deepest = sibling_branch = main.id
        sibling = paths[main.id][-1][1]
    else:
        deepest = max(own_first, key=lambda b: len(paths[b]))
        # The busiest fork point; of the branches forked there, the one with the longest path.
        busiest = max(children.values(), key=len)
        sibling_branch = max(busiest, key=lambda b: len(paths[b]))
        sibling = own_first[sibling_branch]
    found = await store.siblings(conv.id, sibling, sibling_branch)
    assert found is not None
    return Built(
        key=key,
        conversation_id=conv.id,
        messages=counter,
        branches=branches,
        branch_id=deepest,
        path_length=len(paths[deepest]),
        sibling_branch_id=sibling_branch,
        sibling_id=sibling,
        siblings=len(found.ids),
    )


async def _time_async(call: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    for _ in range(WARMUP):
        await call()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def measure_store(store: Store, built: Built, runs: int) -> dict[str, Any]:
    """p50/p99 (ms) of the three reads at the store level."""
    cid, branch = built.conversation_id, built.branch_id

    async def transcript() -> None:
        path = await store.branch_path(cid, branch)
        assert path is not None and len(path) == built.path_length

    async def branches() -> None:
        assert len(await store.list_branches(cid)) == built.branches

    async def siblings() -> None:
        found = await store.siblings(cid, built.sibling_id, built.sibling_branch_id)
        assert found is not None and len(found.ids) == built.siblings

    return {
        "transcript": summary(await _time_async(transcript, runs)),
        "branches": summary(await _time_async(branches, runs)),
        "siblings": summary(await _time_async(siblings, runs)),
    }


def measure_http(base: str, built: Built, runs: int) -> dict[str, Any]:
    """p50/p99 (ms) of the three reads through the gateway (one keep-alive connection)."""
    prefix = f"/agents/{built.key.agent}/{built.key.name}"
    branch = str(built.branch_id)
    calls = {
        "transcript": (f"{prefix}/get-messages", {"branch": branch}, built.path_length),
        "branches": (f"{prefix}/branches", {}, built.branches),
        "siblings": (
            f"{prefix}/messages/{built.sibling_id}/siblings",
            {"branch": str(built.sibling_branch_id)},
            built.siblings,
        ),
    }
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=10) as client:
        for view, (path, params, expected) in calls.items():
            samples = []
            for attempt in range(WARMUP + runs):
                started = time.perf_counter()
                response = client.get(path, params=params)
                took = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                if attempt >= WARMUP:
                    samples.append(took)
            body = response.json()
            count = len(
                body
                if view == "transcript"
                else body["branches" if view == "branches" else "siblings"]
            )
            assert count == expected, (view, count, expected)
            out[view] = summary(samples)
    return out


async def _build_and_measure(
    url: str, tag: str, runs: int, log: Log
) -> tuple[dict[str, Any], list[Built]]:
    await migrate(url)
    async with Store.from_url(url) as store:
        started = time.monotonic()
        big = await build(
            store, f"bench-branches-{tag}", branches=BRANCHES, per_branch=MESSAGES_PER_BRANCH
        )
        built_s = time.monotonic() - started
        small = await build(
            store, f"bench-branches-baseline-{tag}", branches=1, per_branch=BASELINE_MESSAGES
        )
        log(
            f"  branches: built {big.messages:,} messages over {big.branches} branches in "
            f"{built_s:.1f}s (longest path {big.path_length}, {big.siblings} siblings)"
        )
        result = {
            "build_s": round(built_s, 2),
            "store": await measure_store(store, big, runs),
            "store_baseline": await measure_store(store, small, runs),
        }
    return result, [big, small]


async def _drop(url: str, built: list[Built]) -> None:
    async with Store.from_url(url) as store, store.engine.begin() as conn:
        await conn.execute(
            delete(ConversationRow).where(
                ConversationRow.id.in_([b.conversation_id for b in built])
            )
        )


def _http(
    var_dir: Path, url: str, built: list[Built], runs: int, cleanup: Cleanup
) -> dict[str, Any]:
    cluster = LocalCluster(
        var_dir=var_dir,
        port=free_port(),
        gateways=1,
        shards=1,
        jobs=0,
        database_url=url,
        env=cluster_env(),
        log_dir=var_dir / "logs",
    )
    cleanup.add("branches cluster", cluster.stop)
    try:
        cluster.start(timeout=120)
        big, small = built
        return {
            "http": measure_http(cluster.urls[0], big, runs),
            "http_baseline": measure_http(cluster.urls[0], small, runs),
        }
    finally:
        cluster.stop()
        cleanup.remove("branches cluster")


def run_branches(var_dir: Path, cleanup: Cleanup, *, quick: bool, log: Log) -> dict[str, Any]:
    """Build the conversations and time the branch views on every configured database."""
    started = time.monotonic()
    runs = 50 if quick else 100
    var_dir.mkdir(parents=True, exist_ok=True)
    databases = {"sqlite": f"sqlite:///{(var_dir / 'branches.db').resolve()}"}
    if os.environ.get("BENCH_DATABASE_URL"):
        databases["postgresql"] = os.environ["BENCH_DATABASE_URL"]
    out: dict[str, Any] = {"runs": runs, "target_p50_ms": TARGET_P50_MS, "databases": {}}
    for name, url in databases.items():
        tag = uuid.uuid4().hex[:8]
        log(f"  branches: {name} ...")
        result, built = asyncio.run(_build_and_measure(url, tag, runs, log))
        big = built[0]
        out["size"] = {
            "messages": big.messages,
            "branches": big.branches,
            "longest_path": big.path_length,
            "siblings": big.siblings,
            "baseline_messages": built[1].messages,
        }
        try:
            result.update(_http(var_dir / f"cluster-{name}", url, built, runs, cleanup))
        finally:
            if name != "sqlite":
                asyncio.run(_drop(url, built))
        out["databases"][name] = result
        log(
            "  branches: "
            + name
            + " p50 "
            + ", ".join(
                f"{view} {result['store'][view]['p50']:.2f}/{result['http'][view]['p50']:.2f} ms"
                for view in VIEWS
            )
            + " (store/http)"
        )
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def branches_rows(result: dict[str, Any]) -> list[list[str]]:
    """Table rows: view, p50 / p99 at size, the same on the baseline, ratio of p50s, target."""

    def pair(stats: dict[str, Any]) -> str:
        return f"{stats['p50']:.2f} / {stats['p99']:.2f}"

    labels = {
        "transcript": f"branch transcript ({result['size']['longest_path']} msgs)",
        "branches": f"branch list ({result['size']['branches']})",
        "siblings": f"siblings ({result['size']['siblings']})",
    }
    rows = []
    for database, measured in result["databases"].items():
        for layer in ("store", "http"):
            if layer not in measured:
                continue
            for view in VIEWS:
                big = measured[layer][view]
                small = measured[f"{layer}_baseline"][view]
                met = "met" if big["p50"] <= result["target_p50_ms"] else "MISSED"
                rows.append(
                    [
                        f"{database} {layer}: {labels[view]}",
                        pair(big),
                        pair(small),
                        f"{big['p50'] / small['p50']:.2f}x" if small["p50"] else "-",
                        f"p50 <= {result['target_p50_ms']:.0f} ms {met}",
                    ]
                )
    return rows


BRANCHES_HEADER = [
    "branch views, p50 / p99 ms",
    "10k msgs, 100 branches",
    "baseline (100 msgs, main)",
    "ratio",
    "target",
]
