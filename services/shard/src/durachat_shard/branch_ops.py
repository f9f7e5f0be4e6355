"""Branch writes (create, rename, delete, fork into a new conversation), run by the owner.

They go through the conversation's owner so they are fenced by its epoch and ordered after the
writes it has queued. Each answers `(status, body)`: the branch record, or an error with a stable
code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel

from durachat.observability import EventType, emit
from durachat.protocol import MAIN_BRANCH
from durachat_infra.store import (
    BranchExistsError,
    BranchRef,
    ConversationExistsError,
    ConversationKey,
    MainBranchError,
    UnknownBranchError,
    UnknownMessageError,
    parse_branch_ref,
)
from durachat_shard.actor import ConversationActor


class BranchOpIn(BaseModel):
    """A branch write forwarded by a gateway."""

    tenant: str
    agent: str
    name: str
    op: Literal["create", "rename", "delete", "fork"]
    branch: str | None = None
    """The branch acted on (create: the one forked from; `main` when absent)."""
    new_name: str | None = None
    """create, rename: the branch's name; fork: the new conversation's name."""
    at: str | None = None
    """create: the UIMessage id to fork at (the branch's leaf when absent)."""


def _forked(actor: ConversationActor, payload: dict[str, Any]) -> None:
    """Tell the event feed a branch was forked (docs/observability.md#subscribing-to-events)."""
    key = actor.key
    emit(
        EventType.BRANCH_FORKED, agent=key.agent, name=key.name, tenant=key.tenant, payload=payload
    )


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"code": code, "message": message}


async def apply_branch_op(
    actor: ConversationActor, op: BranchOpIn, stop_branch: Callable[[str], Awaitable[None]]
) -> tuple[int, dict[str, Any]]:
    """Run one branch write for `actor`'s conversation (`main`'s actor). `stop_branch` stops
    the actor of a branch (by id) that is being deleted."""
    ref = parse_branch_ref(op.branch) if op.branch else MAIN_BRANCH
    try:
        if op.op == "fork":
            if not op.new_name:
                return _error(400, "invalid_request", "a fork needs the new conversation's name")
            await actor.settled_writes()
            target = ConversationKey(op.tenant, op.agent, op.new_name)
            await actor.store.fork_conversation(actor.key, ref, target)
            _forked(actor, {"op": "fork", "branch": str(ref), "newName": op.new_name})
            return 201, {"agent": op.agent, "name": op.new_name}
        if op.op == "create":
            name = op.new_name or ""
            created = await actor.run_write(
                lambda tx: tx.create_branch(name, from_branch=ref, fork_message_id=op.at)
            )
            _forked(actor, {"op": "create", "branch": str(ref), "created": created.to_json()})
            return 201, created.to_json()
        if op.op == "rename":
            name = op.new_name or ""
            renamed = await actor.run_write(lambda tx: tx.rename_branch(ref, name))
            return 200, renamed.to_json()
        return 200, {"deleted_messages": await _delete(actor, ref, stop_branch)}
    except ValueError as exc:
        return _error(400, "invalid_branch_name", str(exc))
    except UnknownBranchError:
        return _error(404, "unknown_branch", f"the conversation has no branch {ref!r}")
    except UnknownMessageError:
        return _error(404, "unknown_message", f"message {op.at!r} is not on the branch {ref!r}")
    except BranchExistsError:
        return _error(409, "branch_exists", f"a branch named {op.new_name!r} exists already")
    except MainBranchError:
        return _error(409, "main_branch", "the main branch cannot be renamed or deleted")
    except ConversationExistsError:
        return _error(409, "conversation_exists", f"conversation {op.new_name!r} exists already")


async def _delete(
    actor: ConversationActor, ref: BranchRef, stop_branch: Callable[[str], Awaitable[None]]
) -> int:
    """Delete a branch: its actor stops first (a reply streaming there ends as cancelled, its
    partial stored), then the branch goes, and the connections viewing it are moved to `main`
    and sent main's transcript."""
    record = await actor.store.get_branch(actor.conversation_id, ref)
    if record is None:
        raise UnknownBranchError(actor.conversation_id, ref)
    if record.name == MAIN_BRANCH:
        raise MainBranchError(actor.conversation_id, "delete")
    branch = str(record.id)
    await stop_branch(branch)
    deleted = await actor.run_write(lambda tx: tx.delete_branch(record.id))
    # A frame may have woken it meanwhile; its writes fail from now on.
    await stop_branch(branch)
    actor.emit.view(MAIN_BRANCH, reason="deleted", of=branch)
    actor.emit.messages(actor.transcript.messages)
    return deleted
