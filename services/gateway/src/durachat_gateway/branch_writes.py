"""The branch write API (docs/branching.md): create, rename and delete a branch, fork a branch
into a new conversation.

Writes go to the conversation's owner shard, which runs them fenced by the conversation's epoch
and in order with its own writes; the gateway relays the outcome. Errors are JSON
`{"code", "message"}` with a stable `code`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from durachat_gateway.auth.principal import tenant_of
from durachat_gateway.branches_api import BranchOut, ErrorBody
from durachat_gateway.forwarder import Forwarder, ForwardError
from durachat_infra.keys import conversation_tag
from durachat_infra.store import ConversationKey


class BranchWrites(Protocol):
    """What the routes need from the gateway."""

    forwarder: Forwarder

    def agents(self) -> set[str]:
        """Agent names served by the live shards."""
        ...


class BranchCreate(BaseModel):
    """A new branch, forked from `from_branch` at message `at`."""

    name: str = Field(description="unique in the conversation; not digits only")
    from_branch: str | None = Field(None, description="branch id or name; `main` when absent")
    at: str | None = Field(
        None, description="UIMessage id on that branch to fork at; its leaf when absent"
    )


class BranchRename(BaseModel):
    """A branch's new name."""

    name: str


class ForkCreate(BaseModel):
    """The new conversation a branch is copied into (same agent)."""

    name: str = Field(description="the new conversation's name; it must not exist")


class ForkOut(BaseModel):
    """The conversation created by a fork."""

    agent: str
    name: str


class DeletedOut(BaseModel):
    """What deleting a branch removed."""

    deleted_messages: int = Field(description="messages no other branch reached")


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "invalid name or request"},
    404: {"model": ErrorBody, "description": "unknown agent, branch or message"},
    409: {"model": ErrorBody, "description": "name taken, or `main` (cannot change)"},
    503: {"model": ErrorBody, "description": "no shard or database available (retry)"},
}


async def write_branch(
    r: BranchWrites, key: ConversationKey, op: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """Run a branch write (`op`: `{"op": "create" | "rename" | "delete" | "fork", …}`, as
    `BranchOpIn`) on the conversation's owner; returns the HTTP answer as `(status, body)`."""
    if key.agent not in r.agents():
        message = f"no live shard serves agent {key.agent!r}"
        return 404, {"code": "unknown_agent", "message": message}
    payload = {"tenant": key.tenant, "agent": key.agent, "name": key.name, **op}
    try:
        answer = await r.forwarder.call(
            conversation_tag(key.tenant, key.agent, key.name), "/internal/v1/branches", payload
        )
    except ForwardError as exc:
        return 404 if exc.code == "unknown_agent" else 503, {
            "code": exc.code,
            "message": exc.message,
        }
    return int(answer.get("status", 500)), dict(answer.get("body", {}))


WriteGuard = Callable[[Request, ConversationKey, dict[str, Any]], Awaitable[Response | None]]
"""Checks a write before it goes to the owner; an answer stops it (quotas, credentials)."""


def branch_write_router(
    runtime: Callable[[], BranchWrites], guard: WriteGuard | None = None
) -> APIRouter:
    """The write routes, for conversations of the tenant each request acts for."""
    router = APIRouter(tags=["branches"])

    async def call(request: Request, agent: str, name: str, op: dict[str, Any]) -> Response:
        key = ConversationKey(tenant_of(request), agent, name)
        if guard is not None and (stopped := await guard(request, key, op)) is not None:
            return stopped
        status, body = await write_branch(runtime(), key, op)
        return JSONResponse(body, status)

    conversation = {
        "agent": Path(description="the agent (kebab-case class name)"),
        "name": Path(description="the conversation's name"),
    }

    @router.post(
        "/agents/{agent}/{name}/branches",
        status_code=201,
        response_model=BranchOut,
        responses=_ERRORS,
        summary="Create a branch",
    )
    async def create(
        body: BranchCreate,
        request: Request,
        agent: str = conversation["agent"],
        name: str = conversation["name"],
    ) -> Response:
        return await call(
            request,
            agent,
            name,
            {"op": "create", "new_name": body.name, "branch": body.from_branch, "at": body.at},
        )

    @router.patch(
        "/agents/{agent}/{name}/branches/{branch}",
        response_model=BranchOut,
        responses=_ERRORS,
        summary="Rename a branch",
    )
    async def rename(
        body: BranchRename,
        request: Request,
        agent: str = conversation["agent"],
        name: str = conversation["name"],
        branch: str = Path(description="branch id or name"),
    ) -> Response:
        return await call(
            request, agent, name, {"op": "rename", "branch": branch, "new_name": body.name}
        )

    @router.delete(
        "/agents/{agent}/{name}/branches/{branch}",
        response_model=DeletedOut,
        responses=_ERRORS,
        summary="Delete a branch and the messages only it reaches",
    )
    async def delete(
        request: Request,
        agent: str = conversation["agent"],
        name: str = conversation["name"],
        branch: str = Path(description="branch id or name"),
    ) -> Response:
        return await call(request, agent, name, {"op": "delete", "branch": branch})

    @router.post(
        "/agents/{agent}/{name}/branches/{branch}/fork",
        status_code=201,
        response_model=ForkOut,
        responses=_ERRORS,
        summary="Copy a branch into a new conversation",
    )
    async def fork(
        body: ForkCreate,
        request: Request,
        agent: str = conversation["agent"],
        name: str = conversation["name"],
        branch: str = Path(description="branch id or name"),
    ) -> Response:
        return await call(
            request, agent, name, {"op": "fork", "branch": branch, "new_name": body.name}
        )

    return router
