"""The branch write API through real gateways and the owner shard: create, rename, delete, fork
into a new conversation, and their errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"


@pytest.fixture
async def http(cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=cluster.urls[1], timeout=20) as client:
        yield client


async def two_turns(cluster: LocalCluster, conversation: str) -> list[str]:
    """A conversation `[u1, a1, u2, a2]` on main; returns the four message ids."""
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    try:
        u1, u2 = user_message("one"), user_message("two")
        first = chat_request([u1])
        await ws.send(first)
        await ws.wait_done(first["id"])
        a1 = {"id": ws.chunks(first["id"])[0]["messageId"], "role": "assistant", "parts": []}
        second = chat_request([u1, a1, u2])
        await ws.send(second)
        await ws.wait_done(second["id"])
        return [u1["id"], a1["id"], u2["id"], ws.chunks(second["id"])[0]["messageId"]]
    finally:
        await ws.close()


async def test_create_rename_delete_a_branch(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    u1, a1, _u2, _a2 = await two_turns(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"
    created = await http.post(f"{base}/branches", json={"name": "idea", "at": a1})
    assert created.status_code == 201, created.text
    branch = created.json()
    assert branch["name"] == "idea" and branch["leaf_message_id"] == a1
    assert branch["fork_message_id"] == a1
    listed = (await http.get(f"{base}/branches")).json()["branches"]
    assert [b["name"] for b in listed] == ["main", "idea"]
    path = (await http.get(f"{base}/get-messages", params={"branch": "idea"})).json()
    assert [m["id"] for m in path] == [u1, a1]

    renamed = await http.patch(f"{base}/branches/{branch['id']}", json={"name": "better idea"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "better idea"

    deleted = await http.delete(f"{base}/branches/better idea")
    # Everything on it is shared with main: nothing is deleted but the branch.
    assert deleted.status_code == 200 and deleted.json() == {"deleted_messages": 0}
    assert [b["name"] for b in (await http.get(f"{base}/branches")).json()["branches"]] == ["main"]
    assert len((await http.get(f"{base}/get-messages")).json()) == 4


async def test_branch_write_errors_have_stable_codes(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    _u1, _a1, _u2, _a2 = await two_turns(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"
    assert (await http.post(f"{base}/branches", json={"name": "x"})).status_code == 201
    taken = await http.post(f"{base}/branches", json={"name": "x"})
    assert (taken.status_code, taken.json()["code"]) == (409, "branch_exists")
    digits = await http.post(f"{base}/branches", json={"name": "123"})
    assert (digits.status_code, digits.json()["code"]) == (400, "invalid_branch_name")
    stray = await http.post(f"{base}/branches", json={"name": "y", "at": "no-such-message"})
    assert (stray.status_code, stray.json()["code"]) == (404, "unknown_message")
    main = await http.delete(f"{base}/branches/main")
    assert (main.status_code, main.json()["code"]) == (409, "main_branch")
    unknown = await http.patch(f"{base}/branches/nope", json={"name": "z"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_branch")
    agent = await http.post("/agents/no-such-agent/c/branches", json={"name": "x"})
    assert (agent.status_code, agent.json()["code"]) == (404, "unknown_agent")
    # The conversation is unharmed and still answers.
    assert len((await http.get(f"{base}/get-messages")).json()) == 4


async def test_fork_a_branch_into_a_new_conversation(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    u1, a1, _u2, _a2 = await two_turns(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"
    await http.post(f"{base}/branches", json={"name": "short", "at": a1})
    target = f"{conversation}-fork"
    forked = await http.post(f"{base}/branches/short/fork", json={"name": target})
    assert forked.status_code == 201, forked.text
    assert forked.json() == {"agent": AGENT, "name": target}
    copied = (await http.get(f"/agents/{AGENT}/{target}/get-messages")).json()
    assert [m["id"] for m in copied] == [u1, a1]
    again = await http.post(f"{base}/branches/short/fork", json={"name": target})
    assert (again.status_code, again.json()["code"]) == (409, "conversation_exists")
    # The fork is a conversation of its own: it goes on without touching the original.
    ws = await WsClient.connect(cluster.urls[0], AGENT, target)
    request = chat_request([*copied, user_message("and then")])
    await ws.send(request)
    await ws.wait_done(request["id"])
    assert ws.text(request["id"]) == "echo: and then"
    await ws.close()
    assert len((await http.get(f"{base}/get-messages")).json()) == 4


async def test_branch_operations_racing_a_streaming_reply(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    u1 = user_message("slow, while branches change")
    request = chat_request([u1])
    rid = str(request["id"])
    await ws.send(request)
    await ws.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 5, timeout=20)
    base = f"/agents/{AGENT}/{conversation}"
    # Forked at the user message while its reply streams; renamed, read, deleted meanwhile.
    created = await http.post(f"{base}/branches", json={"name": "aside", "at": u1["id"]})
    assert created.status_code == 201, created.text
    renamed = await http.patch(f"{base}/branches/aside", json={"name": "aside-2"})
    assert renamed.status_code == 200
    aside = (await http.get(f"{base}/get-messages", params={"branch": "aside-2"})).json()
    assert [m["id"] for m in aside] == [u1["id"]]
    deleted = await http.delete(f"{base}/branches/aside-2")
    assert deleted.status_code == 200 and deleted.json() == {"deleted_messages": 0}
    # The reply was not disturbed, and is stored on main.
    done = await ws.wait_done(rid, timeout=30)
    assert "outcome" not in done
    assert ws.text(rid) == "".join(f"s{i:02d} " for i in range(50))
    main = (await http.get(f"{base}/get-messages")).json()
    assert [m["role"] for m in main] == ["user", "assistant"]
    assert [b["name"] for b in (await http.get(f"{base}/branches")).json()["branches"]] == ["main"]
    await ws.close()


async def test_deleting_a_viewed_branch_mid_reply_moves_its_viewers_to_main(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    u1, a1, _u2, _a2 = await two_turns(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"
    created = await http.post(f"{base}/branches", json={"name": "doomed", "at": a1})
    assert created.status_code == 201, created.text
    on_branch = await WsClient.connect(cluster.urls[0], AGENT, conversation, branch="doomed")
    on_main = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    transcript = (await http.get(f"{base}/get-messages", params={"branch": "doomed"})).json()
    request = chat_request([*transcript, user_message("slow on a doomed branch")])
    rid = str(request["id"])
    await on_branch.send(request)
    await on_branch.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 5, timeout=20)

    deleted = await http.delete(f"{base}/branches/doomed")
    assert deleted.status_code == 200, deleted.text
    # The user message and the partial reply were only on that branch.
    assert deleted.json() == {"deleted_messages": 2}
    # Its reply ends as a cancel does; then its viewer is moved to main and gets main.
    assert (await on_branch.wait_done(rid)).get("outcome") == "aborted"
    moved = await on_branch.wait_for(lambda f: f.get("type") == "durachat_branch_switched")
    assert (moved["branch"], moved["reason"]) == ("main", "deleted")
    main = (await http.get(f"{base}/get-messages")).json()
    after = on_branch.frames.index(moved)
    synced = await on_branch.wait_for(
        lambda f: f.get("type") == "cf_agent_chat_messages", after=after
    )
    assert synced["messages"] == main
    assert [b["name"] for b in (await http.get(f"{base}/branches")).json()["branches"]] == ["main"]
    # It chats on main from now on; the main tab was never moved.
    follow = chat_request([*main, user_message("back on main")])
    await on_branch.send(follow)
    await on_branch.wait_done(str(follow["id"]))
    assert [m["id"] for m in (await http.get(f"{base}/get-messages")).json()][:2] == [u1, a1]
    assert on_main.text(str(follow["id"])) == "echo: back on main"
    assert not on_main.of_type("durachat_branch_switched")
    await on_branch.close()
    await on_main.close()
