"""The branch frames of the WebSocket (docs/branching.md): list the branches, view another one,
and `durachat_branch_op`, which mirrors the HTTP branch API (siblings, create, rename, delete,
fork) with the same status codes and bodies."""

from __future__ import annotations

from typing import Any, Final, Protocol

from durachat.protocol import MessageType, chat_messages_frame
from durachat.protocol.server_frames import branch_op_answer_frame, branches_frame
from durachat.types import JSONDict
from durachat_gateway.branch_writes import BranchWrites, write_branch
from durachat_gateway.branches_api import siblings_of
from durachat_gateway.channels import Channel
from durachat_gateway.connection import ClientConnection
from durachat_infra.store import (
    MAIN_BRANCH,
    ConversationKey,
    DatabaseUnavailableError,
    Store,
    parse_branch_ref,
)

BRANCH_FRAMES: Final = frozenset(
    {MessageType.BRANCHES.value, MessageType.BRANCH_SWITCH.value, MessageType.BRANCH_OP.value}
)
"""Client frame types the gateway answers here."""

UNAVAILABLE: Final = "the transcript store is unavailable"


class BranchFrames(BranchWrites, Protocol):
    """What the branch frames need from the gateway."""

    store: Store


async def resolve_branch(store: Store, key: ConversationKey, wanted: str) -> str | None:
    """The key under which a branch's frames travel: `main`, or the branch's id; None if the
    conversation has no such branch."""
    ref = parse_branch_ref(wanted)
    if ref == MAIN_BRANCH:
        return MAIN_BRANCH
    conversation = await store.find_conversation(key)
    if conversation is None:
        return None
    record = await store.get_branch(conversation.id, ref)
    if record is None:
        return None
    return MAIN_BRANCH if record.name == MAIN_BRANCH else str(record.id)


async def branch_frame(
    r: BranchFrames, channel: Channel, conn: ClientConnection, key: ConversationKey, frame: JSONDict
) -> None:
    """Answer `durachat_branches` (list), `durachat_branch_switch` (view another branch) or
    `durachat_branch_op`."""
    if frame["type"] == MessageType.BRANCH_OP.value:
        status, body = await branch_op(r, conn, key, frame)
        # What the write sent through the event log (a deleted branch's viewers moved to
        # main) reaches this connection before the answer.
        await channel.catch_up()
        op_id = frame.get("id")
        conn.send_json(
            branch_op_answer_frame(
                frame.get("op"), status, body, op_id=op_id if isinstance(op_id, str) else None
            )
        )
        return
    try:
        conversation = await r.store.find_conversation(key)
        if frame["type"] == MessageType.BRANCHES.value:
            records = [] if conversation is None else await r.store.list_branches(conversation.id)
            conn.send_json(branches_frame([b.to_json() for b in records], conn.branch))
            return
        wanted = frame.get("branch")
        viewed = await resolve_branch(r.store, key, str(wanted)) if wanted else None
        if viewed is None:
            conn.send_error("unknown_branch", f"the conversation has no branch {wanted!r}")
            return
        messages = []
        if conversation is not None:
            ref = MAIN_BRANCH if viewed == MAIN_BRANCH else int(viewed)
            path = await r.store.branch_path(conversation.id, ref)
            messages = [m.message for m in path or []]
    except DatabaseUnavailableError:
        conn.send_error("database_unavailable", UNAVAILABLE)
        return
    channel.view(conn, viewed, reason="switch")
    conn.send_json(chat_messages_frame(messages))
    channel.greet(conn)


async def branch_op(
    r: BranchFrames, conn: ClientConnection, key: ConversationKey, frame: JSONDict
) -> tuple[int, dict[str, Any]]:
    """Run one `durachat_branch_op`; returns what the HTTP route would: `(status, body)`.

    `branch` (siblings, create's `from_branch`, fork) defaults to the branch the connection
    views; rename and delete must name theirs.
    """
    op = frame.get("op")
    # Branch ids may come as numbers, as `BranchOut.id` is one.
    fields = {
        name: str(value)
        for name, value in frame.items()
        if (isinstance(value, str) and value) or (type(value) is int)
    }
    viewed = fields.get("branch", conn.branch)
    if op == "siblings":
        if "messageId" not in fields:
            return _invalid("siblings needs `messageId`")
        try:
            return await siblings_of(r.store, key, fields["messageId"], viewed)
        except DatabaseUnavailableError:
            return 503, {"code": "database_unavailable", "message": UNAVAILABLE}
    if op == "create":
        if "name" not in fields:
            return _invalid("create needs `name`")
        source = fields.get("from_branch", conn.branch)
        write = {"op": "create", "new_name": fields["name"], "branch": source}
        return await write_branch(r, key, {**write, "at": fields.get("at")})
    if op in ("rename", "delete") and "branch" not in fields:
        return _invalid(f"{op} needs `branch`")
    if op == "rename":
        if "name" not in fields:
            return _invalid("rename needs `name`")
        return await write_branch(
            r, key, {"op": "rename", "branch": viewed, "new_name": fields["name"]}
        )
    if op == "delete":
        return await write_branch(r, key, {"op": "delete", "branch": viewed})
    if op == "fork":
        if "name" not in fields:
            return _invalid("fork needs `name` (the new conversation's)")
        fork = {"op": "fork", "branch": viewed, "new_name": fields["name"]}
        return await write_branch(r, key, fork)
    return _invalid(f"unknown op {op!r}: siblings, create, rename, delete or fork")


def _invalid(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"code": "invalid_request", "message": message}
