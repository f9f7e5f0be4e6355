"""End to end through real gateway and shard processes over real sockets."""

from __future__ import annotations

import json

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"


async def test_send_streams_and_persists(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    a = await WsClient.connect(url, AGENT, conversation)
    identity = await a.wait_for(lambda f: f.get("type") == "cf_agent_identity")
    assert identity == {"type": "cf_agent_identity", "name": conversation, "agent": AGENT}
    await a.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    user = user_message("hello world")
    request = chat_request([user])
    await a.send(request)
    done = await a.wait_done(request["id"])
    assert done.get("messageIds") == [user["id"]]
    assert "outcome" not in done
    chunks = a.chunks(request["id"])
    assert chunks[0]["type"] == "start" and chunks[0]["messageId"].startswith("assistant_")
    assert [c["type"] for c in chunks][-2:] == ["finish-step", "finish"]
    assert a.text(request["id"]) == "echo: hello world"
    seqs = [f["seq"] for f in a.frames if f.get("id") == request["id"] and "seq" in f]
    assert seqs == list(range(len(chunks)))
    history = await get_messages(url, AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0] == user
    assert history[1]["id"] == chunks[0]["messageId"]
    assert {"type": "text", "text": "echo: hello world", "state": "done"} in history[1]["parts"]
    # The requester never gets the post-turn transcript of its own request.
    assert a.of_type("cf_agent_chat_messages") == []
    await a.close()


async def test_two_tabs_on_two_gateways_see_the_same_frames(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    await b.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    request = chat_request([user_message("one two three")])
    await a.send(request)
    await a.wait_done(request["id"])
    await b.wait_done(request["id"])
    ours = [f for f in a.frames if f.get("id") == request["id"]]
    theirs = [f for f in b.frames if f.get("id") == request["id"]]
    assert ours == theirs
    broadcasts = b.of_type("cf_agent_chat_messages")
    assert broadcasts[0]["messages"][-1]["role"] == "user"
    assert [m["role"] for m in broadcasts[-1]["messages"]] == ["user", "assistant"]
    await a.close()
    await b.close()


async def _resume(client: WsClient, request_id: str) -> None:
    probe = "probe123"
    mark = len(client.frames)
    await client.send({"type": "cf_agent_stream_resume_request", "probeId": probe})
    offer = await client.wait_for(
        lambda f: f.get("type") == "cf_agent_stream_resuming" and f.get("probeId") == probe,
        after=mark,
    )
    assert offer["id"] == request_id
    await client.send({"type": "cf_agent_stream_resume_ack", "id": request_id})


def _assert_exactly_once(frames: list[dict[str, object]], request_id: str) -> None:
    chunk_frames = [
        f for f in frames if f.get("id") == request_id and isinstance(f.get("seq"), int)
    ]
    seqs = [f["seq"] for f in chunk_frames]
    assert seqs == list(range(len(seqs))), seqs
    text = "".join(
        json.loads(str(f["body"])).get("delta", "")
        for f in chunk_frames
        if json.loads(str(f["body"]))["type"] == "text-delta"
    )
    assert text == "".join(f"s{i:02d} " for i in range(50))


async def test_dropped_socket_resumes_exactly_once(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("please be slow")])
    await a.send(request)
    await a.wait_for(lambda f: f.get("id") == request["id"] and f.get("seq") == 5, timeout=20)
    seen_before = [f for f in a.frames if f.get("id") == request["id"]]
    await a.close()
    # Same _pk, through the other gateway.
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation, pk=a.pk)
    first = await b.wait_for(lambda f: True)
    assert first == {"type": "cf_agent_stream_resuming", "id": request["id"]}
    await _resume(b, request["id"])
    complete = await b.wait_for(lambda f: f.get("replayComplete") is True, timeout=20)
    assert complete["done"] is False
    await b.wait_done(request["id"], timeout=30)
    replayed = [f for f in b.frames if f.get("id") == request["id"] and f.get("replay")]
    live = [f for f in b.frames if f.get("id") == request["id"] and not f.get("replay")]
    # The replay covers every chunk the old socket had seen (and the replay end marker).
    replayed_chunks = [f for f in replayed if "seq" in f]
    assert len(replayed_chunks) >= len([f for f in seen_before if "seq" in f])
    _assert_exactly_once([*replayed, *live], request["id"])
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert history[-1]["parts"][-1]["text"] == "".join(f"s{i:02d} " for i in range(50))
    await b.close()


async def test_reload_mid_stream_resumes(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("slow please")])
    await a.send(request)
    await a.wait_for(lambda f: f.get("id") == request["id"] and f.get("seq") == 3, timeout=20)
    await a.close()
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user"]
    # A reload is a new client: a new _pk.
    b = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    await _resume(b, request["id"])
    await b.wait_done(request["id"], timeout=30)
    frames = [f for f in b.frames if f.get("id") == request["id"]]
    _assert_exactly_once(frames, request["id"])
    await b.close()


async def test_cancel_persists_the_partial_reply(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("slow")])
    await a.send(request)
    await a.wait_for(lambda f: f.get("id") == request["id"] and f.get("seq") == 4, timeout=20)
    await a.send({"type": "cf_agent_chat_request_cancel", "id": request["id"]})
    done = await a.wait_done(request["id"])
    assert done["outcome"] == "aborted"
    text = a.text(request["id"])
    assert text.startswith("s00 s01 ") and len(text) < 250
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["parts"][-1]["text"] == text
    await a.close()


async def test_clear_empties_the_chat_and_tells_other_tabs(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    request = chat_request([user_message("hi")])
    await a.send(request)
    await a.wait_done(request["id"])
    await a.send({"type": "cf_agent_chat_clear"})
    await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_clear")
    assert await get_messages(cluster.urls[0], AGENT, conversation) == []
    assert a.of_type("cf_agent_chat_clear") == []
    # The chat works afterwards.
    again = chat_request([user_message("after clear")])
    await a.send(again)
    await a.wait_done(again["id"])
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["parts"][-1]["text"] for m in history] == ["after clear", "echo: after clear"]
    await a.close()
    await b.close()


async def test_regenerate_leaves_no_stale_assistant(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    user = user_message("regen me")
    first = chat_request([user])
    await a.send(first)
    await a.wait_done(first["id"])
    first_id = a.chunks(first["id"])[0]["messageId"]
    second = chat_request([user], trigger="regenerate-message")
    await a.send(second)
    await a.wait_done(second["id"])
    second_id = a.chunks(second["id"])[0]["messageId"]
    assert second_id != first_id
    # As the reference: the transcript ends with the new reply and has no stale assistant
    # message. Nothing was deleted: the replaced reply is kept on a branch of its own.
    assert not a.of_type("durachat_branch_switched")
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["id"] for m in history] == [user["id"], second_id]
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=20) as http:
        listed = (await http.get(f"/agents/{AGENT}/{conversation}/branches")).json()["branches"]
    [kept] = [b for b in listed if b["name"].startswith("regenerate-")]
    old = await get_messages(cluster.urls[0], AGENT, conversation, branch=str(kept["id"]))
    assert [m["id"] for m in old] == [user["id"], first_id]
    await a.close()


async def test_identical_replies_never_merge(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    u1 = user_message("sure")
    r1 = chat_request([u1])
    await a.send(r1)
    await a.wait_done(r1["id"])
    a1 = {
        "id": a.chunks(r1["id"])[0]["messageId"],
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Sure", "state": "done"}],
    }
    u2 = user_message("sure")
    r2 = chat_request([u1, a1, u2])
    await a.send(r2)
    await a.wait_done(r2["id"])
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[1]["id"] != history[3]["id"]
    # A client that syncs a transcript whose assistant ids it made up locally (same texts)
    # reconciles one-to-one: no merge, no duplicate.
    local = [dict(m) for m in history]
    local[1] = {**local[1], "id": "local-1"}
    local[3] = {**local[3], "id": "local-2"}
    await a.send({"type": "cf_agent_chat_messages", "messages": local})
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    await b.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    after = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["id"] for m in after] == [m["id"] for m in history]
    await a.close()
    await b.close()


async def test_overlapping_sends_are_queued(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    u1 = user_message("first message with several words in it")
    r1 = chat_request([u1])
    await a.send(r1)
    await a.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2)
    in_flight = {"id": a.chunks(r1["id"])[0]["messageId"], "role": "assistant", "parts": []}
    u2 = user_message("second")
    r2 = chat_request([u1, in_flight, u2])
    await a.send(r2)
    await a.wait_done(r2["id"])
    order = [f["id"] for f in a.frames if f.get("id") in (r1["id"], r2["id"])]
    last_r1 = max(i for i, x in enumerate(order) if x == r1["id"])
    first_r2 = min(i for i, x in enumerate(order) if x == r2["id"])
    assert last_r1 < first_r2
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["id"] for m in history][:3] == [u1["id"], in_flight["id"], u2["id"]]
    assert history[1]["parts"][-1]["text"] == "echo: first message with several words in it"
    assert history[3]["parts"][-1]["text"] == "echo: second"
    await a.close()


async def test_malformed_frames_get_errors_and_the_socket_stays_usable(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    await a.send("not json at all")
    await a.send(json.dumps({"type": 42}))
    await a.send(json.dumps({"type": "something_else"}))
    bad = {
        "id": "bad1",
        "init": {"method": "POST", "body": "{oops"},
        "type": "cf_agent_use_chat_request",
    }
    await a.send(json.dumps(bad))
    errors = [
        await a.wait_for(lambda f, code=code: f.get("code") == code)  # type: ignore[misc]
        for code in ("invalid_json", "invalid_frame", "unknown_frame")
    ]
    assert all(e["type"] == "durachat_error" for e in errors)
    failed = await a.wait_done("bad1")
    assert failed["outcome"] == "error"
    assert any(f.get("id") == "bad1" and f.get("error") and not f["done"] for f in a.frames)
    request = chat_request([user_message("still fine")])
    await a.send(request)
    await a.wait_done(request["id"])
    assert a.text(request["id"]) == "echo: still fine"
    await a.close()


async def test_http_answers_like_the_reference(cluster: LocalCluster, conversation: str) -> None:
    base = cluster.urls[0]
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get(f"/agents/{AGENT}/{conversation}/get-messages")).json() == []
        assert (await http.post(f"/agents/{AGENT}/{conversation}/get-messages")).status_code == 200
        unknown = await http.get(f"/agents/no-such-agent/{conversation}/get-messages")
        assert (unknown.status_code, unknown.text) == (400, "Invalid request")
        pascal = await http.get(f"/agents/ChatAgent/{conversation}")
        assert (pascal.status_code, pascal.text) == (400, "Invalid request")
        other = await http.get(f"/agents/{AGENT}/{conversation}")
        assert (other.status_code, other.text) == (404, "Not implemented")
        cluster_view = (await http.get("/v1/cluster")).json()
        assert len(cluster_view["shards"]) == 2
        pids = {p.pid for p in cluster.processes if p.role == "shard"}
        assert {s["pid"] for s in cluster_view["shards"]} == pids
        owner = (
            await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": conversation})
        ).json()
        assert owner["pid"] in pids


async def test_a_repeated_request_id_runs_once(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("only once")])
    await a.send(request)
    await a.wait_done(request["id"])
    mark = len(a.frames)
    # A retried frame (same request id) is acknowledged but never runs a second turn.
    await a.send(request)
    follow_up = chat_request([user_message("next")])
    await a.send(follow_up)
    await a.wait_done(follow_up["id"])
    # The retry is only told how its request ended; no turn runs again.
    repeat = [f for f in a.frames[mark:] if f.get("id") == request["id"]]
    assert [f.get("done") for f in repeat] == [True]
    assert "seq" not in repeat[0]
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    await a.close()


async def test_a_queued_request_does_not_hide_the_running_stream(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    u1 = user_message("slow first")
    r1 = chat_request([u1])
    await a.send(r1)
    await a.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    r2 = chat_request([u1, user_message("queued second")])
    await a.send(r2)
    # A tab opening now is offered the stream that is running, not the queued one.
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    offer = await b.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
    assert offer["id"] == r1["id"]
    await a.wait_done(r2["id"], timeout=30)
    await a.close()
    await b.close()


async def test_clear_during_a_stream_keeps_nothing_of_it(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("slow and then cleared")])
    await a.send(request)
    await a.wait_for(lambda f: f.get("id") == request["id"] and f.get("seq") == 3, timeout=20)
    await a.send({"type": "cf_agent_chat_clear"})
    done = await a.wait_done(request["id"])
    assert done["outcome"] == "aborted"
    assert await get_messages(cluster.urls[0], AGENT, conversation) == []
    await a.close()
