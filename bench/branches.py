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

Then, through the same cluster, new chat turns over WebSocket: on the branch with the longest
path (`?branch=<id>`, one connection kept open, the client sending that branch's whole
transcript plus the new user message, as a real client does), and, interleaved with them, the
same turn on a brand-new conversation each time. Each turn is timed from the request sent to its
first `cf_agent_use_chat_response` chunk and to its terminal frame. The first turn on the branch
activates its actor (loading the path) and is reported on its own, against the first fresh turn.
The prompt is `sure`, which the scripted model answers with one delta and no delay, so a turn
costs what the framework does around the model. Target: deep p50 ≤ 1.1x the fresh p50 (reported,
never enforced).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import delete

from bench.client import WsConnection, connect
from bench.procs import Cleanup
from bench.stats import summary
from bench.targets import cluster_env
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.ports import free_port
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
TURN_PROMPT = "sure"
"""The scripted model answers exactly this with one delta, `TURN_REPLY`, and no delay."""
TURN_REPLY = "Sure"
TURNS = 30
QUICK_TURNS = 10
TURN_WARMUP = 2
"""Fresh turns before any measured one: the shard's first model call sets litellm up."""
TURN_TIMEOUT_S = 30.0
NO_SLOWER = 1.1
"""Deep-branch turns count as no slower while their p50 is within 10% of fresh ones'."""
REQUEST = "cf_agent_use_chat_request"
RESPONSE = "cf_agent_use_chat_response"
IDENTITY = "cf_agent_identity"
ERROR = "durachat_error"

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


@dataclass(slots=True)
class Reply:
    """One chat request: when it was sent, and when its first chunk and its end came back."""

    id: str
    sent_ns: int
    done: asyncio.Future[None]
    first_ns: int = 0
    done_ns: int = 0
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    failure: str | None = None

    @property
    def reply_text(self) -> str:
        """The text the reply streamed."""
        return "".join(self.text)

    @property
    def first_chunk_ms(self) -> float:
        """Request sent -> its first chunk frame."""
        return (self.first_ns - self.sent_ns) / 1e6

    @property
    def done_ms(self) -> float:
        """Request sent -> its terminal frame."""
        return (self.done_ns - self.sent_ns) / 1e6

    def message(self) -> dict[str, Any]:
        """The assistant message as the AI SDK client assembles it from the chunks."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "text", "text": self.reply_text, "state": "done"},
            ],
        }
        if self.metadata is not None:
            message["metadata"] = self.metadata
        return message


class Viewer:
    """A WebSocket viewing one branch of a conversation: sends chat turns and times them."""

    def __init__(self) -> None:
        self.conn: WsConnection | None = None
        self.identity: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reply: Reply | None = None
        self.errors: list[str] = []

    @classmethod
    async def open(cls, base: str, name: str, branch: int | None = None) -> Viewer:
        """Connect to conversation `name` (viewing `branch`, else `main`); returns once the
        gateway has introduced itself."""
        viewer = cls()
        host, port = base.removeprefix("http://").split(":")
        path = f"/agents/{AGENT}/{name}?_pk={uuid.uuid4()}"
        if branch is not None:
            path += f"&branch={branch}"
        viewer.conn = await connect(host, int(port), path, viewer._on_text, deflate=False)
        try:
            await asyncio.wait_for(viewer.identity, TURN_TIMEOUT_S)
            # An unknown branch is reported before the identity; the socket would view `main`.
            if viewer.errors:
                raise RuntimeError(f"connecting to {path}: {viewer.errors}")
        except BaseException:
            await viewer.close()
            raise
        return viewer

    def _on_text(self, data: bytes, now: int) -> None:
        frame = json.loads(data)
        kind = frame.get("type")
        if kind == IDENTITY and not self.identity.done():
            self.identity.set_result(None)
        elif kind == ERROR:
            self.errors.append(f"{frame.get('code')}: {frame.get('message')}")
        reply = self.reply
        if kind != RESPONSE or reply is None or frame.get("id") != reply.id:
            return
        if frame.get("error"):
            reply.failure = str(frame.get("body"))
        if frame.get("seq") is not None:
            reply.first_ns = reply.first_ns or now
            self._chunk(reply, json.loads(frame["body"]))
        if frame.get("done"):
            reply.done_ns = now
            if frame.get("outcome"):
                reply.failure = reply.failure or f"outcome {frame['outcome']}"
            if not reply.done.done():
                reply.done.set_result(None)

    @staticmethod
    def _chunk(reply: Reply, chunk: dict[str, Any]) -> None:
        kind = chunk.get("type")
        if kind == "start":
            reply.message_id = chunk.get("messageId")
        elif kind == "text-delta":
            reply.text.append(str(chunk.get("delta", "")))
        elif kind == "finish" and chunk.get("messageMetadata") is not None:
            reply.metadata = chunk["messageMetadata"]

    async def turn(self, messages: list[dict[str, Any]]) -> Reply:
        """Send a chat request carrying `messages` (ending with the bench prompt) and wait for
        its terminal frame; raises if the turn failed or replied something else."""
        assert self.conn is not None
        request_id = secrets.token_hex(6)
        body = json.dumps({"messages": messages, "trigger": "submit-message"})
        frame = json.dumps(
            {"id": request_id, "init": {"method": "POST", "body": body}, "type": REQUEST}
        )
        loop = asyncio.get_running_loop()
        reply = self.reply = Reply(request_id, time.time_ns(), loop.create_future())
        self.conn.send_text(frame)
        await asyncio.wait_for(asyncio.shield(reply.done), TURN_TIMEOUT_S)
        if reply.failure or not reply.first_ns or reply.message_id is None:
            raise RuntimeError(f"turn {request_id} failed: {reply.failure or 'no chunks'}")
        if reply.reply_text != TURN_REPLY:
            raise RuntimeError(
                f"turn {request_id} replied {reply.reply_text!r}, not {TURN_REPLY!r}"
            )
        return reply

    async def close(self) -> None:
        """Close the socket."""
        if self.conn is not None:
            await self.conn.close()


def _user_message() -> dict[str, Any]:
    return {
        "id": secrets.token_hex(8),
        "role": "user",
        "parts": [{"type": "text", "text": TURN_PROMPT}],
    }


class DeepClient:
    """A client viewing the deepest branch: it holds that branch's transcript and sends it whole,
    plus the new user message, with every turn, then appends the reply it assembled."""

    def __init__(self, viewer: Viewer, transcript: list[dict[str, Any]]) -> None:
        self.viewer = viewer
        self.transcript = transcript

    async def turn(self) -> Reply:
        """One new turn at the end of the branch."""
        user = _user_message()
        reply = await self.viewer.turn([*self.transcript, user])
        self.transcript += [user, reply.message()]
        return reply


async def _fresh_turn(base: str, name: str) -> Reply:
    """The first turn of a brand-new conversation (connected before the clock starts)."""
    viewer = await Viewer.open(base, name)
    try:
        return await viewer.turn([_user_message()])
    finally:
        await viewer.close()


async def _branch_transcript(base: str, built: Built) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        response = await client.get(
            f"/agents/{AGENT}/{built.key.name}/get-messages",
            params={"branch": str(built.branch_id)},
        )
    response.raise_for_status()
    messages: list[dict[str, Any]] = response.json()
    assert len(messages) == built.path_length, (len(messages), built.path_length)
    return messages


def _turn_summary(replies: list[Reply]) -> dict[str, Any]:
    return {
        "first_chunk_ms": summary([r.first_chunk_ms for r in replies]),
        "done_ms": summary([r.done_ms for r in replies]),
    }


def _one_turn(reply: Reply) -> dict[str, float]:
    return {"first_chunk_ms": round(reply.first_chunk_ms, 3), "done_ms": round(reply.done_ms, 3)}


async def measure_turns(base: str, built: Built, turns: int, tag: str) -> dict[str, Any]:
    """New chat turns over WebSocket, on the deepest branch and on fresh conversations.

    Deep and fresh turns alternate so that noise on the machine hits both alike. The first deep
    turn activates the branch's actor (it loads the path) and is kept apart, with the fresh turn
    run beside it, from the `turns` steady-state pairs that follow.
    """
    started = time.monotonic()
    names: Iterator[str] = (f"bench-branches-fresh-{tag}-{i:03d}" for i in itertools.count())
    for _ in range(TURN_WARMUP):
        await _fresh_turn(base, next(names))
    transcript = await _branch_transcript(base, built)
    viewer = await Viewer.open(base, built.key.name, built.branch_id)
    try:
        client = DeepClient(viewer, transcript)
        first_deep = await client.turn()
        first_fresh = await _fresh_turn(base, next(names))
        deep: list[Reply] = []
        fresh: list[Reply] = []
        for _ in range(turns):
            deep.append(await client.turn())
            fresh.append(await _fresh_turn(base, next(names)))
        path_at_end = len(client.transcript)
    finally:
        await viewer.close()
    out: dict[str, Any] = {
        "turns": turns,
        "prompt": TURN_PROMPT,
        "path_length": built.path_length,
        "path_length_at_end": path_at_end,
        "deep": _turn_summary(deep),
        "fresh": _turn_summary(fresh),
        "activation": {"deep": _one_turn(first_deep), "fresh": _one_turn(first_fresh)},
        "seconds": round(time.monotonic() - started, 1),
    }
    out["ratio_p50"] = {
        metric: out["deep"][metric]["p50"] / out["fresh"][metric]["p50"]
        for metric in ("first_chunk_ms", "done_ms")
    }
    out["verdict"] = {
        metric: "no slower" if ratio <= NO_SLOWER else "slower"
        for metric, ratio in out["ratio_p50"].items()
    }
    return out


def _turns_brief(turns: dict[str, Any]) -> str:
    parts = []
    for metric, label in (("first_chunk_ms", "first chunk"), ("done_ms", "done")):
        deep, fresh = turns["deep"][metric]["p50"], turns["fresh"][metric]["p50"]
        parts.append(
            f"{label} p50 {deep:.2f} deep / {fresh:.2f} fresh ms "
            f"({turns['ratio_p50'][metric]:.2f}x, {turns['verdict'][metric]})"
        )
    activation = turns["activation"]
    parts.append(
        f"activation first chunk {activation['deep']['first_chunk_ms']:.1f} deep / "
        f"{activation['fresh']['first_chunk_ms']:.1f} fresh ms"
    )
    return "; ".join(parts)


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


async def _drop(url: str, tag: str) -> None:
    """Delete every conversation of this run (their names carry `tag`), fresh ones included."""
    async with Store.from_url(url) as store, store.engine.begin() as conn:
        await conn.execute(
            delete(ConversationRow).where(ConversationRow.name.like(f"bench-branches-%{tag}%"))
        )


def _http(
    var_dir: Path,
    url: str,
    built: list[Built],
    runs: int,
    cleanup: Cleanup,
    *,
    tag: str,
    turns: int,
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
            # After the reads: the turns add messages to the branch read above.
            "turns": asyncio.run(measure_turns(cluster.urls[0], big, turns, tag)),
        }
    finally:
        cluster.stop()
        cleanup.remove("branches cluster")


def run_branches(var_dir: Path, cleanup: Cleanup, *, quick: bool, log: Log) -> dict[str, Any]:
    """Build the conversations and time the branch views on every configured database."""
    started = time.monotonic()
    runs = 20 if quick else 100
    turns = QUICK_TURNS if quick else TURNS
    var_dir.mkdir(parents=True, exist_ok=True)
    databases = {"sqlite": f"sqlite:///{(var_dir / 'branches.db').resolve()}"}
    if os.environ.get("BENCH_DATABASE_URL"):
        databases["postgresql"] = os.environ["BENCH_DATABASE_URL"]
    out: dict[str, Any] = {
        "runs": runs,
        "turns": turns,
        "target_p50_ms": TARGET_P50_MS,
        "turn_no_slower_ratio": NO_SLOWER,
        "databases": {},
    }
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
            result.update(
                _http(var_dir / f"cluster-{name}", url, built, runs, cleanup, tag=tag, turns=turns)
            )
        finally:
            if name != "sqlite":
                asyncio.run(_drop(url, tag))
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
        log(f"  branches: {name} turns {_turns_brief(result['turns'])}")
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _pair(stats: dict[str, Any]) -> str:
    return f"{stats['p50']:.2f} / {stats['p99']:.2f}"


def turn_rows(database: str, turns: dict[str, Any]) -> list[list[str]]:
    """Table rows of the turns: deep branch against fresh conversations, then activation."""
    rows = []
    for metric, label in (("first_chunk_ms", "first chunk"), ("done_ms", "done")):
        deep, fresh = turns["deep"][metric], turns["fresh"][metric]
        rows.append(
            [
                f"{database} ws: new turn, {label}: deep branch ({turns['path_length']}+ msgs) "
                "| fresh conv",
                _pair(deep),
                _pair(fresh),
                f"{turns['ratio_p50'][metric]:.2f}x",
                f"p50 <= {NO_SLOWER:g}x fresh: {turns['verdict'][metric]}",
            ]
        )
    for metric, label in (("first_chunk_ms", "first chunk"), ("done_ms", "done")):
        deep, fresh = turns["activation"]["deep"][metric], turns["activation"]["fresh"][metric]
        rows.append(
            [
                f"{database} ws: first turn on the branch (activation), {label} | fresh",
                f"{deep:.2f}",
                f"{fresh:.2f}",
                f"{deep / fresh:.2f}x" if fresh else "-",
                "expected slower",
            ]
        )
    return rows


def branches_rows(result: dict[str, Any]) -> list[list[str]]:
    """Table rows: view, p50 / p99 at size, the same on the baseline, ratio of p50s, target;
    then the chat turns (deep branch against fresh conversations)."""
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
                        _pair(big),
                        _pair(small),
                        f"{big['p50'] / small['p50']:.2f}x" if small["p50"] else "-",
                        f"p50 <= {result['target_p50_ms']:.0f} ms {met}",
                    ]
                )
        if "turns" in measured:
            rows += turn_rows(database, measured["turns"])
    return rows


BRANCHES_HEADER = [
    "branch views and turns, p50 / p99 ms",
    "10k msgs, 100 branches",
    "baseline (100 msgs, main | fresh conv)",
    "ratio",
    "target",
]
