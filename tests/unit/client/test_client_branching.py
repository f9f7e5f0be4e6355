"""The chat client's branches: the pure parts (URLs, the edit transcript), and the frames it
sends and follows against a scripted in-process server."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from websockets.asyncio.server import ServerConnection, serve

from durachat.client import (
    ChatClient,
    ClientError,
    Reply,
    branch_query,
    edit_transcript,
    fetch_history,
    is_branch,
    socket_url,
)
from support.scripted_server import Frame, Script, ScriptedServer, scripted_chat
from support.waiting import eventually

pytestmark = pytest.mark.timeout(20)


def text_message(message_id: str, role: str, text: str) -> Frame:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


U1 = text_message("u1", "user", "one")
A1 = text_message("a1", "assistant", "echo: one")
U2 = text_message("u2", "user", "two")
A2 = text_message("a2", "assistant", "echo: two")

BRANCHES = [
    {"id": 41, "name": "main", "leaf_message_id": "a2", "parent_branch_id": None},
    {"id": 57, "name": "alt idea", "leaf_message_id": "a1", "parent_branch_id": 41},
]


async def _now(value: bool) -> bool:
    return value


# Pure parts


def test_socket_url_names_the_branch() -> None:
    base = "http://h:1/p"
    assert socket_url(base, "chat-agent", "c", "pk") == "ws://h:1/p/agents/chat-agent/c?_pk=pk"
    for main in (None, "", "main"):
        assert socket_url(base, "chat-agent", "c", "pk", main).endswith("?_pk=pk")
    assert socket_url(base, "chat-agent", "c", "pk", 57).endswith("?_pk=pk&branch=57")
    named = socket_url("https://h", "chat-agent", "c", "pk", "alt idea/2")
    assert named == "wss://h/agents/chat-agent/c?_pk=pk&branch=alt%20idea%2F2"
    assert parse_qs(urlsplit(named).query)["branch"] == ["alt idea/2"]


def test_branch_query() -> None:
    assert branch_query(None) is None
    assert branch_query("main") is None
    assert branch_query("") is None
    assert branch_query(7) == "7"
    assert branch_query("7") == "7"
    assert branch_query("alt") == "alt"
    with pytest.raises(TypeError):
        branch_query(True)
    with pytest.raises(TypeError):
        branch_query(1.5)  # type: ignore[arg-type]


def test_is_branch_by_id_or_name() -> None:
    main, alt = BRANCHES
    assert is_branch(main, "main") and is_branch(main, 41) and is_branch(main, "41")
    assert is_branch(alt, "alt idea") and is_branch(alt, 57)
    assert not is_branch(alt, "main") and not is_branch(alt, "41")


def test_edit_transcript_keeps_the_prefix_and_the_id() -> None:
    transcript, dropped = edit_transcript([U1, A1, U2, A2], "u2", "two, edited")
    assert transcript == [U1, A1, text_message("u2", "user", "two, edited")]
    assert dropped == {"a2"}
    # The first message: nothing before it, everything after it dropped.
    transcript, dropped = edit_transcript([U1, A1, U2, A2], "u1", "uno")
    assert transcript == [text_message("u1", "user", "uno")]
    assert dropped == {"a1", "u2", "a2"}
    # The last message: nothing dropped. Other parts (files) are replaced by the text.
    with_file = {**U2, "parts": [{"type": "file", "url": "x"}, {"type": "text", "text": "two"}]}
    transcript, dropped = edit_transcript([U1, A1, with_file], "u2", "2")
    assert transcript[-1] == text_message("u2", "user", "2") and dropped == frozenset()
    # A repeated id: the occurrence nearest the end.
    transcript, _ = edit_transcript([U1, A1, U1, A2], "u1", "again")
    assert transcript == [U1, A1, text_message("u1", "user", "again")]


def test_edit_transcript_refuses_unknown_and_assistant_messages() -> None:
    with pytest.raises(ClientError) as unknown:
        edit_transcript([U1, A1], "nope", "x")
    assert unknown.value.code == "unknown_message"
    with pytest.raises(ClientError) as assistant:
        edit_transcript([U1, A1], "a1", "x")
    assert assistant.value.code == "not_a_user_message"


async def test_fetch_history_reads_a_branch() -> None:
    seen: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        branch = request.url.params.get("branch")
        if branch == "nope":
            body = {"code": "unknown_branch", "message": "the conversation has no branch 'nope'"}
            return httpx.Response(404, json=body)
        if branch == "gone":
            return httpx.Response(404, text="Not found")
        return httpx.Response(200, json=[U1] if branch else [U1, A1])

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        assert await fetch_history("http://h", "chat-agent", "c", http=http) == [U1, A1]
        assert await fetch_history("http://h", "chat-agent", "c", branch="main", http=http) == [
            U1,
            A1,
        ]
        assert await fetch_history("http://h", "chat-agent", "c", branch=57, http=http) == [U1]
        with pytest.raises(ClientError) as unknown:
            await fetch_history("http://h", "chat-agent", "c", branch="nope", http=http)
        assert (unknown.value.code, unknown.value.status) == ("unknown_branch", 404)
        assert unknown.value.message == "the conversation has no branch 'nope'"
        with pytest.raises(ClientError) as other:
            await fetch_history("http://h", "chat-agent", "c", branch="gone", http=http)
        assert (other.value.code, other.value.status) == ("http_error", 404)
    assert [str(u) for u in seen[:3]] == [
        "http://h/agents/chat-agent/c/get-messages",
        "http://h/agents/chat-agent/c/get-messages",
        "http://h/agents/chat-agent/c/get-messages?branch=57",
    ]


# Against a scripted server


chat = scripted_chat


async def send(ws: ServerConnection, frame: Frame) -> None:
    await ws.send(json.dumps(frame))


async def stream(ws: ServerConnection, request_id: str, message_id: str, text: str) -> None:
    chunks: list[Frame] = [
        {"type": "start", "messageId": message_id},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish"},
    ]
    for seq, chunk in enumerate(chunks):
        await send(
            ws,
            {
                "type": "cf_agent_use_chat_response",
                "id": request_id,
                "body": json.dumps(chunk),
                "done": False,
                "seq": seq,
            },
        )
    await send(
        ws, {"type": "cf_agent_use_chat_response", "id": request_id, "body": "", "done": True}
    )


def branch_server(viewing: list[str]) -> Script:
    """Answers the branch list (viewing `viewing[0]`) and switches to `main` and `alt idea`."""

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "durachat_branches":
            await send(
                ws, {"type": "durachat_branches", "branches": BRANCHES, "viewing": viewing[0]}
            )
        elif frame["type"] == "durachat_branch_switch":
            target = next((b for b in BRANCHES if is_branch(b, frame["branch"])), None)
            if target is None:
                error = {"type": "durachat_error", "code": "unknown_branch", "message": "no"}
                await send(ws, error)
                return
            viewing[0] = "main" if target["name"] == "main" else str(target["id"])
            await send(ws, {"type": "durachat_branch_switched", "branch": viewing[0]})
            messages = [U1, A1, U2, A2] if viewing[0] == "main" else [U1, A1]
            await send(ws, {"type": "cf_agent_chat_messages", "messages": messages})

    return script


async def test_connect_to_a_branch_by_name_learns_its_id() -> None:
    async with chat(branch_server(["57"]), branch="alt idea") as (client, server):
        assert client.branch == "57"
        assert server.queries[0]["branch"] == ["alt idea"]
        assert await client.branches() == BRANCHES


async def test_connect_to_an_unknown_branch_fails() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "durachat_branches":
            await send(ws, {"type": "durachat_branches", "branches": BRANCHES, "viewing": "main"})

    server = ScriptedServer(script)
    async with serve(server.handle, "127.0.0.1", 0) as running:
        port = running.sockets[0].getsockname()[1]
        with pytest.raises(ClientError) as raised:
            await ChatClient.connect(
                f"http://127.0.0.1:{port}", "chat-agent", "c", branch="nope", load_history=False
            )
    assert raised.value.code == "unknown_branch"


async def test_switch_branch_waits_for_the_transcript() -> None:
    async with chat(branch_server(["main"])) as (client, server):
        assert client.branch == "main" and not server.sent("durachat_branches")
        await client.switch_branch("alt idea")
        assert client.branch == "57"
        assert client.messages == [U1, A1]
        await client.switch_branch(41)
        assert client.branch == "main"
        assert client.messages == [U1, A1, U2, A2]
        with pytest.raises(ClientError) as raised:
            await client.switch_branch("nope")
        assert raised.value.code == "unknown_branch"
        assert client.branch == "main" and client.messages == [U1, A1, U2, A2]
        assert [f["branch"] for f in server.sent("durachat_branch_switch")] == [
            "alt idea",
            "41",
            "nope",
        ]


async def test_a_switch_the_server_never_answers_times_out() -> None:
    async def silent(ws: ServerConnection, frame: Frame) -> None:
        return

    async with chat(silent) as (client, _):
        with pytest.raises(ClientError) as raised:
            await client.switch_branch("alt", timeout=0.2)
        assert raised.value.code == "timeout"
        assert client.branch == "main"


def forking_server(new_branch: str, reason: str) -> Script:
    """Answers every chat request on a new branch: switched first, then the reply."""

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_use_chat_request":
            await send(
                ws, {"type": "durachat_branch_switched", "branch": new_branch, "reason": reason}
            )
            await stream(ws, frame["id"], "a-new", "echo: new")

    return script


async def test_a_forked_regenerate_moves_the_client_and_its_reply() -> None:
    async with chat(forking_server("9", "regenerate")) as (client, server):
        client.messages = [U1, A1]
        reply = await client.regenerate()
        async with asyncio.timeout(5):
            assert await reply.text() == "echo: new"
        assert reply.outcome == "completed" and reply.branch == "9"
        assert client.branch == "9"
        assert [m["id"] for m in client.messages] == ["u1", "a-new"]
        [request] = server.sent("cf_agent_use_chat_request")
        body = json.loads(request["init"]["body"])
        assert body["trigger"] == "regenerate-message" and body["messages"] == [U1]


async def test_a_forked_edit_sends_the_edited_transcript() -> None:
    async with chat(forking_server("10", "edit")) as (client, server):
        client.messages = [U1, A1, U2, A2]
        reply = await client.edit("u2", "two, edited")
        async with asyncio.timeout(5):
            assert await reply.text() == "echo: new"
        assert client.branch == "10" and reply.branch == "10"
        assert reply.user_message_id == "u2"
        edited = text_message("u2", "user", "two, edited")
        assert client.messages[:3] == [U1, A1, edited]
        assert [m["id"] for m in client.messages] == ["u1", "a1", "u2", "a-new"]
        [request] = server.sent("cf_agent_use_chat_request")
        body = json.loads(request["init"]["body"])
        assert body["trigger"] == "submit-message" and body["messages"] == [U1, A1, edited]
        with pytest.raises(ClientError) as raised:
            await client.edit("a1", "x")
        assert raised.value.code == "not_a_user_message"
        assert len(server.sent("cf_agent_use_chat_request")) == 1


async def test_replies_left_on_the_old_branch_end() -> None:
    started = asyncio.Event()

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_use_chat_request":
            # Starts streaming, never ends (on main).
            first = {"type": "start", "messageId": "a-slow"}
            await send(
                ws,
                {
                    "type": "cf_agent_use_chat_response",
                    "id": frame["id"],
                    "body": json.dumps(first),
                    "done": False,
                    "seq": 0,
                },
            )
            started.set()
        elif frame["type"] == "durachat_branch_switch":
            await send(ws, {"type": "durachat_branch_switched", "branch": "57", "reason": "switch"})
            await send(ws, {"type": "cf_agent_chat_messages", "messages": [U1, A1]})

    async with chat(script) as (client, _):
        reply = await client.send("slow")
        async with asyncio.timeout(5):
            await started.wait()
        await eventually(lambda: _now(bool(reply.chunks)))
        await client.switch_branch("alt idea")
        assert reply.done and reply.outcome == "error"
        assert reply.error is not None and reply.error.code == "left_branch"
        assert reply.branch == "main"
        assert client.messages == [U1, A1] and client.replies == []


async def test_a_reconnect_comes_back_to_the_viewed_branch() -> None:
    viewing = ["main"]
    switched = branch_server(viewing)

    async with chat(switched, reconnect_max_delay=0.1) as (client, server):
        await client.switch_branch("alt idea")
        first = client.websocket
        assert first is not None
        server.sockets[0].transport.abort()
        await eventually(lambda: _now(client.websocket not in (None, first)))
        assert server.queries[0].get("branch") is None
        assert server.queries[1]["branch"] == ["57"]
        assert client.branch == "57"


async def test_a_branch_gone_at_a_reconnect_leaves_the_client_on_main() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "durachat_branch_switch":
            await send(ws, {"type": "durachat_branch_switched", "branch": "57", "reason": "switch"})
            await send(ws, {"type": "cf_agent_chat_messages", "messages": [U1, A1]})

    server = ScriptedServer(script)

    async def handle(ws: ServerConnection) -> None:
        if len(server.sockets) == 1:
            # The second socket: the branch was deleted meanwhile.
            await send(ws, {"type": "durachat_error", "code": "unknown_branch", "message": "no"})
        await server.handle(ws)

    async with serve(handle, "127.0.0.1", 0) as running:
        port = running.sockets[0].getsockname()[1]
        async with ChatClient.connect(
            f"http://127.0.0.1:{port}",
            "chat-agent",
            "c",
            load_history=False,
            reconnect_max_delay=0.1,
        ) as client:
            await client.switch_branch("alt idea")
            assert client.branch == "57"
            server.sockets[0].transport.abort()
            await eventually(lambda: _now(client.branch == "main"))
            assert server.queries[1]["branch"] == ["57"]
            assert [e.code for e in client.errors] == ["unknown_branch"]


async def test_reply_branch_defaults_to_main() -> None:
    assert Reply("r1", observed=True).branch == "main"


# Branch operations over the socket (`durachat_branch_op`)

SIBLINGS = ["a1", "a1-again"]
MAIN_PATH = [U1, A1, U2, A2]


def answer_op(frame: Frame, viewing: str) -> tuple[int, Frame]:
    """What the gateway answers, over `BRANCHES`; an optional branch is the viewed one."""

    def find(ref: str) -> Frame | None:
        return next((b for b in BRANCHES if is_branch(b, ref)), None)

    def error(status: int, code: str) -> tuple[int, Frame]:
        return status, {"code": code, "message": f"{code} ({frame['op']})"}

    op = frame.get("op")
    branch = find(frame.get("branch") or viewing)
    if op == "siblings":
        if branch is None:
            return error(404, "unknown_branch")
        if frame.get("messageId") != "a1":
            return error(404, "unknown_message")
        return 200, {"siblings": SIBLINGS, "index": 0 if branch["name"] == "main" else 1}
    if op == "create":
        source = find(frame.get("from_branch") or viewing)
        if source is None:
            return error(404, "unknown_branch")
        if find(frame["name"]) is not None:
            return error(409, "branch_exists")
        at = frame.get("at", source["leaf_message_id"])
        record = {"id": 58, "name": frame["name"], "leaf_message_id": at}
        return 201, {**record, "parent_branch_id": source["id"], "fork_message_id": at}
    if op in ("rename", "delete") and "branch" not in frame:
        return error(400, "invalid_request")
    if op in ("rename", "delete"):
        if branch is None:
            return error(404, "unknown_branch")
        if branch["name"] == "main":
            return error(409, "main_branch")
        if op == "rename":
            return 200, {**branch, "name": frame["name"]}
        return 200, {"deleted_messages": 2}
    if op == "fork":
        if frame["name"] == "c":
            return error(409, "conversation_exists")
        return 201, {"agent": "chat-agent", "name": frame["name"]}
    return error(400, "invalid_request")


def ops_server(viewing: list[str], *, move: str = "before") -> Script:
    """`branch_server`, and `durachat_branch_op` answered by `answer_op`. Deleting the viewed
    branch moves the connection to main (switched, then main's transcript) `before` or `after`
    the answer, or `never`."""
    listing = branch_server(viewing)

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] != "durachat_branch_op":
            await listing(ws, frame)
            return
        status, body = answer_op(frame, viewing[0])
        answer = {"type": "durachat_branch_op", "id": frame["id"], "op": frame["op"]}
        viewed = next(b for b in BRANCHES if is_branch(b, viewing[0]))
        deleted = frame["op"] == "delete" and status == 200
        moves = deleted and is_branch(viewed, frame["branch"])

        async def moved() -> None:
            viewing[0] = "main"
            switched = {"type": "durachat_branch_switched", "branch": "main", "reason": "deleted"}
            await send(ws, switched)
            await send(ws, {"type": "cf_agent_chat_messages", "messages": MAIN_PATH})

        if moves and move == "before":
            await moved()
        await send(ws, {**answer, "status": status, "body": body})
        if moves and move == "after":
            await moved()

    return script


async def test_siblings_for_a_picker() -> None:
    async with chat(ops_server(["main"])) as (client, server):
        assert await client.siblings("a1") == (SIBLINGS, 0)
        assert await client.siblings("a1", branch="alt idea") == (SIBLINGS, 1)
        assert await client.siblings("a1", branch=41) == (SIBLINGS, 0)
        with pytest.raises(ClientError) as unknown:
            await client.siblings("nope")
        assert (unknown.value.code, unknown.value.status) == ("unknown_message", 404)
        with pytest.raises(ClientError) as no_branch:
            await client.siblings("a1", branch="gone")
        assert no_branch.value.code == "unknown_branch"
        frames = server.sent("durachat_branch_op")
        # The viewed branch is the server's default: no `branch` unless one is named.
        assert [{k: v for k, v in f.items() if k != "id"} for f in frames] == [
            {"type": "durachat_branch_op", "op": "siblings", "messageId": "a1"},
            {
                "type": "durachat_branch_op",
                "op": "siblings",
                "messageId": "a1",
                "branch": "alt idea",
            },
            {"type": "durachat_branch_op", "op": "siblings", "messageId": "a1", "branch": "41"},
            {"type": "durachat_branch_op", "op": "siblings", "messageId": "nope"},
            {"type": "durachat_branch_op", "op": "siblings", "messageId": "a1", "branch": "gone"},
        ]
        assert len({f["id"] for f in frames}) == len(frames)
        assert client.errors == []


async def test_siblings_default_to_the_viewed_branch() -> None:
    async with chat(ops_server(["main"])) as (client, _):
        await client.switch_branch("alt idea")
        assert await client.siblings("a1") == (SIBLINGS, 1)
        assert await client.siblings("a1", branch="main") == (SIBLINGS, 0)


async def test_create_rename_and_fork() -> None:
    async with chat(ops_server(["57"]), branch="alt idea") as (client, server):
        created = await client.create_branch("side", at="u1")
        assert created == {
            "id": 58,
            "name": "side",
            "leaf_message_id": "u1",
            "parent_branch_id": 57,
            "fork_message_id": "u1",
        }
        from_main = await client.create_branch("other", from_branch="main")
        assert (from_main["parent_branch_id"], from_main["leaf_message_id"]) == (41, "a2")
        assert client.branch == "57"  # creating does not switch
        renamed = await client.rename_branch(57, "alt 2")
        assert (renamed["id"], renamed["name"]) == (57, "alt 2")
        assert await client.fork_conversation("copy") == {"agent": "chat-agent", "name": "copy"}
        assert await client.fork_conversation("copy", branch="main") == {
            "agent": "chat-agent",
            "name": "copy",
        }
        sent = [
            {k: v for k, v in f.items() if k not in ("type", "id")}
            for f in server.sent("durachat_branch_op")
        ]
        assert sent == [
            {"op": "create", "name": "side", "at": "u1"},
            {"op": "create", "name": "other", "from_branch": "main"},
            {"op": "rename", "branch": "57", "name": "alt 2"},
            {"op": "fork", "name": "copy"},
            {"op": "fork", "name": "copy", "branch": "main"},
        ]


async def test_refused_operations_raise_the_code_and_status() -> None:
    async with chat(ops_server(["main"])) as (client, _):
        cases = [
            (client.create_branch("alt idea"), "branch_exists", 409),
            (client.create_branch("x", at="u1", from_branch="gone"), "unknown_branch", 404),
            (client.rename_branch("main", "x"), "main_branch", 409),
            (client.rename_branch("gone", "x"), "unknown_branch", 404),
            (client.delete_branch("main"), "main_branch", 409),
            (client.delete_branch(99), "unknown_branch", 404),
            (client.fork_conversation("c"), "conversation_exists", 409),
        ]
        for call, code, status in cases:
            with pytest.raises(ClientError) as raised:
                await call
            assert (raised.value.code, raised.value.status) == (code, status)
            assert raised.value.message.startswith(code)
        assert client.branch == "main"


async def test_an_answer_is_matched_by_its_id() -> None:
    held: list[Frame] = []

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] != "durachat_branch_op":
            return
        if not held:
            held.append(frame)  # the first one is answered late, after the next one arrived
            return
        late = {"type": "durachat_branch_op", "id": held[0]["id"], "op": "siblings"}
        await send(ws, {**late, "status": 200, "body": {"siblings": ["late"], "index": 0}})
        answer = {"type": "durachat_branch_op", "id": frame["id"], "op": "siblings"}
        await send(ws, {**answer, "status": 200, "body": {"siblings": ["x", "y"], "index": 1}})

    async with chat(script) as (client, _):
        with pytest.raises(ClientError) as raised:
            await client.siblings("a1", timeout=0.2)
        assert raised.value.code == "timeout"
        assert await client.siblings("a2") == (["x", "y"], 1)


async def test_an_unreadable_answer_is_a_server_error() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "durachat_branch_op":
            answer = {"type": "durachat_branch_op", "id": frame["id"], "op": frame["op"]}
            await send(ws, {**answer, "status": 200, "body": {"siblings": "a1"}})

    async with chat(script) as (client, _):
        with pytest.raises(ClientError) as raised:
            await client.siblings("a1")
        assert raised.value.code == "server_error"


async def test_deleting_another_branch_keeps_the_view() -> None:
    async with chat(ops_server(["main"])) as (client, server):
        client.messages = [U1, A1]
        assert await client.delete_branch("alt idea") == 2
        assert client.branch == "main" and client.messages == [U1, A1]
        # Viewing main, the deleted branch cannot be the viewed one: no lookup.
        assert server.sent("durachat_branches") == []


@pytest.mark.parametrize("move", ["before", "after"])
@pytest.mark.parametrize("by", ["id", "name"])
async def test_deleting_the_viewed_branch_returns_on_main(move: str, by: str) -> None:
    async with chat(ops_server(["main"], move=move)) as (client, server):
        await client.switch_branch("alt idea")
        assert client.branch == "57" and client.messages == [U1, A1]
        assert await client.delete_branch(57 if by == "id" else "alt idea") == 2
        # Moved, with main's transcript, as soon as the call returns.
        assert client.branch == "main"
        assert client.messages == MAIN_PATH
        looked_up = len(server.sent("durachat_branches"))
        assert looked_up == (1 if by == "name" else 0)


async def test_a_move_that_never_comes_times_out() -> None:
    async with chat(ops_server(["main"], move="never")) as (client, _):
        await client.switch_branch("alt idea")
        with pytest.raises(ClientError) as raised:
            await client.delete_branch("57", timeout=0.3)
        assert raised.value.code == "timeout" and "deleted" in raised.value.message


async def test_a_drop_while_waiting_for_the_move_raises_disconnected() -> None:
    viewing = ["main"]
    ops = ops_server(viewing, move="never")

    async def script(ws: ServerConnection, frame: Frame) -> None:
        await ops(ws, frame)
        if frame.get("op") == "delete":
            ws.transport.abort()  # deleted, then the connection dropped before the move

    async with chat(script, reconnect_max_delay=0.1) as (client, _):
        await client.switch_branch("alt idea")
        with pytest.raises(ClientError) as raised:
            await client.delete_branch(57)
        assert raised.value.code == "disconnected"
