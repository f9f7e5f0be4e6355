"""The four problems of building branches on a flat transcript (client-side filtering on top of
the reference's one list of messages), each as a test that a flat design fails:

1. stale rows that never get deleted;
2. both restore paths, HTTP history and WebSocket sync, sending every branch;
3. client-side filtering racing the SDK's own updates (chunks and transcript broadcasts);
4. an implicit `main` that cannot be migrated later.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from durachat_infra.local.cluster import LocalCluster
from durachat_infra.store import migrate
from durachat_infra.store._migrate import alembic_config
from support.cluster import running_cluster
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


def ids(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["id"]) for m in messages]


async def chat(ws: WsClient, messages: list[dict[str, Any]], **options: Any) -> str:
    """Send a chat request and wait for its end; returns its request id."""
    request = chat_request(messages, **options)
    await ws.send(request)
    await ws.wait_done(str(request["id"]), timeout=30)
    return str(request["id"])


async def kept(base: str, conversation: str, kind: str) -> str:
    """The id of the branch that keeps what an edit or a regenerate replaced."""
    async with httpx.AsyncClient(base_url=base, timeout=20) as http:
        listed = (await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"]
    [found] = [b for b in listed if str(b["name"]).startswith(f"{kind}-")]
    return str(found["id"])


async def message_rows(database_url: str, conversation: str) -> list[str]:
    """Every stored message of a conversation (any branch, or none), straight from SQL."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT m.message_id FROM messages m JOIN conversations c"
                    " ON c.id = m.conversation_id WHERE c.name = :name ORDER BY m.seq"
                ),
                {"name": conversation},
            )
            return [str(r[0]) for r in rows]
    finally:
        await engine.dispose()


async def test_1_no_stale_rows_a_branch_deletes_what_only_it_reaches(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    """A flat transcript either keeps the regenerated reply in the one list (a stale row every
    restore shows) or deletes it; abandoned alternatives are never cleaned up. Here each branch
    shows exactly its path, and deleting a branch deletes what only it reaches."""
    assert cluster.database_url is not None
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    base = cluster.urls[0]
    u1 = user_message("one")
    await chat(ws, [u1])
    await chat(ws, [u1], trigger="regenerate-message")
    main = await get_messages(base, AGENT, conversation)
    fork = await kept(base, conversation, "regenerate")
    on_fork = await get_messages(base, AGENT, conversation, branch=fork)
    on_kept = await WsClient.connect(base, AGENT, conversation, branch=fork)
    await chat(on_kept, [*on_fork, user_message("more on the fork")])
    await on_kept.close()
    on_fork = await get_messages(base, AGENT, conversation, branch=fork)

    # Each branch's transcript is its path: no stale reply on either.
    assert await get_messages(base, AGENT, conversation) == main
    assert ids(main) == [u1["id"], main[1]["id"]]
    assert len(on_fork) == 4 and on_fork[1]["id"] not in ids(main)
    stored = await message_rows(cluster.database_url, conversation)
    assert sorted(stored) == sorted({*ids(main), *ids(on_fork)})

    # Deleting the fork deletes the three messages only it reached, nothing of main.
    deleted = await http.delete(f"/agents/{AGENT}/{conversation}/branches/{fork}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"deleted_messages": 3}
    assert await message_rows(cluster.database_url, conversation) == ids(main)
    assert await get_messages(base, AGENT, conversation) == main
    await ws.close()


async def test_2_history_and_websocket_sync_carry_one_branch(
    cluster: LocalCluster, conversation: str
) -> None:
    """A flat transcript restores every branch through both paths (HTTP history on load, the
    WebSocket transcript sync on every change), leaving the filtering to each client. Here
    both carry only the branch the client views."""
    base = cluster.urls[0]
    editor = await WsClient.connect(base, AGENT, conversation)
    u1 = user_message("one")
    await chat(editor, [u1])
    await chat(editor, [{**u1, "parts": [{"type": "text", "text": "one, edited"}]}])
    main = await get_messages(base, AGENT, conversation)
    fork = await kept(base, conversation, "edit")
    on_fork = await get_messages(base, AGENT, conversation, branch=fork)

    # Restore path 1: HTTP history, one branch each.
    assert main[0]["parts"][0]["text"] == "one, edited"
    assert on_fork[0]["parts"][0]["text"] == "one"
    assert not set(ids(on_fork)[1:]) & set(ids(main))

    # Restore path 2: the WebSocket transcript sync. Tabs on each branch see the transcript
    # broadcasts of their own branch only, while both branches change.
    on_main = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    also_fork = await WsClient.connect(cluster.urls[1], AGENT, conversation, branch=fork)
    main_sender = await WsClient.connect(base, AGENT, conversation)
    fork_sender = await WsClient.connect(base, AGENT, conversation, branch=fork)
    await chat(main_sender, [*main, user_message("main goes on")])
    await chat(fork_sender, [*on_fork, user_message("fork goes on")])
    main_after = await get_messages(base, AGENT, conversation)
    fork_after = await get_messages(base, AGENT, conversation, branch=fork)

    async def synced(tab: WsClient, wanted: list[str]) -> list[dict[str, Any]]:
        frames = tab.of_type("cf_agent_chat_messages")
        assert frames and ids(frames[-1]["messages"]) == wanted
        return frames

    for tab, own, other in (
        (also_fork, fork_after, main_after),
        (on_main, main_after, fork_after),
    ):
        frames = await eventually(functools.partial(synced, tab, ids(own)))
        foreign = set(ids(other)) - set(ids(own))
        for frame in frames:
            assert not set(ids(frame["messages"])) & foreign
    for tab in (editor, on_main, also_fork, main_sender, fork_sender):
        await tab.close()


async def test_3_no_client_filtering_needed_while_both_branches_stream(
    cluster: LocalCluster, conversation: str
) -> None:
    """With one flat transcript, a client that shows one branch must filter the SDK's own
    updates (streamed chunks, transcript broadcasts) as they arrive, and races it. Here two tabs
    stream replies on two branches at the same time, and no frame of the other branch ever
    reaches either tab: there is nothing to filter."""
    base = cluster.urls[0]
    sender = await WsClient.connect(base, AGENT, conversation)
    u1 = user_message("one")
    await chat(sender, [u1])
    await chat(sender, [u1], trigger="regenerate-message")
    await sender.close()
    main = await get_messages(base, AGENT, conversation)
    fork = await kept(base, conversation, "regenerate")
    on_fork = await get_messages(base, AGENT, conversation, branch=fork)
    a = await WsClient.connect(base, AGENT, conversation, branch=fork)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)  # on main

    on_a = chat_request([*on_fork, user_message("slow")])
    on_b = chat_request([*main, user_message("slow")])
    await asyncio.gather(a.send(on_a), b.send(on_b))
    await asyncio.gather(
        a.wait_done(str(on_a["id"]), timeout=40), b.wait_done(str(on_b["id"]), timeout=40)
    )
    assert a.text(str(on_a["id"])) == SLOW_TEXT == b.text(str(on_b["id"]))
    fork_ids = set(ids(await get_messages(base, AGENT, conversation, branch=fork)))
    main_ids = set(ids(await get_messages(base, AGENT, conversation)))
    only_fork, only_main = fork_ids - main_ids, main_ids - fork_ids

    def leaks(
        tab: WsClient, foreign_request: str, foreign_ids: set[str], since: int = 0
    ) -> list[dict[str, Any]]:
        leaked = []
        for frame in tab.frames[since:]:
            raw = json.dumps(frame)
            if frame.get("id") == foreign_request or any(m in raw for m in foreign_ids):
                leaked.append(frame)
        return leaked

    assert leaks(a, str(on_b["id"]), only_main) == []
    assert leaks(b, str(on_a["id"]), only_fork) == []
    await a.close()
    await b.close()


async def test_4_a_conversation_from_before_branching_gets_an_explicit_main(
    tmp_path: Path, redis_url: str
) -> None:
    """A flat design's branches hang off an implicit `main` (messages with no branch), which
    cannot be told apart or pointed at once branches exist. Here a conversation stored before
    the branch views (schema 0003, without a `main` row) is migrated and gets an explicit
    `main` with an id: it is listed, read by name and by id, and an edit on it keeps the old
    path on a branch whose parent is that `main`."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'legacy.db'}"
    await asyncio.to_thread(command.upgrade, alembic_config(url), "0003")
    engine = create_async_engine(url)
    u1 = {"id": "legacy-u1", "role": "user", "parts": [{"type": "text", "text": "old question"}]}
    a1 = {"id": "legacy-a1", "role": "assistant", "parts": [{"type": "text", "text": "old answer"}]}
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO conversations (id, tenant_id, agent, name, next_seq)"
                    " VALUES (1, 'default', :agent, 'legacy', 2)"
                ),
                {"agent": AGENT},
            )
            for pk, message, parent in ((1, u1, None), (2, a1, 1)):
                await conn.execute(
                    text(
                        "INSERT INTO messages (id, conversation_id, message_id, parent_id, seq,"
                        " role, body) VALUES (:pk, 1, :mid, :parent, :seq, :role, :body)"
                    ),
                    {
                        "pk": pk,
                        "mid": message["id"],
                        "parent": parent,
                        "seq": pk - 1,
                        "role": message["role"],
                        "body": json.dumps(message),
                    },
                )
    finally:
        await engine.dispose()
    await migrate(url)

    with running_cluster(
        tmp_path / "cluster", redis_url, gateways=1, shards=1, database_url=url
    ) as cluster:
        base = cluster.urls[0]
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            [main] = (await http.get(f"/agents/{AGENT}/legacy/branches")).json()["branches"]
            assert main["name"] == "main" and isinstance(main["id"], int)
            assert main["leaf_message_id"] == "legacy-a1"
            for branch in ("main", str(main["id"])):
                read = await get_messages(base, AGENT, "legacy", branch=branch)
                assert read == [u1, a1]
            ws = await WsClient.connect(base, AGENT, "legacy")
            await chat(ws, [{**u1, "parts": [{"type": "text", "text": "new question"}]}])
            fork = await kept(base, "legacy", "edit")
            listed = (await http.get(f"/agents/{AGENT}/legacy/branches")).json()["branches"]
            [forked] = [b for b in listed if str(b["id"]) == fork]
            assert forked["parent_branch_id"] == main["id"]
            assert await get_messages(base, AGENT, "legacy", branch=fork) == [u1, a1]
            now = await get_messages(base, AGENT, "legacy")
            assert now[0]["parts"][0]["text"] == "new question" and len(now) == 2
            await ws.close()
