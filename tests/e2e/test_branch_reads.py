"""The branch read API through real gateways: the branch list, `get-messages?branch=`, the
siblings of a message, their errors and their OpenAPI description."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Query
from fastapi.responses import Response

from durachat_gateway.auth.middleware import Authenticate
from durachat_gateway.branches_api import branch_messages, branch_router
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.store import MAIN_BRANCH, ConversationKey, Store
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"


async def regenerated(cluster: LocalCluster, conversation: str) -> tuple[str, str, str]:
    """Send `[u1]`, then regenerate it: returns `(u1, a1, a1')`, a1 and a1' being siblings
    under u1, a1' on main and a1 on the branch that keeps what the regenerate replaced."""
    ws = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    try:
        user = user_message("branch me")
        first = chat_request([user])
        await ws.send(first)
        await ws.wait_done(first["id"])
        second = chat_request([user], trigger="regenerate-message")
        await ws.send(second)
        await ws.wait_done(second["id"])
        return (
            user["id"],
            ws.chunks(first["id"])[0]["messageId"],
            ws.chunks(second["id"])[0]["messageId"],
        )
    finally:
        await ws.close()


def error_code(response: httpx.Response) -> Any:
    return response.json()["code"]


def picked(response: httpx.Response) -> tuple[list[str], int]:
    """The siblings answer's ids and index."""
    assert response.status_code == 200, response.text
    body = response.json()
    return body["siblings"], body["index"]


def shown_on(response: httpx.Response) -> list[str | None]:
    """The branch each sibling is shown on."""
    return [a["branch"] for a in response.json()["alternatives"]]


async def test_branches_siblings_and_messages_of_a_regenerated_reply(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    u1, a1, a1b = await regenerated(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"

    listed = await http.get(f"{base}/branches")
    assert listed.status_code == 200, listed.text
    main, kept = listed.json()["branches"]
    assert main["name"] == MAIN_BRANCH and isinstance(main["id"], int)
    assert main["leaf_message_id"] == a1b
    assert (main["parent_branch_id"], main["fork_message_id"]) == (None, None)
    assert main["created_at"] <= main["updated_at"]
    assert kept["name"].startswith("regenerate-") and kept["leaf_message_id"] == a1
    assert (kept["parent_branch_id"], kept["fork_message_id"]) == (main["id"], u1)

    siblings = await http.get(f"{base}/messages/{a1}/siblings")
    assert picked(siblings) == ([a1, a1b], 0)
    assert shown_on(siblings) == [str(kept["id"]), MAIN_BRANCH]
    assert siblings.json()["alternatives"][0]["branch_name"] == kept["name"]
    for branch in (kept["name"], str(kept["id"]), MAIN_BRANCH):
        response = await http.get(f"{base}/messages/{a1b}/siblings", params={"branch": branch})
        assert picked(response) == ([a1, a1b], 1)
    root = await http.get(f"{base}/messages/{u1}/siblings")
    assert picked(root) == ([u1], 0)
    assert shown_on(root) == [MAIN_BRANCH]
    # From the kept branch, the root is shown on that branch.
    from_kept = await http.get(f"{base}/messages/{u1}/siblings", params={"branch": kept["name"]})
    assert shown_on(from_kept) == [str(kept["id"])]

    plain = (await http.get(f"{base}/get-messages")).json()
    assert [m["id"] for m in plain] == [u1, a1b]
    for branch in (MAIN_BRANCH, str(main["id"]), ""):
        response = await http.get(f"{base}/get-messages", params={"branch": branch})
        assert response.status_code == 200
        assert response.json() == plain
    old = await http.get(f"{base}/get-messages", params={"branch": str(kept["id"])})
    assert [m["id"] for m in old.json()] == [u1, a1]


async def test_read_errors_have_stable_codes(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    _u1, a1, a1b = await regenerated(cluster, conversation)
    base = f"/agents/{AGENT}/{conversation}"

    # a1 is not on main's path, but its id is unique in the conversation: found by id.
    off_path = await http.get(f"{base}/messages/{a1}/siblings", params={"branch": MAIN_BRANCH})
    assert picked(off_path) == ([a1, a1b], 0)
    missing = await http.get(f"{base}/messages/nope/siblings")
    assert (missing.status_code, error_code(missing)) == (404, "unknown_message")
    for branch in ("nope", "987654321", "9" * 30):
        for path in (f"{base}/get-messages", f"{base}/messages/{a1}/siblings"):
            response = await http.get(path, params={"branch": branch})
            assert (response.status_code, error_code(response)) == (404, "unknown_branch"), path

    for path in ("branches", f"messages/{a1}/siblings"):
        response = await http.get(f"/agents/no-such-agent/{conversation}/{path}")
        assert (response.status_code, error_code(response)) == (404, "unknown_agent")
    # get-messages keeps the reference's answer to an unknown agent.
    legacy = await http.get(f"/agents/no-such-agent/{conversation}/get-messages")
    assert (legacy.status_code, legacy.text) == (400, "Invalid request")


async def test_a_conversation_that_does_not_exist_yet(
    http: httpx.AsyncClient, conversation: str
) -> None:
    base = f"/agents/{AGENT}/{conversation}"

    assert (await http.get(f"{base}/branches")).json() == {"branches": []}
    assert (await http.get(f"{base}/get-messages", params={"branch": MAIN_BRANCH})).json() == []
    other = await http.get(f"{base}/get-messages", params={"branch": "alt"})
    assert (other.status_code, error_code(other)) == (404, "unknown_branch")
    message = await http.get(f"{base}/messages/m1/siblings")
    assert (message.status_code, error_code(message)) == (404, "unknown_message")
    branch = await http.get(f"{base}/messages/m1/siblings", params={"branch": "alt"})
    assert (branch.status_code, error_code(branch)) == (404, "unknown_branch")
    # Reading created nothing.
    assert (await http.get(f"{base}/branches")).json() == {"branches": []}


async def test_branches_made_in_the_store_are_served_by_id_and_name(
    cluster: LocalCluster, http: httpx.AsyncClient, conversation: str
) -> None:
    u1, a1, a1b = await regenerated(cluster, conversation)
    assert cluster.database_url is not None
    # The write API is the owner shard's (planned); here the branch is made at the store level,
    # under the epoch the owner holds, while the conversation is idle.
    async with Store.from_url(cluster.database_url) as store:
        conv = await store.find_conversation(ConversationKey("default", AGENT, conversation))
        assert conv is not None
        [u1_pk] = [m.pk for m in await store.load_path(conv.id) if m.message_id == u1]
        async with store.transaction(conv.id, conv.epoch) as tx:
            alt = await tx.create_branch("alt idea", fork_message_id=u1)
            [reply] = await tx.insert_chain(
                u1_pk, [{"id": "alt-reply", "role": "assistant", "parts": []}]
            )
            await tx.set_leaf("alt idea", reply)
    base = f"/agents/{AGENT}/{conversation}"

    main, _regenerated, listed_alt = (await http.get(f"{base}/branches")).json()["branches"]
    assert listed_alt["id"] == alt.id and listed_alt["name"] == "alt idea"
    assert listed_alt["leaf_message_id"] == "alt-reply"
    assert listed_alt["parent_branch_id"] == main["id"]
    assert listed_alt["fork_message_id"] == u1

    for branch in ("alt idea", str(alt.id)):
        on_alt = await http.get(f"{base}/get-messages", params={"branch": branch})
        assert [m["id"] for m in on_alt.json()] == [u1, "alt-reply"]
        siblings = await http.get(f"{base}/messages/alt-reply/siblings", params={"branch": branch})
        assert picked(siblings) == ([a1, a1b, "alt-reply"], 2)
        assert shown_on(siblings) == [str(_regenerated["id"]), MAIN_BRANCH, str(alt.id)]
    on_main = await http.get(f"{base}/messages/{a1}/siblings")
    assert picked(on_main) == ([a1, a1b, "alt-reply"], 0)
    assert [m["id"] for m in (await http.get(f"{base}/get-messages")).json()] == [u1, a1b]

    # An id twice in the tree and on no branch's path: the branch must decide.
    async with (
        Store.from_url(cluster.database_url) as store,
        store.transaction(conv.id, conv.epoch) as tx,
    ):
        for _ in range(2):
            await tx.insert_chain(u1_pk, [{"id": "twice", "role": "assistant", "parts": []}])
    twice = await http.get(f"{base}/messages/twice/siblings")
    assert (twice.status_code, error_code(twice)) == (409, "ambiguous_message")
    named = await http.get(f"{base}/messages/twice/siblings", params={"branch": "alt idea"})
    assert (named.status_code, error_code(named)) == (404, "unknown_message")


async def test_openapi_describes_the_branch_routes(http: httpx.AsyncClient) -> None:
    spec = (await http.get("/openapi.json")).json()
    paths = spec["paths"]

    branches = paths["/agents/{agent}/{name}/branches"]["get"]
    assert set(branches["responses"]) >= {"200", "404", "503"}
    siblings = paths["/agents/{agent}/{name}/messages/{message_id}/siblings"]["get"]
    assert "branch" in {p["name"] for p in siblings["parameters"]}
    get_messages = paths["/agents/{agent}/{name}/get-messages"]["get"]
    assert "branch" in {p["name"] for p in get_messages["parameters"]}
    schemas = spec["components"]["schemas"]
    assert set(schemas["BranchOut"]["properties"]) == {
        "id",
        "name",
        "leaf_message_id",
        "parent_branch_id",
        "fork_message_id",
        "created_at",
        "updated_at",
    }
    assert set(schemas["SiblingsOut"]["properties"]) == {"siblings", "index", "alternatives"}
    assert set(schemas["AlternativeOut"]["properties"]) == {"message_id", "branch", "branch_name"}
    assert "409" in siblings["responses"]
    assert set(schemas["ErrorBody"]["properties"]) == {"code", "message"}


class _Unavailable:
    """A runtime whose database cannot be opened."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def agents(self) -> set[str]:
        return {AGENT}


async def test_an_unavailable_database_is_503(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite:///{tmp_path / 'missing-dir' / 'store.db'}")
    runtime = _Unavailable(store)
    app = FastAPI()
    # Open mode: every request acts as the `default` tenant, as the gateway's routes expect.
    app.add_middleware(Authenticate, directory=lambda: None, open_tenant="default", required=False)
    app.include_router(branch_router(lambda: runtime))

    @app.get("/agents/{agent}/{name}/get-messages")
    async def get_messages(agent: str, name: str, branch: str = Query()) -> Response:
        return await branch_messages(store, ConversationKey("default", agent, name), branch)

    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for path in (
                f"/agents/{AGENT}/c/branches",
                f"/agents/{AGENT}/c/messages/m1/siblings",
                f"/agents/{AGENT}/c/get-messages?branch=alt",
                f"/agents/{AGENT}/c/get-messages?branch=main",
            ):
                response = await client.get(path)
                assert response.status_code == 503, path
                assert error_code(response) == "database_unavailable"
    finally:
        await store.close()
