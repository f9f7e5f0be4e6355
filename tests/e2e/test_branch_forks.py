"""Edit and regenerate keep the viewer where it is: a chat request whose transcript leaves the
viewed branch's path is answered on that same branch, after the path it replaces has been kept
as a new branch. Nothing is deleted or overwritten, and a client that never names a branch
sees what the reference shows, after a reload too. Raw WebSocket frames, as the Cloudflare
client sends them."""

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


async def branches(http: httpx.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    return list((await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"])


async def kept(http: httpx.AsyncClient, conversation: str, kind: str) -> dict[str, Any]:
    """The one branch that keeps what an edit or a regenerate replaced."""
    [found] = [b for b in await branches(http, conversation) if b["name"].startswith(f"{kind}-")]
    return found


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["parts"][-1]["text"]) if m["parts"] else "" for m in messages]


async def test_an_edit_that_keeps_the_id_answers_on_main_and_keeps_the_old_path(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    watcher = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    main_id = (await branches(http, conversation))[0]["id"]

    edit = chat_request([*main[:2], edited(main[2], "two, edited")])
    await ws.send(edit)
    await ws.wait_done(str(edit["id"]))
    assert ws.text(str(edit["id"])) == "echo: two, edited"

    # A reload without a branch (get-messages) shows the edit, as the reference does.
    now = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["id"] for m in now[:3]] == [m["id"] for m in main[:3]]
    assert texts(now) == ["one", "echo: one", "two, edited", "echo: two, edited"]
    # The replaced path is kept whole as a branch forked from main at the edit's parent.
    record = await kept(http, conversation, "edit")
    assert (record["parent_branch_id"], record["fork_message_id"]) == (main_id, main[1]["id"])
    assert record["leaf_message_id"] == main[3]["id"]
    old = await get_messages(cluster.urls[0], AGENT, conversation, branch=str(record["id"]))
    assert old == main
    # The two versions of `two` are siblings, each with the branch that shows it.
    siblings = await http.get(
        f"/agents/{AGENT}/{conversation}/messages/{main[2]['id']}/siblings",
    )
    assert siblings.json() == {
        "siblings": [main[2]["id"], main[2]["id"]],
        "index": 1,
        "alternatives": [
            {
                "message_id": main[2]["id"],
                "branch": str(record["id"]),
                "branch_name": record["name"],
            },
            {"message_id": main[2]["id"], "branch": "main", "branch_name": "main"},
        ],
    }

    # Nobody was moved; the sender goes on on main.
    assert not ws.of_type("durachat_branch_switched")
    follow = chat_request([*now, user_message("three")])
    await ws.send(follow)
    await ws.wait_done(str(follow["id"]))
    later = await get_messages(cluster.urls[0], AGENT, conversation)
    assert texts(later)[-2:] == ["three", "echo: three"]
    # The other tab on main received the edited transcript, then the reply, as the reference
    # sends them.
    incoming = watcher.of_type("cf_agent_chat_messages")
    assert any(texts(f["messages"]) == ["one", "echo: one", "two, edited"] for f in incoming)
    assert watcher.text(str(edit["id"])) == "echo: two, edited"
    assert not watcher.of_type("durachat_branch_switched")
    await ws.close()
    await watcher.close()


async def test_an_edit_with_a_new_id_rewinds_too(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    replacement = user_message("two, rephrased")
    edit = chat_request([*main[:2], replacement])
    await ws.send(edit)
    await ws.wait_done(str(edit["id"]))
    now = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["id"] for m in now[:3]] == [main[0]["id"], main[1]["id"], replacement["id"]]
    record = await kept(http, conversation, "edit")
    assert record["fork_message_id"] == main[1]["id"]
    assert await get_messages(cluster.urls[0], AGENT, conversation, branch=record["name"]) == main
    await ws.close()


async def test_editing_the_first_message_rewinds_to_the_root(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([edited(main[0], "uno")])
    await ws.send(edit)
    await ws.wait_done(str(edit["id"]))
    assert texts(await get_messages(cluster.urls[0], AGENT, conversation)) == ["uno", "echo: uno"]
    record = await kept(http, conversation, "edit")
    assert record["fork_message_id"] is None and record["parent_branch_id"] is not None
    assert await get_messages(cluster.urls[0], AGENT, conversation, branch=record["name"]) == main
    # The id occurs twice; main holds one of them, so no branch is needed.
    roots = await http.get(f"/agents/{AGENT}/{conversation}/messages/{main[0]['id']}/siblings")
    body = roots.json()
    assert (body["siblings"], body["index"]) == ([main[0]["id"], main[0]["id"]], 1)
    assert [a["branch"] for a in body["alternatives"]] == [str(record["id"]), "main"]
    await ws.close()


async def test_regenerating_an_earlier_reply_keeps_what_followed_it(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    # The AI SDK's regenerate({messageId: a1}) sends the transcript up to a1's user message.
    again = chat_request(main[:1], trigger="regenerate-message")
    await ws.send(again)
    await ws.wait_done(str(again["id"]))
    now = await get_messages(cluster.urls[0], AGENT, conversation)
    assert now[0] == main[0] and len(now) == 2
    assert now[1]["id"] != main[1]["id"]
    record = await kept(http, conversation, "regenerate")
    assert record["fork_message_id"] == main[0]["id"]
    assert await get_messages(cluster.urls[0], AGENT, conversation, branch=record["name"]) == main
    siblings = await http.get(f"/agents/{AGENT}/{conversation}/messages/{now[1]['id']}/siblings")
    body = siblings.json()
    assert (body["siblings"], body["index"]) == ([main[1]["id"], now[1]["id"]], 1)
    assert [a["branch"] for a in body["alternatives"]] == [str(record["id"]), "main"]
    # Seen from the kept branch, its own reply is the one shown there.
    there = await http.get(
        f"/agents/{AGENT}/{conversation}/messages/{main[1]['id']}/siblings",
        params={"branch": record["id"]},
    )
    assert there.json()["index"] == 0
    assert [a["branch"] for a in there.json()["alternatives"]] == [str(record["id"]), "main"]
    await ws.close()


@pytest.mark.parametrize("kind", ["edit", "regenerate"])
async def test_while_a_reply_streams_it_is_cancelled_kept_and_then_replaced(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str, kind: str
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
    await ws.wait_done(str(second["id"]))
    await watcher.wait_done(str(second["id"]))

    # Its partial is kept on the new branch, a prefix of the full reply; main has the new one.
    record = await kept(http, conversation, kind)
    old = await get_messages(cluster.urls[0], AGENT, conversation, branch=record["name"])
    partial = old[1]["parts"][-1]["text"]
    assert partial and SLOW_TEXT.startswith(partial) and partial != SLOW_TEXT
    assert old[0] == question

    async def replaced() -> list[dict[str, Any]] | None:
        history = await get_messages(cluster.urls[0], AGENT, conversation)
        return history if len(history) == 2 and history[1]["id"] != old[1]["id"] else None

    now = await eventually(replaced, timeout=10)
    expected = "fast instead" if kind == "edit" else "slow"
    assert texts(now)[0] == expected
    # Both tabs on main saw the new reply stream.
    assert watcher.text(str(second["id"])) == ws.text(str(second["id"]))
    await ws.close()
    await watcher.close()


async def test_a_reload_mid_reply_after_an_edit_resumes_it_on_main(
    cluster: LocalCluster, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([*main[:2], edited(main[2], "slow")])
    rid = str(edit["id"])
    await ws.send(edit)
    await ws.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 3, timeout=20)
    await ws.close()

    # The page reloads without naming a branch, through the other gateway.
    reloaded = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    offer = await reloaded.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
    assert offer["id"] == rid
    await reloaded.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await reloaded.wait_done(rid, timeout=30)
    assert reloaded.text(rid) == SLOW_TEXT

    async def stored() -> list[dict[str, Any]] | None:
        history = await get_messages(cluster.urls[0], AGENT, conversation)
        return history if texts(history)[-1] == SLOW_TEXT else None

    now = await eventually(stored, timeout=10)
    assert texts(now)[:3] == ["one", "echo: one", "slow"]
    await reloaded.close()


async def test_a_retried_edit_runs_once(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    edit = chat_request([*main[:2], edited(main[2], "again")])
    await ws.send(edit)
    await ws.wait_done(str(edit["id"]))
    after = await get_messages(cluster.urls[0], AGENT, conversation)
    # The same request again (a client retrying after a drop): told how it ended, nothing
    # more is kept or rewound.
    retry = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    await retry.send(edit)
    await retry.wait_done(str(edit["id"]))
    assert len(await branches(http, conversation)) == 2
    assert not retry.chunks(str(edit["id"]))
    assert await get_messages(cluster.urls[0], AGENT, conversation) == after
    await ws.close()
    await retry.close()


async def test_a_branch_other_than_main_rewinds_the_same_way(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    main = await two_turns(ws, cluster.urls[0], conversation)
    created = await http.post(f"/agents/{AGENT}/{conversation}/branches", json={"name": "alt"})
    assert created.status_code == 201
    on_alt = await WsClient.connect(cluster.urls[1], AGENT, conversation, branch="alt")
    again = chat_request(main[:3], trigger="regenerate-message")
    await on_alt.send(again)
    await on_alt.wait_done(str(again["id"]))
    alt = await get_messages(cluster.urls[0], AGENT, conversation, branch="alt")
    assert alt[:3] == main[:3] and alt[3]["id"] != main[3]["id"]
    record = await kept(http, conversation, "regenerate")
    assert record["parent_branch_id"] == created.json()["id"]
    assert await get_messages(cluster.urls[0], AGENT, conversation, branch=record["name"]) == main
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    assert all(f.get("id") != again["id"] for f in ws.frames)
    await ws.close()
    await on_alt.close()
