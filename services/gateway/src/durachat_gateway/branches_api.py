"""The branch read API (docs/branching.md): a conversation's branches, a branch's transcript,
and the siblings of a message.

The gateway reads these straight from SQL, like `get-messages`; nothing here goes through the
owner shard. Writes (create, rename, delete, fork) will go through the owner shard, which holds
the conversation's live state; they are not served here.

Errors are JSON `{"code", "message"}` with a stable `code`: 404 `unknown_agent`,
`unknown_branch`, `unknown_message`; 409 `ambiguous_message`; 503 `database_unavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final, Protocol

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from durachat_gateway.auth.principal import tenant_of
from durachat_infra.store import (
    MAIN_BRANCH,
    AmbiguousMessageError,
    BranchRef,
    ConversationKey,
    DatabaseUnavailableError,
    Store,
    UnknownBranchError,
    parse_branch_ref,
)

__all__ = [
    "BRANCH_QUERY_DESCRIPTION",
    "GET_MESSAGES_RESPONSES",
    "BranchList",
    "BranchOut",
    "BranchReads",
    "ErrorBody",
    "SiblingsOut",
    "branch_messages",
    "branch_router",
]


class ErrorBody(BaseModel):
    """An error of the branch API."""

    code: str = Field(
        description="stable: unknown_agent, unknown_branch, unknown_message, "
        "ambiguous_message, database_unavailable"
    )
    message: str = Field(description="for humans; may change")


class BranchOut(BaseModel):
    """A branch: a named pointer to a leaf of the conversation's message tree."""

    id: int = Field(description="stable id of the branch; usable wherever a branch is named")
    name: str = Field(description="unique in the conversation; every conversation has `main`")
    leaf_message_id: str | None = Field(
        description="UIMessage id of the branch's last message; null for an empty branch"
    )
    parent_branch_id: int | None = Field(description="the branch this one was forked from")
    fork_message_id: str | None = Field(
        description="UIMessage id of the message this branch was forked at"
    )
    created_at: datetime
    updated_at: datetime = Field(description="last change: leaf moved or renamed")


class BranchList(BaseModel):
    """The branches of a conversation, oldest first (`main` first). Empty for a conversation
    that does not exist yet (it is created by its first message; `main` is always readable by
    name)."""

    branches: list[BranchOut]


class AlternativeOut(BaseModel):
    """One sibling, and where to view it."""

    message_id: str = Field(description="its UIMessage id (an edit keeps the edited one's)")
    branch: str | None = Field(
        description="a branch whose path holds it, as a client names it (`main`, or the "
        "branch's id): the asked-about branch if it does, else the one updated last; view it "
        "with `?branch=` or `durachat_branch_switch`. null: no branch reaches it"
    )
    branch_name: str | None = Field(description="that branch's name")


class SiblingsOut(BaseModel):
    """The alternatives of a message for a "2 / 3" picker: every child of its parent, oldest
    first, the message itself included, its position among them, and the branch that shows
    each (so `<` and `>` can switch to it)."""

    siblings: list[str] = Field(description="UIMessage ids, oldest first")
    index: int = Field(description="position of the message in `siblings` (0-based)")
    alternatives: list[AlternativeOut] = Field(description="the same siblings, with a branch")


class BranchReads(Protocol):
    """What the routes need from the gateway."""

    store: Store

    def agents(self) -> set[str]:
        """Agent names served by the live shards."""
        ...


BRANCH_QUERY_DESCRIPTION: Final = (
    "the branch to read: its id (digits) or its name; `main` when absent or empty"
)

_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": ErrorBody, "description": "unknown agent, branch or message"},
    503: {"model": ErrorBody, "description": "the database is unavailable (retry)"},
}

_SIBLING_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    **_ERRORS,
    409: {
        "model": ErrorBody,
        "description": "`ambiguous_message`: the id occurs more than once and not on `main`; "
        "name the branch",
    },
}

GET_MESSAGES_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "description": "the UIMessages on the branch, root first",
        "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}},
    },
    400: {"description": "unknown agent (plain text `Invalid request`, as the reference)"},
    404: {"model": ErrorBody, "description": "unknown branch (only with `?branch=`)"},
    503: {"model": ErrorBody, "description": "the database is unavailable (retry)"},
}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(_body(code, message), status)


def _unavailable() -> JSONResponse:
    return _error(503, "database_unavailable", "the transcript store is unavailable")


def _unknown_branch(branch: BranchRef) -> JSONResponse:
    return _error(404, "unknown_branch", _no_branch(branch))


def _no_branch(branch: BranchRef) -> str:
    return f"the conversation has no branch {branch!r}"


def _ref(branch: str | None) -> BranchRef:
    return parse_branch_ref(branch) if branch else MAIN_BRANCH


async def _guard(call: Callable[[], Awaitable[Response]]) -> Response:
    try:
        return await call()
    except DatabaseUnavailableError:
        return _unavailable()


async def branch_messages(store: Store, key: ConversationKey, branch: str) -> Response:
    """`get-messages?branch=`: the UIMessages on one branch, root first.

    `main` (or an empty value) reads exactly what `get-messages` reads without the parameter:
    `[]` for a conversation that does not exist yet. Any other branch of an unknown
    conversation, or an unknown branch, is 404 `unknown_branch`.
    """
    ref = _ref(branch)

    async def read() -> Response:
        if ref == MAIN_BRANCH:
            return JSONResponse(await store.transcript(key))
        conversation = await store.find_conversation(key)
        path = None if conversation is None else await store.branch_path(conversation.id, ref)
        if path is None:
            return _unknown_branch(ref)
        return JSONResponse([m.message for m in path])

    return await _guard(read)


async def siblings_of(
    store: Store, key: ConversationKey, message_id: str, branch: str | None
) -> tuple[int, dict[str, Any]]:
    """The siblings answer as `(status, body)`: 200 `{"siblings", "index", "alternatives"}`,
    404 `unknown_branch` / `unknown_message`, or 409 `ambiguous_message`.

    The message is looked for on `branch`'s path when one is named, else (or when it is not
    there) by its id alone; an id that occurs more than once needs the branch, unless `main`
    holds it (docs/branching.md#http-api-read).

    Raises:
        DatabaseUnavailableError: SQL is unreachable.
    """
    ref = parse_branch_ref(branch) if branch else None
    conversation = await store.find_conversation(key)
    found = None
    if conversation is None:
        if ref is not None and ref != MAIN_BRANCH:
            return 404, _body("unknown_branch", _no_branch(ref))
    else:
        try:
            found = await store.siblings(conversation.id, message_id, ref)
        except UnknownBranchError:
            return 404, _body("unknown_branch", _no_branch(ref or MAIN_BRANCH))
        except AmbiguousMessageError:
            return 409, _body(
                "ambiguous_message",
                f"message {message_id!r} occurs on several branches: name the branch",
            )
    if found is None:
        where = "in the conversation" if ref is None else f"on the branch {ref!r}"
        return 404, _body("unknown_message", f"message {message_id!r} is not {where}")
    alternatives = [
        {
            "message_id": sibling,
            "branch": None if shown is None else shown.ref,
            "branch_name": None if shown is None else shown.name,
        }
        for sibling, shown in zip(found.ids, found.shown_on, strict=True)
    ]
    return 200, {"siblings": list(found.ids), "index": found.index, "alternatives": alternatives}


def _body(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def branch_router(runtime: Callable[[], BranchReads]) -> APIRouter:
    """The read routes, for conversations of the tenant each request acts for; `runtime`
    gives the gateway's state when a request comes in."""
    router = APIRouter(tags=["branches"])

    def unknown_agent(agent: str) -> Response | None:
        if agent in runtime().agents():
            return None
        return _error(404, "unknown_agent", f"no live shard serves agent {agent!r}")

    @router.get(
        "/agents/{agent}/{name}/branches",
        response_model=BranchList,
        responses=_ERRORS,
        summary="List a conversation's branches",
    )
    async def list_branches(
        request: Request,
        agent: str = Path(description="the agent (kebab-case class name)"),
        name: str = Path(description="the conversation's name"),
    ) -> Response:
        if (denied := unknown_agent(agent)) is not None:
            return denied
        store = runtime().store
        key = ConversationKey(tenant_of(request), agent, name)

        async def read() -> Response:
            conversation = await store.find_conversation(key)
            records = [] if conversation is None else await store.list_branches(conversation.id)
            return JSONResponse({"branches": [r.to_json() for r in records]})

        return await _guard(read)

    @router.get(
        "/agents/{agent}/{name}/messages/{message_id}/siblings",
        response_model=SiblingsOut,
        responses=_SIBLING_ERRORS,
        summary="The alternatives of a message, and the branch that shows each",
    )
    async def siblings(
        request: Request,
        agent: str = Path(description="the agent (kebab-case class name)"),
        name: str = Path(description="the conversation's name"),
        message_id: str = Path(description="UIMessage id of the message"),
        branch: str | None = Query(
            None,
            description="the branch whose path holds the message (its id or name); needed "
            "only when the id occurs more than once in the conversation and not on `main`",
        ),
    ) -> Response:
        if (denied := unknown_agent(agent)) is not None:
            return denied
        key = ConversationKey(tenant_of(request), agent, name)

        async def read() -> Response:
            status, body = await siblings_of(runtime().store, key, message_id, branch)
            return JSONResponse(body, status)

        return await _guard(read)

    return router
