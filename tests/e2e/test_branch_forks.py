"""Edit and regenerate make branches: a chat request whose transcript leaves the viewed branch's
path is answered on a new branch forked where it leaves, its sender is moved there, and nothing
is deleted or overwritten. Raw WebSocket frames, as the Cloudflare client sends them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


async def two_turns(ws: WsClient, base_url: str, conversation: str) -> list[dict[str, Any]]:
    """Chat `one`, then `two`, on the branch `ws` views; returns main's `[u1, a1, u2, a2]`."""
    first = chat_request([user_message("one")])
    await ws.send(first)
    await ws.wait_done(str(first["id"]))
    second = chat_request([*await get_messages(base_url, AGENT, conversation), user_message("two")])
    await ws.send(second)
    await ws.wait_done(str(second["id"]))
    return list(await get_messages(base_url, AGENT, conversation))


def edited(message: dict[str, Any], text: str) -> dict[str, Any]:
    """The message with a new text, same id (the AI SDK's `sendMessage({text, messageId})`)."""
    return {**message, "parts": [{"type": "text", "text": text}]}


async def switched_to(ws: WsClient, reason: str) -> str:
    """The branch the connection was moved to (waits for `durachat_branch_switched`)."""
    frame = await ws.wait_for(
        lambda f: f.get("type") == "durachat_branch_switched" and f.get("reason") == reason
    )
    return str(frame["branch"])


async def branch(http: httpx.AsyncClient, conversation: str, branch_id: str) -> dict[str, Any]:
    listed = (await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"]
    [found] = [b for b in listed if str(b["id"]) == branch_id]
    return dict(found)


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["parts"][-1]["text"]) if m["parts"] else "" for m in messages]


async def test_an_edit_that_keeps_the_id_forks_at_its_parent(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    watcher = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    main_id = (await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"][0]

    edit = chat_request([*main[:2], edited(main[2], "two, edited")])
    await ws.send(edit)
    fork = await switched_to(ws, "edit")
    await ws.wait_done(str(edit["id"]))
    assert ws.text(str(edit["id"])) == "echo: two, edited"

    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert [m["id"] for m in on_fork[:3]] == [m["id"] for m in main[:3]]
    assert texts(on_fork) == ["one", "echo: one", "two, edited", "echo: two, edited"]
    # Main is exactly as it was: the edited message was not overwritten.
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    record = await branch(http, conversation, fork)
    assert record["name"].startswith("edit-")
    assert (record["parent_branch_id"], record["fork_message_id"]) == (main_id["id"], main[1]["id"])
    # The two versions of `two` are siblings (a "1 / 2" picker).
    siblings = await http.get(
        f"/agents/{AGENT}/{conversation}/messages/{main[2]['id']}/siblings",
        params={"branch": fork},
    )
    assert siblings.json() == {"siblings": [main[2]["id"], main[2]["id"]], "index": 1}

    # The sender now chats on the fork without naming it.
    follow = chat_request([*on_fork, user_message("three")])
    await ws.send(follow)
    await ws.wait_done(str(follow["id"]))
    later = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert texts(later)[-2:] == ["three", "echo: three"]
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    # A tab on main saw none of it.
    for request in (edit, follow):
        assert all(f.get("id") != request["id"] for f in watcher.frames)
    assert not watcher.of_type("durachat_branch_switched")
    await ws.close()
    await watcher.close()


async def test_an_edit_with_a_new_id_forks_too(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    replacement = user_message("two, rephrased")
    edit = chat_request([*main[:2], replacement])
    await ws.send(edit)
    fork = await switched_to(ws, "edit")
    await ws.wait_done(str(edit["id"]))
    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert [m["id"] for m in on_fork[:3]] == [main[0]["id"], main[1]["id"], replacement["id"]]
    assert (await branch(http, conversation, fork))["fork_message_id"] == main[1]["id"]
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    await ws.close()


async def test_editing_the_first_message_forks_at_the_root(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([edited(main[0], "uno")])
    await ws.send(edit)
    fork = await switched_to(ws, "edit")
    await ws.wait_done(str(edit["id"]))
    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert texts(on_fork) == ["uno", "echo: uno"]
    record = await branch(http, conversation, fork)
    assert record["fork_message_id"] is None and record["parent_branch_id"] is not None
    roots = await http.get(
        f"/agents/{AGENT}/{conversation}/messages/{main[0]['id']}/siblings",
        params={"branch": fork},
    )
    assert roots.json() == {"siblings": [main[0]["id"], main[0]["id"]], "index": 1}
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    await ws.close()


async def test_regenerating_an_earlier_reply_keeps_what_followed_it_on_main(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    # The AI SDK's regenerate({messageId: a1}) sends the transcript up to a1's user message.
    again = chat_request(main[:1], trigger="regenerate-message")
    await ws.send(again)
    fork = await switched_to(ws, "regenerate")
    await ws.wait_done(str(again["id"]))
    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert on_fork[0] == main[0] and len(on_fork) == 2
    assert on_fork[1]["id"] != main[1]["id"]
    siblings = await http.get(
        f"/agents/{AGENT}/{conversation}/messages/{on_fork[1]['id']}/siblings",
        params={"branch": fork},
    )
    assert siblings.json() == {"siblings": [main[1]["id"], on_fork[1]["id"]], "index": 1}
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    await ws.close()


@pytest.mark.parametrize("kind", ["edit", "regenerate"])
async def test_while_a_reply_streams_it_is_cancelled_kept_and_then_forked(
    cluster: LocalCluster, conversation: str, kind: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    watcher = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    question = user_message("slow")
    running = chat_request([question])
    rid = str(running["id"])
    await ws.send(running)
    await ws.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 5, timeout=20)
    if kind == "edit":
        second = chat_request([edited(question, "fast instead")])
    else:
        second = chat_request([question], trigger="regenerate-message")
    await ws.send(second)

    # The running reply ends as a cancel does, for its sender and for every tab on main.
    ended = await ws.wait_done(rid)
    assert ended.get("outcome") == "aborted"
    assert (await watcher.wait_done(rid)).get("outcome") == "aborted"
    fork = await switched_to(ws, kind)
    await ws.wait_done(str(second["id"]))
    switch_at = next(
        i for i, f in enumerate(ws.frames) if f.get("type") == "durachat_branch_switched"
    )
    end_at = next(i for i, f in enumerate(ws.frames) if f.get("id") == rid and f.get("done"))
    assert end_at < switch_at, "the cancelled reply ends before the sender moves"

    # Its partial stays on main, a prefix of the full reply; the new reply is on the fork.
    async def partial_stored() -> list[dict[str, Any]] | None:
        history = await get_messages(cluster.urls[0], AGENT, conversation)
        return history if len(history) == 2 else None

    history = await eventually(partial_stored, timeout=10)
    partial = history[1]["parts"][-1]["text"]
    assert partial and SLOW_TEXT.startswith(partial) and partial != SLOW_TEXT
    assert history[0] == question
    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    expected = "fast instead" if kind == "edit" else "slow"
    assert texts(on_fork)[0] == expected
    assert len(on_fork) == 2 and on_fork[1]["id"] != history[1]["id"]
    # The tab on main never saw the forked reply.
    assert all(f.get("id") != second["id"] for f in watcher.frames)
    await ws.close()
    await watcher.close()


async def test_a_reload_on_the_fork_resumes_its_streaming_reply(
    cluster: LocalCluster, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([*main[:2], edited(main[2], "slow")])
    rid = str(edit["id"])
    await ws.send(edit)
    fork = await switched_to(ws, "edit")
    await ws.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 3, timeout=20)
    await ws.close()

    # The page reloads with the branch in its URL, through the other gateway.
    reloaded = await WsClient.connect(cluster.urls[1], AGENT, conversation, branch=fork)
    offer = await reloaded.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
    assert offer["id"] == rid
    await reloaded.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await reloaded.wait_done(rid, timeout=30)
    assert reloaded.text(rid) == SLOW_TEXT
    on_fork = await get_messages(cluster.urls[0], AGENT, conversation, branch=fork)
    assert texts(on_fork)[-1] == SLOW_TEXT
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    await reloaded.close()


async def test_a_retried_edit_forks_once(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([*main[:2], edited(main[2], "again")])
    await ws.send(edit)
    fork = await switched_to(ws, "edit")
    await ws.wait_done(str(edit["id"]))
    # The same request again, from a tab still on main (a client retrying after a drop): it
    # is moved to the fork and told how the request ended.
    retry = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    await retry.send(edit)
    assert await switched_to(retry, "edit") == fork
    await retry.wait_done(str(edit["id"]))
    listed = (await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"]
    assert len(listed) == 2
    assert not retry.chunks(str(edit["id"]))
    await ws.close()
    await retry.close()
