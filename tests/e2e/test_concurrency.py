"""`message_concurrency` with overlapping sends over the wire."""

from __future__ import annotations

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


async def _overlap(client: WsClient) -> tuple[dict[str, object], ...]:
    """A slow first send, two more while it streams, then the first is cancelled."""
    u1, u2, u3 = user_message("slow one"), user_message("two"), user_message("three")
    r1 = chat_request([u1])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    r2 = chat_request([u1, u2])
    r3 = chat_request([u1, u2, u3])
    await client.send(r2)
    await client.send(r3)
    await client.send({"type": "cf_agent_chat_request_cancel", "id": r1["id"]})
    return u1, u2, u3, r1, r2, r3


@pytest.mark.parametrize("agent", ["latest-agent", "debounce-agent"])
async def test_latest_skips_superseded_sends(
    cluster: LocalCluster, conversation: str, agent: str
) -> None:
    client = await WsClient.connect(cluster.urls[0], agent, conversation)
    u1, u2, u3, _r1, r2, r3 = await _overlap(client)
    assert (await client.wait_done(str(r2["id"])))["outcome"] == "skipped"
    await client.wait_done(str(r3["id"]))
    assert client.chunks(str(r2["id"])) == []
    assert client.text(str(r3["id"])) == "echo: three"
    history = await get_messages(cluster.urls[0], agent, conversation)
    # Replies go at the end of the path, after the messages sent while they streamed.
    assert [m["id"] for m in history][:3] == [u1["id"], u2["id"], u3["id"]]
    assert [m["role"] for m in history] == ["user", "user", "user", "assistant", "assistant"]
    await client.close()


async def test_merge_collapses_the_sends_made_while_busy(
    cluster: LocalCluster, conversation: str
) -> None:
    client = await WsClient.connect(cluster.urls[0], "merge-agent", conversation)
    _u1, _u2, u3, _r1, r2, r3 = await _overlap(client)
    assert (await client.wait_done(str(r2["id"])))["outcome"] == "skipped"
    await client.wait_done(str(r3["id"]))
    assert client.text(str(r3["id"])) == "echo: two\n\nthree"
    history = await get_messages(cluster.urls[0], "merge-agent", conversation)
    assert [m["role"] for m in history] == ["user", "user", "assistant", "assistant"]
    assert history[1]["id"] == u3["id"]
    assert history[1]["parts"] == [{"type": "text", "text": "two\n\nthree"}]
    await client.close()


async def test_drop_refuses_a_send_while_busy(cluster: LocalCluster, conversation: str) -> None:
    client = await WsClient.connect(cluster.urls[0], "drop-agent", conversation)
    u1 = user_message("slow one")
    r1 = chat_request([u1])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    mark = len(client.frames)
    r2 = chat_request([u1, user_message("too soon")])
    await client.send(r2)
    rollback = await client.wait_for(
        lambda f: f.get("type") == "cf_agent_chat_messages", after=mark
    )
    assert [m["role"] for m in rollback["messages"]] == ["user", "assistant"]
    assert rollback["messages"][0]["id"] == u1["id"]
    assert (await client.wait_done(str(r2["id"])))["outcome"] == "skipped"
    await client.send({"type": "cf_agent_chat_request_cancel", "id": r1["id"]})
    await client.wait_done(str(r1["id"]))
    history = await get_messages(cluster.urls[0], "drop-agent", conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    await client.close()


async def test_a_queued_send_is_answered_after_the_reply_before_it(
    cluster: LocalCluster, conversation: str
) -> None:
    client = await WsClient.connect(cluster.urls[0], "chat-agent", conversation)
    u1, u2 = user_message("slow one"), user_message("two")
    r1, r2 = chat_request([u1]), chat_request([u1, u2])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    await client.send(r2)
    await client.wait_done(str(r2["id"]), timeout=30)
    # The second turn answers its own message, although the first reply was stored after it.
    assert client.text(str(r2["id"])) == "echo: two"
    history = await get_messages(cluster.urls[0], "chat-agent", conversation)
    assert [m["role"] for m in history] == ["user", "user", "assistant", "assistant"]
    await client.close()
