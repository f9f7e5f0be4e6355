"""Deeply nested JSON cannot brick a conversation.

A chat request whose message carries JSON nested about 960 levels deep (in a part's
`providerMetadata`) used to be stored; every later read of the conversation then failed (its
`get-messages` answered 500, and once its shard restarted it never loaded again). Now the shard
refuses such a request, and a row stored before that (planted here straight into SQL) is
quarantined when read: the conversation loads, through a shard restart and a fork, and
`durachat-admin repair` sets the row aside and rewrites it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from durachat import limits
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.store import Store
from support.cluster import running_cluster
from support.faults import sql_rows
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

AGENT = "chat-agent"
DEPTH = 960


def deep_json(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def poisoned_message(message_id: str, text_: str) -> str:
    """A user message as JSON text, with a `providerMetadata` nested `DEPTH` levels."""
    return (
        f'{{"id":"{message_id}","role":"user","parts":[{{"type":"text",'
        f'"text":{json.dumps(text_)},"providerMetadata":{deep_json(DEPTH)}}}]}}'
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    """1 gateway, 1 shard (so a restart of it is a restart of the owner), jobs, SQLite."""
    with running_cluster(
        tmp_path_factory.mktemp("poison"), redis_url, gateways=1, shards=1
    ) as running:
        yield running


async def _chat(url: str, name: str, said: str) -> Any:
    """One turn after the stored history; returns the history after it."""
    history = await get_messages(url, AGENT, name)
    client = await WsClient.connect(url, AGENT, name)
    try:
        request = chat_request([*history, user_message(said)])
        await client.send(request)
        done = await client.wait_done(request["id"], timeout=30)
        assert "outcome" not in done and not done.get("error"), done
        assert client.text(request["id"]) == f"echo: {said}"
    finally:
        await client.close()
    return await get_messages(url, AGENT, name)


async def test_a_request_nested_too_deep_is_refused_and_the_conversation_goes_on(
    cluster: LocalCluster,
) -> None:
    url = cluster.urls[0]
    name = f"deep-{time.time_ns()}"
    client = await WsClient.connect(url, AGENT, name)
    body = '{"messages":[' + poisoned_message("u1", "hi") + '],"trigger":"submit-message"}'
    request = {"type": "cf_agent_use_chat_request", "id": "r-deep", "init": {"body": body}}
    await client.send(json.dumps(request))
    done = await client.wait_done("r-deep", timeout=30)
    assert done.get("outcome") == "error", done
    assert any(f.get("id") == "r-deep" and f.get("error") for f in client.frames), client.frames
    error = await client.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "too_deep", error
    await client.close()
    assert await get_messages(url, AGENT, name) == []
    history = await _chat(url, name, "and now a normal one")
    assert [m["role"] for m in history] == ["user", "assistant"]


async def test_a_poisoned_row_stored_before_the_bound_does_not_brick_its_conversation(
    cluster: LocalCluster,
) -> None:
    url = cluster.urls[0]
    database = cluster.database_url or ""
    name = f"poisoned-{time.time_ns()}"
    before = await _chat(url, name, "first")
    first_user = before[0]["id"]
    # As a shard without the bound stored it.
    store = Store.from_url(database)
    try:
        async with store.engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE messages SET body = :body WHERE message_id = :mid AND conversation_id"
                    " = (SELECT id FROM conversations WHERE name = :name)"
                ),
                {"body": poisoned_message(first_user, "first"), "mid": first_user, "name": name},
            )
    finally:
        await store.close()

    # Reads serve what can be kept of it.
    history = await get_messages(url, AGENT, name)
    assert [m["id"] for m in history] == [m["id"] for m in before]
    assert history[0]["parts"][0]["text"] == "first"
    assert limits.json_depth(history[0]) <= limits.MAX_MESSAGE_DEPTH

    # The owner restarts (SIGKILL) and loads the conversation again.
    shard = next(p for p in cluster.processes if p.role == "shard")
    os.kill(shard.pid, signal.SIGKILL)
    await asyncio.to_thread(shard.popen.wait, 10)
    [fresh] = cluster.restart_exited()

    async def registered() -> bool:
        async with httpx.AsyncClient(base_url=url, timeout=2) as http:
            shards = (await http.get("/v1/cluster")).json()["shards"]
        return [s["pid"] for s in shards] == [fresh.pid]

    await eventually(registered, timeout=120, interval=0.2)
    after = await _chat(url, name, "after the restart")
    assert [m["role"] for m in after] == ["user", "assistant"] * 2
    assert after[0]["parts"][0]["text"] == "first"

    # A fork copies the row as stored, and loads as well.
    fork = f"{name}-fork"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        forked = await http.post(f"/agents/{AGENT}/{name}/branches/main/fork", json={"name": fork})
    assert forked.status_code == 201, forked.text
    forked_history = await _chat(url, fork, "on the fork")
    assert [m["id"] for m in forked_history[:4]] == [m["id"] for m in after]

    # The repair sets both poisoned rows aside and rewrites them; nothing changes for readers.
    repaired = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "durachat_infra.admin", "repair", "--database-url", database],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert "repaired 2 stored documents" in repaired.stdout, repaired.stdout
    rows = await sql_rows(database, "SELECT table_name, row_id, original FROM quarantined_rows")
    assert {r.table_name for r in rows} == {"messages"} and len(rows) == 2
    assert all(limits.text_depth(r.original) > DEPTH for r in rows)
    assert await get_messages(url, AGENT, name) == after

    async def chats_again() -> bool:
        await _chat(url, name, "after the repair")
        return True

    await eventually(chats_again, timeout=30)
