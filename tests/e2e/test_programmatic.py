"""The programmatic API from an agent's `on_chat_response`: save_messages, continue_last_turn."""

from __future__ import annotations

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "programmatic-agent"


async def test_save_messages_runs_a_turn_every_tab_sees(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("schedule:later")])
    await a.send(request)
    await a.wait_done(request["id"])
    # The agent's own turn streams to the tab like any other.
    start = await a.wait_for(
        lambda f: (
            f.get("type") == "cf_agent_use_chat_response"
            and f.get("id") != request["id"]
            and f.get("seq") == 0
        )
    )
    await a.wait_done(start["id"])
    assert a.text(start["id"]) == "echo: later"
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[2]["id"] == f"scheduled-{request['id']}"
    assert history[3]["parts"][-1]["text"] == "echo: later"
    await a.close()


async def test_continue_last_turn_appends_to_the_last_reply(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("more")])
    await a.send(request)
    await a.wait_done(request["id"])
    follow = await a.wait_for(lambda f: f.get("continuation") is True and f.get("done") is True)
    assert a.text(follow["id"]) == " (continued)"
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    texts = [p["text"] for p in history[1]["parts"] if p["type"] == "text"]
    assert "".join(texts) == "echo: more (continued)"
    await a.close()


async def test_wait_until_stable_and_persist_messages(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("stable?")])
    await a.send(request)
    await a.wait_done(request["id"])
    update = await a.wait_for(
        lambda f: (
            f.get("type") == "cf_agent_chat_messages" and f["messages"][-1].get("role") == "system"
        )
    )
    assert update["messages"][-1]["parts"][0]["text"] == "stable=True pending=False"
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant", "system"]
    await a.close()


async def test_abort_request_ends_the_running_turn(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("abort-self slow")])
    await a.send(request)
    done = await a.wait_done(request["id"])
    assert done["outcome"] == "aborted"
    assert a.text(request["id"]).startswith("s00 ") and len(a.text(request["id"])) < 40
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    await a.close()
