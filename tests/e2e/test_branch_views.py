"""Connections view one branch: `?branch=` on the WebSocket, `durachat_branch_switch`, and
chunks and broadcasts of a branch reach only its viewers."""

from __future__ import annotations

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


async def forked(cluster: LocalCluster, http: httpx.AsyncClient, conversation: str) -> list[dict]:
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
