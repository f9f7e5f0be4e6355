"""Connections view one branch: `?branch=` on the WebSocket, `durachat_branch_switch`, and
chunks and broadcasts of a branch reach only its viewers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


async def forked(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> list[dict[str, Any]]:
    """`[u1, a1, u2, a2]` on main and a branch `alt` forked at a1; returns main's messages."""
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    u1, u2 = user_message("one"), user_message("two")
    first = chat_request([u1])
    await ws.send(first)
    await ws.wait_done(first["id"])
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    second = chat_request([*history, u2])
    await ws.send(second)
    await ws.wait_done(second["id"])
    await ws.close()
    main = await get_messages(cluster.urls[0], AGENT, conversation)
    created = await http.post(
        f"/agents/{AGENT}/{conversation}/branches", json={"name": "alt", "at": main[1]["id"]}
    )
    assert created.status_code == 201, created.text
    return list(main)


async def test_a_reply_on_one_branch_is_not_shown_on_another(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    main = await forked(cluster, http, conversation)
    on_main = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    on_alt = await WsClient.connect(cluster.urls[1], AGENT, conversation, branch="alt")
    request = chat_request([*main[:2], user_message("three")])
    await on_alt.send(request)
    await on_alt.wait_done(str(request["id"]))
    assert on_alt.text(str(request["id"])) == "echo: three"
    # The main tab saw nothing of it: no chunk, no transcript broadcast.
    await on_main.send({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    await on_main.wait_for(lambda f: f.get("probeId") == "p")
    assert all(f.get("id") != request["id"] for f in on_main.frames)
    assert not on_main.of_type("cf_agent_chat_messages")
    alt = await get_messages(cluster.urls[0], AGENT, conversation, branch="alt")
    assert [m["role"] for m in alt] == ["user", "assistant", "user", "assistant"]
    assert alt[2]["parts"][0]["text"] == "three"
    assert await get_messages(cluster.urls[0], AGENT, conversation) == main
    await on_main.close()
    await on_alt.close()


async def test_switching_to_a_branch_mid_stream_resumes_its_reply(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    main = await forked(cluster, http, conversation)
    on_alt = await WsClient.connect(cluster.urls[0], AGENT, conversation, branch="alt")
    viewer = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    request = chat_request([*main[:2], user_message("slow on alt")])
    rid = str(request["id"])
    await on_alt.send(request)
    await on_alt.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 5, timeout=20)
    await viewer.send({"type": "durachat_branch_switch", "branch": "alt"})
    switched = await viewer.wait_for(lambda f: f.get("type") == "durachat_branch_switched")
    assert switched["branch"] != "main"
    shown = await viewer.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")
    assert [m["id"] for m in shown["messages"]][:2] == [main[0]["id"], main[1]["id"]]
    offer = await viewer.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
    assert offer["id"] == rid
    await viewer.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await viewer.wait_done(rid, timeout=30)
    assert viewer.text(rid) == SLOW_TEXT
    await viewer.send({"type": "durachat_branches"})
    listed = await viewer.wait_for(lambda f: f.get("type") == "durachat_branches")
    assert [b["name"] for b in listed["branches"]] == ["main", "alt"]
    assert listed["viewing"] == switched["branch"]
    await on_alt.close()
    await viewer.close()


async def test_an_unknown_branch_gets_a_clear_error(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    await forked(cluster, http, conversation)
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation, branch="nope")
    error = await ws.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "unknown_branch"
    await ws.send({"type": "durachat_branch_switch", "branch": "also-nope"})
    again = await ws.wait_for(lambda f: f.get("type") == "durachat_error" and f is not error)
    assert again["code"] == "unknown_branch"
    # The connection stays usable, on main.
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    request = chat_request([*history, user_message("still here")])
    await ws.send(request)
    await ws.wait_done(str(request["id"]))
    assert ws.text(str(request["id"])) == "echo: still here"
    await ws.close()


async def test_branch_ops_over_the_socket_answer_as_the_http_api(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    main = await forked(cluster, http, conversation)
    ws = await WsClient.connect(cluster.urls[1], AGENT, conversation, branch="alt")
    base = f"/agents/{AGENT}/{conversation}"
    answers = 0

    async def op(**fields: str | int) -> tuple[int, dict[str, Any]]:
        nonlocal answers
        answers += 1
        ask = str(answers)
        await ws.send({"type": "durachat_branch_op", "id": ask, **fields})
        answer = await ws.wait_for(
            lambda f: f.get("type") == "durachat_branch_op" and f.get("id") == ask
        )
        assert answer["op"] == fields.get("op")
        return answer["status"], answer["body"]

    # Siblings on the viewed branch by default, as GET …/siblings?branch=alt answers.
    over_http = await http.get(
        f"{base}/messages/{main[1]['id']}/siblings", params={"branch": "alt"}
    )
    assert await op(op="siblings", messageId=main[1]["id"]) == (200, over_http.json())
    assert (await op(op="siblings", messageId="nope"))[1]["code"] == "unknown_message"
    listed = (await http.get(f"{base}/branches")).json()["branches"]
    alt = next(b for b in listed if b["name"] == "alt")
    # A branch id may be given as the number BranchOut has.
    by_id = await op(op="siblings", messageId=main[1]["id"], branch=alt["id"])
    assert by_id == (200, over_http.json())

    # Create from the viewed branch, rename, then fork it into a conversation of its own.
    status, created = await op(op="create", name="side", at=main[0]["id"])
    assert status == 201 and created["name"] == "side"
    assert created["fork_message_id"] == main[0]["id"]
    assert created["parent_branch_id"] == alt["id"]
    assert (await op(op="create", name="side"))[1]["code"] == "branch_exists"
    status, renamed = await op(op="rename", branch="side", name="side-2")
    assert (status, renamed["id"], renamed["name"]) == (200, created["id"], "side-2")
    copy = f"{conversation}-copy"
    assert await op(op="fork", branch="side-2", name=copy) == (
        201,
        {"agent": AGENT, "name": copy},
    )
    copied = await get_messages(cluster.urls[0], AGENT, copy)
    assert [m["id"] for m in copied] == [main[0]["id"]]

    # Delete the branch this very connection views: it is moved to main, before the answer.
    assert await op(op="delete", branch="alt") == (200, {"deleted_messages": 0})
    moved = await ws.wait_for(lambda f: f.get("type") == "durachat_branch_switched")
    assert (moved["branch"], moved["reason"]) == ("main", "deleted")
    answered = next(f for f in ws.frames if f.get("op") == "delete" and "status" in f)
    assert ws.frames.index(moved) < ws.frames.index(answered)
    assert (await op(op="delete", branch="main"))[:1] == (409,)

    # Bad requests get 400 with a stable code; the socket stays usable.
    for fields in ({"op": "rename", "name": "x"}, {"op": "delete"}, {"op": "explode"}):
        status, body = await op(**fields)
        assert (status, body["code"]) == (400, "invalid_request"), fields
    names = [b["name"] for b in (await http.get(f"{base}/branches")).json()["branches"]]
    assert names == ["main", "side-2"]
    await ws.close()
