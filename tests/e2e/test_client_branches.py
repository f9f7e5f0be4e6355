"""The Python client and the `durachat` CLI on branches, against a real cluster: viewing a
branch, following the forks of edits and regenerates, switching, reconnecting."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Any

import httpx
import pytest

from durachat.client import ChatClient, ClientError, Reply, fetch_history
from durachat_infra.local.cluster import LocalCluster
from support.cli import run_cli
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))

Message = dict[str, Any]


def texts(messages: list[Message]) -> list[str]:
    return [str(m["parts"][-1]["text"]) if m["parts"] else "" for m in messages]


def ids(messages: list[Message]) -> list[str]:
    return [str(m["id"]) for m in messages]


async def answered(reply: Reply, *, timeout: float = 20.0) -> str:
    async with asyncio.timeout(timeout):
        assert await reply.wait() == "completed", reply.error
        return await reply.text()


async def error_code(call: Awaitable[object]) -> str:
    """The code of the `ClientError` that `call` raises."""
    with pytest.raises(ClientError) as raised:
        await call
    return raised.value.code


async def two_turns(client: ChatClient) -> list[Message]:
    """`one`, then `two`, on the client's branch; returns the stored transcript (which is
    now the client's too)."""
    assert await answered(await client.send("one")) == "echo: one"
    assert await answered(await client.send("two")) == "echo: two"
    return list(await client.history())


async def create_branch(base_url: str, conversation: str, name: str, at: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=20) as http:
        created = await http.post(
            f"/agents/{AGENT}/{conversation}/branches", json={"name": name, "at": at}
        )
    assert created.status_code == 201, created.text
    return dict(created.json())


async def test_connect_to_a_branch_by_name_and_by_id(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
    alt = await create_branch(url, conversation, "alt idea", at=main[1]["id"])

    async with ChatClient.connect(
        cluster.urls[1], AGENT, conversation, branch="alt idea"
    ) as on_alt:
        # The name is looked up: the client reports (and reconnects with) the id.
        assert on_alt.branch == str(alt["id"])
        assert on_alt.messages == main[:2]
        assert await answered(await on_alt.send("three")) == "echo: three"
        assert texts(on_alt.messages) == ["one", "echo: one", "three", "echo: three"]
        assert await on_alt.history() == on_alt.messages
    alt_path = await fetch_history(url, AGENT, conversation, branch="alt idea")
    assert alt_path == await fetch_history(url, AGENT, conversation, branch=alt["id"])
    assert ids(alt_path) == ids(on_alt.messages)
    assert await fetch_history(url, AGENT, conversation) == main

    async with ChatClient.connect(url, AGENT, conversation, branch=alt["id"]) as by_id:
        assert by_id.branch == str(alt["id"])
        assert by_id.messages == alt_path
        assert await answered(await by_id.send("four")) == "echo: four"
    assert texts(await fetch_history(url, AGENT, conversation, branch=alt["id"]))[-2:] == [
        "four",
        "echo: four",
    ]
    assert await fetch_history(url, AGENT, conversation) == main

    # main by name is main.
    async with ChatClient.connect(url, AGENT, conversation, branch="main") as on_main:
        assert on_main.branch == "main" and on_main.messages == main
    unknown = "unknown_branch"
    assert await error_code(ChatClient.connect(url, AGENT, conversation, branch="nope")) == unknown
    assert await error_code(fetch_history(url, AGENT, conversation, branch="nope")) == unknown


async def kept(client: ChatClient, kind: str) -> dict[str, Any]:
    """The branch that keeps what an edit or a regenerate replaced."""
    [record] = [b for b in await client.branches() if str(b["name"]).startswith(f"{kind}-")]
    return record


async def test_regenerate_stays_on_main_and_keeps_the_old_reply_on_a_branch(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        again = await client.regenerate()
        assert await answered(again) == "echo: two"
        assert client.branch == "main" and again.branch == "main"
        assert ids(client.messages[:3]) == ids(main[:3])
        assert client.messages[3]["id"] == again.message_id != main[3]["id"]
        # Main shows the new reply, after a reload too.
        assert ids(await fetch_history(url, AGENT, conversation)) == ids(client.messages)
        assert ids(await client.history()) == ids(client.messages)

        listed = await client.branches()
        assert listed[0]["name"] == "main"
        record = await kept(client, "regenerate")
        assert record["fork_message_id"] == main[2]["id"]
        assert record["parent_branch_id"] == listed[0]["id"]
        assert record["leaf_message_id"] == main[3]["id"]
        assert await fetch_history(url, AGENT, conversation, branch=record["id"]) == main

        # The picker: the old reply is on the kept branch, the new one on main.
        alternatives, index = await client.alternatives(str(again.message_id))
        assert index == 1
        assert [a["branch"] for a in alternatives] == [str(record["id"]), "main"]
        await client.switch_branch(alternatives[0]["branch"])
        assert client.branch == str(record["id"])
        assert client.messages == main
        assert await error_code(client.switch_branch("nope")) == "unknown_branch"
        assert client.branch == str(record["id"]) and client.messages == main
        await client.switch_branch("main")
        assert ids(client.messages) == ids(await fetch_history(url, AGENT, conversation))


async def test_edit_stays_on_main_and_keeps_the_original(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        reply = await client.edit(main[2]["id"], "two, edited")
        assert await answered(reply) == "echo: two, edited"
        assert client.branch == "main" and reply.branch == "main"
        assert ids(client.messages) == [*ids(main[:3]), str(reply.message_id)]
        assert texts(client.messages) == ["one", "echo: one", "two, edited", "echo: two, edited"]
        now = await fetch_history(url, AGENT, conversation)
        assert ids(now) == ids(client.messages) and texts(now) == texts(client.messages)
        # The original is intact on the kept branch.
        record = await kept(client, "edit")
        assert record["fork_message_id"] == main[1]["id"]
        assert await fetch_history(url, AGENT, conversation, branch=record["name"]) == main

        # The client goes on chatting on main.
        assert await answered(await client.send("three")) == "echo: three"
        assert texts(await fetch_history(url, AGENT, conversation))[-2:] == ["three", "echo: three"]
        assert await fetch_history(url, AGENT, conversation, branch=record["name"]) == main

        assert await error_code(client.edit("nope", "x")) == "unknown_message"
        assert await error_code(client.edit(main[1]["id"], "x")) == "not_a_user_message"


async def test_editing_the_first_message_rewinds_to_the_root(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        reply = await client.edit(main[0]["id"], "uno")
        assert await answered(reply) == "echo: uno"
        assert client.branch == "main"
        assert texts(client.messages) == ["uno", "echo: uno"]
        assert ids(client.messages) == [main[0]["id"], str(reply.message_id)]
        now = await fetch_history(url, AGENT, conversation)
        assert ids(now) == ids(client.messages) and texts(now) == ["uno", "echo: uno"]
        record = await kept(client, "edit")
        assert record["fork_message_id"] is None
        assert await fetch_history(url, AGENT, conversation, branch=record["id"]) == main
        # The edited message's id occurs twice: seen from main, the edit is the second.
        alternatives, index = await client.alternatives(main[0]["id"])
        assert index == 1 and [a["branch"] for a in alternatives] == [str(record["id"]), "main"]


async def test_an_edit_while_a_reply_streams_cancels_it_first(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        running = await client.send("slow")
        question = client.messages[0]
        async with asyncio.timeout(20):
            async for chunk in running:
                if chunk.get("type") == "text-delta":
                    break
        reply = await client.edit(question["id"], "fast instead")
        assert await answered(reply) == "echo: fast instead"
        async with asyncio.timeout(5):
            assert await running.wait() == "aborted"
        assert running.branch == "main" and reply.branch == client.branch == "main"
        assert texts(client.messages) == ["fast instead", "echo: fast instead"]

        # The partial is kept on a branch of its own; main shows the edit.
        record = await kept(client, "edit")
        old = await fetch_history(url, AGENT, conversation, branch=record["id"])
        partial = old[1]["parts"][-1]["text"]
        assert old[0] == question and partial and SLOW_TEXT.startswith(partial)
        assert partial != SLOW_TEXT
        now = await fetch_history(url, AGENT, conversation)
        assert texts(now) == ["fast instead", "echo: fast instead"]


async def test_a_reconnect_comes_back_to_the_viewed_branch(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        side = await create_branch(url, conversation, "side", main[1]["id"])
        await client.switch_branch("side")
        fork = client.branch
        assert fork == str(side["id"])
        socket = client.websocket
        assert socket is not None
        reply = await client.send("slow on the side")
        chunks: list[dict[str, Any]] = []
        async with asyncio.timeout(40):
            async for chunk in reply:
                chunks.append(chunk)
                if sum(c.get("type") == "text-delta" for c in chunks) == 5:
                    # A network failure: no closing handshake.
                    socket.transport.abort()
        # The reply was resumed on a new socket viewing the branch (a socket on main would not
        # have been offered it).
        assert reply.outcome == "completed", reply.error
        assert await reply.text() == SLOW_TEXT
        assert client.websocket is not None and client.websocket is not socket
        assert client.branch == fork and reply.branch == fork
        assert ids(await fetch_history(url, AGENT, conversation, branch=fork)) == ids(
            client.messages
        )
        # Chatting after the reconnect goes on on the branch.
        assert await answered(await client.send("after")) == "echo: after"
        on_fork = await fetch_history(url, AGENT, conversation, branch=fork)
        assert texts(on_fork)[-2:] == ["after", "echo: after"]
        assert await fetch_history(url, AGENT, conversation) == main


async def test_two_clients_on_two_branches_see_only_their_own(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as seed:
        main = await two_turns(seed)
    alt = await create_branch(url, conversation, "alt", at=main[1]["id"])
    seen_on_main: list[Reply] = []
    seen_on_alt: list[Reply] = []
    async with (
        ChatClient.connect(url, AGENT, conversation, on_reply=seen_on_main.append) as on_main,
        ChatClient.connect(
            cluster.urls[1], AGENT, conversation, branch="alt", on_reply=seen_on_alt.append
        ) as on_alt,
        ChatClient.connect(cluster.urls[1], AGENT, conversation) as watcher,
    ):
        assert on_alt.branch == str(alt["id"])
        replies = await asyncio.gather(on_main.send("for main"), on_alt.send("for alt"))
        assert [await answered(r) for r in replies] == ["echo: for main", "echo: for alt"]
        assert texts(on_main.messages) == [*texts(main), "for main", "echo: for main"]
        assert texts(on_alt.messages) == ["one", "echo: one", "for alt", "echo: for alt"]
        # Neither saw the other's reply, and the tab watching main saw only main's.
        assert seen_on_main == [] and seen_on_alt == []

        async def watcher_caught_up() -> bool:
            return ids(watcher.messages) == ids(on_main.messages)

        await eventually(watcher_caught_up, timeout=10)
        assert "for alt" not in texts(watcher.messages)
        assert ids(await fetch_history(url, AGENT, conversation)) == ids(on_main.messages)
        assert ids(await fetch_history(url, AGENT, conversation, branch="alt")) == ids(
            on_alt.messages
        )


async def test_switching_to_a_branch_mid_stream_offers_its_reply(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as seed:
        main = await two_turns(seed)
    await create_branch(url, conversation, "alt", at=main[1]["id"])
    offered: asyncio.Queue[Reply] = asyncio.Queue()
    async with (
        ChatClient.connect(url, AGENT, conversation, branch="alt") as on_alt,
        ChatClient.connect(
            cluster.urls[1], AGENT, conversation, on_reply=offered.put_nowait
        ) as tab,
    ):
        running = await on_alt.send("slow on alt")
        async with asyncio.timeout(20):
            async for chunk in running:
                if chunk.get("type") == "text-delta":
                    break
        await tab.switch_branch("alt")
        assert tab.branch == on_alt.branch
        # The branch's stored transcript (the user message of the running reply may not be
        # stored yet: the database catches up behind a turn).
        assert ids(tab.messages[:2]) == ids(main[:2])
        async with asyncio.timeout(10):
            resumed = await offered.get()
        assert resumed.request_id == running.request_id and resumed.branch == tab.branch
        assert await answered(resumed, timeout=30) == SLOW_TEXT
        assert await answered(running, timeout=30) == SLOW_TEXT
        assert texts(tab.messages)[-1] == SLOW_TEXT
        # Once it ended, the branch's transcript went to its viewers.
        stored = await fetch_history(url, AGENT, conversation, branch="alt")
        assert ids(tab.messages) == ids(on_alt.messages) == ids(stored)
        assert texts(stored) == ["one", "echo: one", "slow on alt", SLOW_TEXT]


async def test_cli_branches(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    chat = ("chat", "--url", url, "--name", conversation)
    code, out, err = await run_cli(
        *chat, stdin="hello\n/edit hi again\n/branches\n/history\n/switch main\n/history\n"
    )
    assert code == 0, err
    prompts = out.split("you> ")
    assert prompts[1:3] == ["echo: hello\n", "echo: hi again\n"]
    listed = prompts[3].splitlines()
    assert len(listed) == 2, out
    main_line = re.fullmatch(r"\* (\d+)\tmain\t(assistant_\S+)", listed[0])
    kept_line = re.fullmatch(r"  (\d+)\t(edit-[0-9a-f]{8})\t(assistant_\S+)", listed[1])
    assert main_line is not None and kept_line is not None, listed
    kept_id, kept_name = kept_line[1], kept_line[2]
    assert prompts[4] == "you: hi again\nassistant: echo: hi again\n"
    assert prompts[5] == ""
    assert prompts[6] == "you: hi again\nassistant: echo: hi again\n"
    # The edit did not move the CLI.
    assert err.splitlines() == ["(already on branch main)"]

    code, out, err = await run_cli(
        "history", "--url", url, "--name", conversation, "--branch", kept_name
    )
    assert (code, out, err) == (0, "you: hello\nassistant: echo: hello\n", "")
    code, out, err = await run_cli(*chat, "--branch", kept_id, "again")
    assert (code, out, err) == (0, "echo: again\n", "")
    code, out, _ = await run_cli(
        "history", "--url", url, "--name", conversation, "--branch", kept_id
    )
    assert out.splitlines()[-2:] == ["you: again", "assistant: echo: again"]
    code, out, _ = await run_cli("history", "--url", url, "--name", conversation)
    assert out == "you: hi again\nassistant: echo: hi again\n"

    code, out, err = await run_cli(*chat, "--branch", "nope", "hi")
    assert code == 1 and out == ""
    assert err == "error: the conversation has no branch 'nope'\n"
    code, out, err = await run_cli(
        "history", "--url", url, "--name", conversation, "--branch", "nope"
    )
    assert code == 1 and out == "" and "no branch 'nope'" in err and "Traceback" not in err
    code, out, err = await run_cli(*chat, stdin="/switch nope\n/switch\n")
    assert code == 0
    assert err.splitlines() == [
        "error: the conversation has no branch 'nope'",
        "usage: /switch BRANCH (its id or name)",
    ]


# Branch operations over the socket (`durachat_branch_op`)


async def test_siblings_after_a_regenerate(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        again = await client.regenerate()
        assert await answered(again) == "echo: two"
        record = await kept(client, "regenerate")
        both = [main[3]["id"], again.message_id]
        # Ids unique in the conversation are found wherever they are.
        assert await client.siblings(str(again.message_id)) == (both, 1)
        assert await client.siblings(main[3]["id"]) == (both, 0)
        assert await client.siblings(main[3]["id"], branch=record["name"]) == (both, 0)
        assert await client.siblings(main[2]["id"]) == ([main[2]["id"]], 0)
        assert await error_code(client.siblings("nope")) == "unknown_message"
        assert await error_code(client.siblings(main[0]["id"], branch="nope")) == "unknown_branch"
        assert client.branch == "main"
        # What the HTTP API answers too.
        async with httpx.AsyncClient(base_url=url, timeout=20) as http:
            siblings = await http.get(
                f"/agents/{AGENT}/{conversation}/messages/{again.message_id}/siblings"
            )
        assert siblings.json() == {
            "siblings": both,
            "index": 1,
            "alternatives": [
                {"message_id": both[0], "branch": str(record["id"]), "branch_name": record["name"]},
                {"message_id": both[1], "branch": "main", "branch_name": "main"},
            ],
        }


async def test_create_rename_fork_and_delete(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        [main_record] = await client.branches()
        side = await client.create_branch("side", at=main[1]["id"])
        assert side["name"] == "side" and side["leaf_message_id"] == main[1]["id"]
        assert side["fork_message_id"] == main[1]["id"]
        assert side["parent_branch_id"] == main_record["id"]
        # At the viewed branch's leaf by default; creating does not switch.
        tip = await client.create_branch("tip")
        assert tip["leaf_message_id"] == main[3]["id"]
        assert client.branch == "main" and client.messages == main
        assert [b["name"] for b in await client.branches()] == ["main", "side", "tip"]

        with pytest.raises(ClientError) as exists:
            await client.create_branch("side")
        assert (exists.value.code, exists.value.status) == ("branch_exists", 409)
        assert await error_code(client.create_branch("x", at="nope")) == "unknown_message"

        renamed = await client.rename_branch("side", "side 2")
        assert (renamed["id"], renamed["name"]) == (side["id"], "side 2")
        assert await error_code(client.rename_branch(side["id"], "tip")) == "branch_exists"
        with pytest.raises(ClientError) as rename_main:
            await client.rename_branch("main", "x")
        assert (rename_main.value.code, rename_main.value.status) == ("main_branch", 409)

        copy = f"{conversation}-copy"
        assert await client.fork_conversation(copy, branch="side 2") == {
            "agent": AGENT,
            "name": copy,
        }
        assert ids(await fetch_history(url, AGENT, copy)) == ids(main[:2])
        with pytest.raises(ClientError) as forked_again:
            await client.fork_conversation(copy)
        assert (forked_again.value.code, forked_again.value.status) == (
            "conversation_exists",
            409,
        )
        # The viewed branch by default.
        whole = f"{conversation}-whole"
        assert (await client.fork_conversation(whole))["name"] == whole
        assert await fetch_history(url, AGENT, whole) == main

        # Both leaves are on main's path: no message goes.
        assert await client.delete_branch("side 2") == 0
        assert await client.delete_branch(tip["id"]) == 0
        with pytest.raises(ClientError) as gone:
            await client.delete_branch("side 2")
        assert (gone.value.code, gone.value.status) == ("unknown_branch", 404)
        with pytest.raises(ClientError) as delete_main:
            await client.delete_branch("main")
        assert (delete_main.value.code, delete_main.value.status) == ("main_branch", 409)
        assert [b["name"] for b in await client.branches()] == ["main"]
        assert client.branch == "main" and client.messages == main
        assert await fetch_history(url, AGENT, conversation) == main
        assert client.errors == []


async def test_deleting_the_viewed_branch_moves_the_client_to_main(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        assert await answered(await client.regenerate()) == "echo: two"
        now = ids(client.messages)
        fork = str((await kept(client, "regenerate"))["id"])
        await client.switch_branch(fork)
        assert client.messages == main
        async with ChatClient.connect(cluster.urls[1], AGENT, conversation, branch=fork) as tab:
            # By id: only the replaced answer is the kept branch's alone.
            assert await client.delete_branch(fork) == 1
            assert client.branch == "main"
            assert ids(client.messages) == now

            # The other tab on it is moved too.
            async def tab_on_main() -> bool:
                return tab.branch == "main" and ids(tab.messages) == now

            await eventually(tab_on_main, timeout=10)

        # By name, with a reply of its own.
        await client.create_branch("side", at=main[1]["id"])
        await client.switch_branch("side")
        side = client.branch
        assert await answered(await client.send("three")) == "echo: three"
        assert await client.delete_branch("side") == 2
        assert (client.branch, ids(client.messages)) == ("main", now)
        assert [b["name"] for b in await client.branches()] == ["main"]
        # The client goes on on main.
        assert await answered(await client.send("after")) == "echo: after"
        assert texts(await fetch_history(url, AGENT, conversation))[-2:] == ["after", "echo: after"]
        gone = await error_code(fetch_history(url, AGENT, conversation, branch=side))
        assert gone == "unknown_branch"


async def test_deleting_the_viewed_branch_while_a_reply_streams(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        main = await two_turns(client)
        await client.create_branch("side", at=main[1]["id"])
        await client.switch_branch("side")
        running = await client.send("slow")
        async with asyncio.timeout(20):
            async for chunk in running:
                if chunk.get("type") == "text-delta":
                    break
        deleted = await client.delete_branch("side")
        assert deleted >= 1  # the user message, and the partial reply if it was stored
        assert (client.branch, client.messages) == ("main", main)
        # Cancelled before the branch went: its viewers got the terminal frame.
        assert running.done and running.outcome == "aborted", running.error
        assert client.replies == []


async def test_cli_branch_operations(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    chat = ("chat", "--url", url, "--name", conversation)
    commands = [
        "hello",
        "/regenerate",
        "/siblings",
        "/switch main",
        "/siblings",
        "/branch side",
        "/rename side side-2",
        "/switch side-2",
        "/delete side-2",
        "/delete main",
        "/branch",
        "/rename side-2",
        "/delete",
    ]
    code, out, err = await run_cli(*chat, stdin="".join(f"{c}\n" for c in commands))
    assert code == 0, err
    prompts = out.split("you> ")
    # The regenerate keeps the CLI on main, where the new reply is the second of two.
    assert prompts[1:6] == ["echo: hello\n", "echo: hello\n", "2 / 2\n", "", "2 / 2\n"]
    assert prompts[6:] == ["", "", "", "", "", "", "", "", "\n"]
    listed = err.splitlines()
    created = re.fullmatch(r"\(created branch (\d+): side\)", listed[1])
    assert created is not None, listed
    side = created[1]
    assert listed == [
        "(already on branch main)",
        f"(created branch {side}: side)",
        f"(renamed branch {side}: side-2)",
        f"(now on branch {side}: side-2)",
        "(deleted branch side-2: 0 messages)",
        "(now on branch main)",
        "error: the main branch cannot be renamed or deleted",
        "usage: /branch NAME (a new branch at the end of this one)",
        "usage: /rename BRANCH NAME (BRANCH: its id, or a name without spaces)",
        "usage: /delete BRANCH (its id or name)",
    ]
