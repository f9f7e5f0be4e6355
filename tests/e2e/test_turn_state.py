"""The programmatic API's `abort_all_requests` and `reset_turn_state`, driven by the test agent
`turn-state-agent` from inside a running turn (see `support.agents.TurnStateAgent`)."""

from __future__ import annotations

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import Frame, WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "turn-state-agent"
SLOW_DELTAS = 50


async def _busy(client: WsClient, *queued: str) -> tuple[list[Frame], list[Frame]]:
    """A slow send, then the `queued` messages sent while it streams (each request carries the
    transcript so far, the reply in flight as an empty message, as `useAgentChat` does).

    Returns the user messages and the requests.
    """
    u1 = user_message("slow one")
    r1 = chat_request([u1])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    in_flight = {"id": client.chunks(r1["id"])[0]["messageId"], "role": "assistant", "parts": []}
    users, requests = [u1], [r1]
    transcript = [u1, in_flight]
    for text in queued:
        users.append(user_message(text))
        transcript.append(users[-1])
        requests.append(chat_request(list(transcript)))
        await client.send(requests[-1])
    return users, requests


def _deltas(client: WsClient, request_id: str) -> int:
    return sum(1 for c in client.chunks(request_id) if c["type"] == "text-delta")


async def test_abort_all_requests_aborts_the_running_turn_only(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    (u1, u2), (r1, r2) = await _busy(a, "abort-all")

    done = await a.wait_done(r1["id"], timeout=20)
    assert done.get("outcome") == "aborted"
    partial = a.text(r1["id"])
    assert partial.startswith("s00 ") and _deltas(a, r1["id"]) < SLOW_DELTAS
    # The queued turn still runs, to completion.
    done = await a.wait_done(r2["id"], timeout=20)
    assert "outcome" not in done, done
    assert a.text(r2["id"]) == "echo: abort-all"
    # The other tab saw the same ends.
    assert (await b.wait_done(r1["id"])).get("outcome") == "aborted"
    assert b.text(r1["id"]) == partial
    await b.wait_done(r2["id"])
    assert b.text(r2["id"]) == "echo: abort-all"

    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"] * 2
    assert [history[i]["id"] for i in (0, 2)] == [u1["id"], u2["id"]]
    assert history[1]["parts"][-1]["text"] == partial
    assert history[3]["parts"][-1]["text"] == "echo: abort-all"
    await a.close()
    await b.close()


async def test_reset_turn_state_aborts_the_running_turn_and_skips_queued_ones(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    (u1, u2, u3), (r1, r2, r3) = await _busy(a, "reset-turns", "third")

    done = await a.wait_done(r1["id"], timeout=20)
    assert done.get("outcome") == "aborted"
    assert _deltas(a, r1["id"]) < SLOW_DELTAS
    # The queued requests end without running; their sender is told.
    # (`messageIds`: the request's trailing user messages, its sends.)
    for request, users in ((r2, [u2]), (r3, [u2, u3])):
        done = await a.wait_done(request["id"])
        assert done.get("outcome") == "skipped"
        assert done.get("messageIds") == [u["id"] for u in users]
        assert a.chunks(request["id"]) == []
    assert (await b.wait_done(r1["id"])).get("outcome") == "aborted"

    # Nothing is left running or pending.
    mark = len(a.frames)
    await a.send({"type": "cf_agent_stream_resume_request", "probeId": "after-reset"})
    answer = await a.wait_for(lambda f: f.get("probeId") == "after-reset", after=mark)
    assert answer["type"] == "cf_agent_stream_resume_none", answer

    # The next message runs normally, on a transcript that kept every user message.
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    users = [m["id"] for m in history if m["role"] == "user"]
    assert users == [u1["id"], u2["id"], u3["id"]]
    u4 = user_message("after the reset")
    r4 = chat_request([*history, u4])
    await a.send(r4)
    done = await a.wait_done(r4["id"], timeout=20)
    assert "outcome" not in done, done
    assert a.text(r4["id"]) == "echo: after the reset"
    await b.wait_done(r4["id"])
    assert b.text(r4["id"]) == "echo: after the reset"
    final = await get_messages(cluster.urls[0], AGENT, conversation)
    assert final[:-1] == [*history, u4]
    assert final[-1]["role"] == "assistant"
    assert final[-1]["parts"][-1]["text"] == "echo: after the reset"
    await a.close()
    await b.close()
