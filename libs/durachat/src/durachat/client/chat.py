"""An async client of the `@cloudflare/ai-chat` WebSocket chat protocol (PROTOCOL §3, §4, §13)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Final, Literal

import httpx
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from durachat.client.errors import ClientError
from durachat.client.reply import Reply, new_reply
from durachat.client.reply_control import ReplyControl
from durachat.client.tools import (
    ToolCall,
    ToolCallHook,
    find_tool_call,
    pending_tool_calls,
    replace_part,
    will_continue,
)
from durachat.client.transcript import edit_transcript, new_message_id
from durachat.client.urls import (
    HTTP_TIMEOUT,
    MAIN_BRANCH,
    BranchRef,
    branch_query,
    fetch_history,
    http_url,
    is_branch,
    socket_url,
)
from durachat.messages import new_request_id
from durachat.protocol import MessageType
from durachat.tools import apply_tool_approval, apply_tool_result
from durachat.types import JSONDict, UIMessage

__all__ = [  # the helpers were defined here before; they stay importable from this module
    "MAIN_BRANCH",
    "BranchRef",
    "ChatClient",
    "Connecting",
    "FrameHook",
    "ReplyHook",
    "branch_query",
    "edit_transcript",
    "fetch_history",
    "http_url",
    "is_branch",
    "new_message_id",
    "socket_url",
]

log = logging.getLogger(__name__)

_RECENT_REPLIES: Final = 512
_TURN_WAIT: Final = 60.0
"""How long a reply the server had not answered at a reconnect waits for its turn."""
_FOLLOW_TURNS: Final = 8
"""How many other turns a tool answer waits behind for its continuation to start."""
_BRANCH_WAIT: Final = 30.0
"""How long the branch operations (`branches`, `switch_branch`, `siblings`, …) wait for the
server's answer by default."""
_FORK_REASONS: Final = frozenset({"edit", "regenerate"})
"""`durachat_branch_switched` reasons that move the sender's request to a new branch."""


@dataclass(frozen=True, slots=True)
class _Failed:
    """What an `on_tool_call` hook raised: sent as the call's error."""

    text: str


@dataclass(frozen=True, slots=True)
class _ProbeAnswer:
    kind: Literal["resuming", "none", "pending", "error"]
    reply: ReplyControl | None = None
    error: ClientError | None = None


class _Probe:
    """One `cf_agent_stream_resume_request` waiting for the server's answer."""

    def __init__(self, probe_id: str) -> None:
        self.probe_id = probe_id
        self.answers: asyncio.Queue[_ProbeAnswer] = asyncio.Queue()


_BranchKind = Literal["list", "switch", "op"]


class _BranchOp:
    """A `durachat_branches`, `durachat_branch_switch` or `durachat_branch_op` waiting for the
    server's answer."""

    def __init__(
        self, kind: _BranchKind, op_id: str | None = None, *, follow_delete: bool = False
    ) -> None:
        self.kind = kind
        self.op_id = op_id
        """(An op) the `id` its answer echoes."""
        self.follow_delete = follow_delete
        """(An op) it deletes the viewed branch: it ends once the client is moved to `main`."""
        self.switched = False
        """(A switch) `durachat_branch_switched` arrived; the transcript that follows ends it.
        (An op that follows a delete) the move to `main` arrived; its transcript follows."""
        loop = asyncio.get_running_loop()
        self.answer: asyncio.Future[JSONDict] = loop.create_future()
        self.moved: asyncio.Future[None] = loop.create_future()
        """(An op that follows a delete) `main`'s transcript arrived after the move."""

    def resolve(self, frame: JSONDict) -> None:
        if not self.answer.done():
            self.answer.set_result(frame)

    def arrive(self) -> None:
        if not self.moved.done():
            self.moved.set_result(None)

    def fail(self, error: ClientError) -> None:
        for future in (self.answer, self.moved):
            if not future.done():
                future.set_exception(error)
                # Retrieved here, so that an operation that gave up leaves no unretrieved error.
                future.exception()


FrameHook = Callable[[JSONDict], object]
"""Called with every frame the client receives, once the client has handled it."""

ReplyHook = Callable[[Reply], object]
"""Called with every reply the client did not start itself (observed or offered for resume)."""


class ChatClient:
    """A chat over one WebSocket, like `useAgentChat`: send, stream, cancel, resume.

    Create one with `await ChatClient.connect(...)` or `async with ChatClient.connect(...)`.

    One reader task receives every frame. It keeps `messages` (the local transcript) in step
    with the server: the client's own user messages, the assistant messages of every streamed
    reply (own or observed), `cf_agent_chat_messages` broadcasts (which replace the transcript
    but keep in-flight replies), `cf_agent_message_updated` and `cf_agent_chat_clear`. When the
    socket drops, it reconnects with the same connection id (`_pk`), with bounded exponential
    backoff, then resumes.

    Tool calls waiting for the client (`pending_tool_calls`) are answered with
    `add_tool_output`, `add_tool_error` and `approve_tool`, which return the reply of the
    continuation the server starts; an `on_tool_call` hook answers client tools by itself.

    The client views one branch of the conversation (`branch`, `main` by default): what it
    sends acts on that branch, and it receives only that branch's replies and transcript.
    `switch_branch` views another one; an `edit` or a `regenerate` that the server answers on
    a new branch moves the client there (`durachat_branch_switched`). Reconnects come back to
    the branch the client views. `siblings`, `create_branch`, `rename_branch`, `delete_branch`
    and `fork_conversation` do what the HTTP branch API does, over the socket
    (`durachat_branch_op`).

    Attributes:
        base_url: The server's base URL.
        agent: The agent namespace.
        name: The chat instance name.
        connection_id: The `_pk` of every socket of this client.
        messages: The local transcript, oldest first. Replaced (never mutated in place) on
            every change.
        errors: Every `durachat_error` the server sent, as `ClientError`s, oldest first.
    """

    def __init__(
        self,
        base_url: str,
        agent: str,
        name: str,
        *,
        connection_id: str | None = None,
        branch: BranchRef | None = None,
        headers: Mapping[str, str] | None = None,
        on_frame: FrameHook | None = None,
        on_reply: ReplyHook | None = None,
        on_tool_call: ToolCallHook | None = None,
        reconnect_attempts: int = 8,
        reconnect_max_delay: float = 5.0,
        open_timeout: float = 10.0,
    ) -> None:
        """Prepare a client; `connect` opens it. Prefer `ChatClient.connect`.

        Args: see `ChatClient.connect`.
        """
        socket_url(base_url, agent, name, "", branch)  # validates base_url and branch
        self.base_url = base_url.rstrip("/")
        self.agent = agent
        self.name = name
        self.connection_id = connection_id or str(uuid.uuid4())
        self.messages: list[UIMessage] = []
        self.errors: list[ClientError] = []
        self._headers = dict(headers or {})
        self._on_frame = on_frame
        self._on_reply = on_reply
        self._on_tool_call = on_tool_call
        self._reconnect_attempts = reconnect_attempts
        self._reconnect_max_delay = reconnect_max_delay
        self._open_timeout = open_timeout
        self._http = httpx.AsyncClient(headers=self._headers, timeout=HTTP_TIMEOUT)
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._close_done = asyncio.Event()
        self._closed: ClientError | None = None
        self._reader: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._replies: dict[str, ReplyControl] = {}
        self._recent: deque[str] = deque(maxlen=_RECENT_REPLIES)
        self._acked: dict[str, ReplyControl] = {}
        self._sends = 0
        self._ack_at: dict[str, int] = {}
        self._probe_sent: dict[str, int] = {}
        self._offered: ReplyControl | None = None
        self._probes: dict[str, _Probe] = {}
        self._resume_lock = asyncio.Lock()
        self._last_op: ReplyControl | _Probe | _BranchOp | None = None
        self._transcript_version = 0
        self._continuations = 0
        self._last_continuation: ReplyControl | None = None
        self._branch = branch_query(branch) or MAIN_BRANCH
        self._branch_lock = asyncio.Lock()
        self._branch_op: _BranchOp | None = None
        self._ready = False

    @classmethod
    def connect(
        cls,
        base_url: str,
        agent: str,
        name: str,
        *,
        connection_id: str | None = None,
        branch: BranchRef | None = None,
        headers: Mapping[str, str] | None = None,
        load_history: bool = True,
        on_frame: FrameHook | None = None,
        on_reply: ReplyHook | None = None,
        on_tool_call: ToolCallHook | None = None,
        reconnect_attempts: int = 8,
        reconnect_max_delay: float = 5.0,
        open_timeout: float = 10.0,
    ) -> Connecting:
        """Connect to a chat.

        Use as `client = await ChatClient.connect(...)` or
        `async with ChatClient.connect(...) as client:`.

        Args:
            base_url: The server's base URL, `http(s)://host:port` (`ws(s)://` works too).
            agent: The agent namespace, kebab-case (`chat-agent`).
            name: The chat instance name.
            connection_id: The connection id (`_pk`); a fresh UUID by default. Reusing the id
                of a dropped client lets the server treat this one as its reconnect.
            branch: The branch to view, by id or name (`main` by default): the socket's
                `?branch=`, and the branch `load_history` and `history` read.
            headers: Extra headers for the WebSocket handshake and the HTTP requests.
            load_history: Seed `messages` from `get-messages` once connected, as
                `useAgentChat` does. Without it, the first `send` on an existing chat would
                present the server a transcript without the earlier messages.
            on_frame: Called with every received frame, once the client has handled it (so
                `messages` and the replies already reflect it).
            on_reply: Called with every reply this client did not start (another client's
                request it observes, a stream the server offers for resume, a continuation).
            on_tool_call: Answers client tool calls, like the AI SDK's `onToolCall`: called
                for each call left in `input-available` by a reply this client sent (and by
                the continuations that follow), with a `ToolCall`. Return the output to send
                it with `add_tool_output`; return None to leave the call unanswered; raise to
                send the exception's text with `add_tool_error`. `Reply.final()` follows the
                continuations it causes.
            reconnect_attempts: Reconnect attempts after the socket drops before giving up.
            reconnect_max_delay: Upper bound of the backoff between attempts, in seconds.
            open_timeout: Timeout of each WebSocket handshake, in seconds.

        Returns:
            An awaitable that is also an async context manager.

        Raises:
            ClientError: `connect_failed` if the socket cannot be opened; `unknown_branch` if
                the conversation has no branch `branch`; `http_error` if the history cannot be
                loaded.
        """
        socket_url(base_url, agent, name, "", branch)  # a bad URL fails here, not when awaited

        def create() -> ChatClient:
            return cls(
                base_url,
                agent,
                name,
                connection_id=connection_id,
                branch=branch,
                headers=headers,
                on_frame=on_frame,
                on_reply=on_reply,
                on_tool_call=on_tool_call,
                reconnect_attempts=reconnect_attempts,
                reconnect_max_delay=reconnect_max_delay,
                open_timeout=open_timeout,
            )

        return Connecting(create, load_history=load_history)

    async def _start(self, *, load_history: bool) -> None:
        try:
            ws = await self._open_socket()
        except BaseException:
            await self._http.aclose()
            raise
        self._use(ws)
        self._reader = asyncio.create_task(self._read(ws), name=f"durachat-reader-{self.name}")
        try:
            if self._branch != MAIN_BRANCH:
                wanted = self._branch
                # Tells whether the branch exists, and its id (what `branch` reports, and what
                # reconnects name: it survives a rename).
                listed = await self.branches()
                if not any(is_branch(record, wanted) for record in listed):
                    raise ClientError(
                        "unknown_branch", f"the conversation has no branch {wanted!r}"
                    )
            if load_history:
                await self.history()
        except BaseException:
            await self.close()
            raise
        self._ready = True

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether a socket is open right now (False while reconnecting and after `close`)."""
        return self._connected.is_set() and self._closed is None

    @property
    def websocket(self) -> ClientConnection | None:
        """The current socket, for diagnostics and tests; None while reconnecting."""
        return self._ws if self.connected else None

    @property
    def replies(self) -> list[Reply]:
        """The replies that have not ended yet, own and observed, oldest first."""
        return [control.reply for control in self._replies.values()]

    @property
    def branch(self) -> str:
        """The branch this client views: `"main"` or the branch's id (a string of digits).

        It changes with `switch_branch`, and when the server answers an `edit` or a
        `regenerate` on a new branch. Until a branch named at connect time is looked up, it is
        that name.
        """
        return self._branch

    # Operations

    async def history(self) -> list[UIMessage]:
        """Fetch the persisted transcript of the viewed branch over HTTP and make it the local
        transcript.

        Replies still streaming stay in the local transcript. If a transcript broadcast arrived
        while the request was in flight, the broadcast is newer and is kept.

        Returns:
            The transcript the server returned.

        Raises:
            ClientError: `http_error` if the request fails; `unknown_branch` if the branch is
                gone.
        """
        version = self._transcript_version
        branch = self._branch
        messages = await fetch_history(
            self.base_url, self.agent, self.name, branch=branch, http=self._http
        )
        if version == self._transcript_version and branch == self._branch:
            self._set_transcript(messages)
        return messages

    async def send(self, text: str, *, body: Mapping[str, Any] | None = None) -> Reply:
        """Send a user message and return the reply to it.

        The message goes to the end of `messages`; the request carries the whole local
        transcript, like `useAgentChat`.

        Args:
            text: The user's text.
            body: Extra fields for the request body (the hook's `body` option).

        Returns:
            The reply, streaming.

        Raises:
            ClientError: `closed` if the client is closed or could not reconnect.
        """
        user: UIMessage = {
            "id": new_message_id(),
            "role": "user",
            "parts": [{"type": "text", "text": text}],
        }
        self._set_messages([*self.messages, user])
        control = await self._request("submit-message", user["id"], body)
        return control.reply

    async def regenerate(self, *, body: Mapping[str, Any] | None = None) -> Reply:
        """Ask for a new answer to the last user message.

        The local transcript is cut after the last user message (dropping the assistant answer)
        and sent with the trigger `regenerate-message`. A server with branches answers it on a
        new branch forked at that user message, and moves this client there (`branch`); the
        old answer stays on the branch the client left.

        Args:
            body: Extra fields for the request body.

        Returns:
            The new reply, streaming.

        Raises:
            ClientError: `nothing_to_regenerate` if the transcript has no user message;
                `closed` if the client is closed.
        """
        last_user = next(
            (
                i
                for i in range(len(self.messages) - 1, -1, -1)
                if self.messages[i].get("role") == "user"
            ),
            None,
        )
        if last_user is None:
            raise ClientError("nothing_to_regenerate", "the transcript has no user message")
        dropped = frozenset(
            str(m.get("id")) for m in self.messages[last_user + 1 :] if m.get("id") is not None
        )
        self._set_messages(self.messages[: last_user + 1])
        user_id = self.messages[last_user].get("id")
        control = await self._request(
            "regenerate-message",
            user_id if isinstance(user_id, str) else None,
            body,
            stale_ids=dropped,
            may_fork=True,
        )
        return control.reply

    async def edit(
        self, message_id: str, text: str, *, body: Mapping[str, Any] | None = None
    ) -> Reply:
        """Edit a user message and answer it again, like the AI SDK's
        `sendMessage({text, messageId})`.

        The local transcript becomes the messages before it and the edited message (same id,
        `text` as its only part), and is sent with the trigger `submit-message`. A server with
        branches answers it on a new branch forked at the message's parent (at the root for
        the first message) and moves this client there (`branch`); the original message and
        what followed it stay on the branch the client left.

        Args:
            message_id: The id of the user message to edit.
            text: Its new text.
            body: Extra fields for the request body.

        Returns:
            The reply to the edited message, streaming.

        Raises:
            ClientError: `unknown_message` if `messages` has no such message;
                `not_a_user_message` if it is not a user message; `closed` if the client is
                closed.
        """
        transcript, dropped = edit_transcript(self.messages, message_id, text)
        self._set_messages(transcript)
        control = await self._request(
            "submit-message", message_id, body, stale_ids=dropped, may_fork=True
        )
        return control.reply

    async def cancel(self, request_id: str | None = None) -> str | None:
        """Ask the server to cancel a running reply (`cf_agent_chat_request_cancel`).

        The reply then ends with the outcome `aborted`, keeping what was streamed.

        Args:
            request_id: The reply's request id; by default the newest running reply, own or
                observed.

        Returns:
            The request id the cancel was sent for, or None if nothing was running.
        """
        if request_id is None:
            running = list(self._replies)
            if not running:
                return None
            request_id = running[-1]
        self._last_op = None
        await self._send({"type": MessageType.CHAT_REQUEST_CANCEL.value, "id": request_id})
        return request_id

    async def clear(self) -> None:
        """Clear the chat for everyone (`cf_agent_chat_clear`) and empty `messages`.

        Running replies end as the server stops them.
        """
        self._last_op = None
        await self._send({"type": MessageType.CHAT_CLEAR.value})
        self._clear_transcript()

    # Branches

    async def branches(self, *, timeout: float = _BRANCH_WAIT) -> list[JSONDict]:
        """List the conversation's branches (`durachat_branches`).

        Also updates `branch` from the server's `viewing`.

        Args:
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The branches, oldest first (`main` first), as `{"id", "name", "leaf_message_id",
            "parent_branch_id", "fork_message_id", "created_at", "updated_at"}`; `[]` for a
            conversation that has no message yet.

        Raises:
            ClientError: the server's error (`database_unavailable`); `timeout`;
                `disconnected` if the socket dropped while waiting; `closed`.
        """
        answer = await self._branch_request({"type": MessageType.BRANCHES.value}, "list", timeout)
        listed = answer.get("branches")
        return [b for b in listed if isinstance(b, dict)] if isinstance(listed, list) else []

    async def switch_branch(self, branch: BranchRef, *, timeout: float = _BRANCH_WAIT) -> None:
        """View another branch (`durachat_branch_switch`).

        Returns once the server switched and sent the branch's transcript, which is then
        `messages`. A reply streaming on that branch is offered for resume, as on connect
        (`on_reply`, `resume`). Replies still running on the branch left end at once with the
        error `left_branch` (they go on on the server).

        Args:
            branch: The branch's id or name (`main` for main).
            timeout: How long to wait for the server, in seconds.

        Raises:
            ClientError: `unknown_branch` if the conversation has no such branch (the client
                keeps viewing its branch); `timeout`; `disconnected`; `closed`.
        """
        ref = branch_query(branch) or MAIN_BRANCH
        await self._branch_request(
            {"type": MessageType.BRANCH_SWITCH.value, "branch": ref}, "switch", timeout
        )

    async def siblings(
        self, message_id: str, *, branch: BranchRef | None = None, timeout: float = _BRANCH_WAIT
    ) -> tuple[list[str], int]:
        """The alternatives of a message, for a "2 / 3" picker (`durachat_branch_op` `siblings`).

        Args:
            message_id: A UIMessage id on the branch's path (the occurrence nearest the leaf, if
                the id occurs twice there).
            branch: The branch whose path holds the message (id or name); the viewed one by
                default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The ids of every child of the message's parent (every root, for a root), oldest
            first, the message included; and the message's index among them. A picker shows
            `index + 1` / `len(ids)`.

        Raises:
            ClientError: `unknown_message` if the message is not on the branch's path;
                `unknown_branch`; `database_unavailable`; `timeout`; `disconnected`; `closed`.
                `status` is the HTTP status of the server's answer.
        """
        fields: JSONDict = {"messageId": message_id}
        if branch is not None:
            fields["branch"] = _op_branch(branch)
        body = await self._operate("siblings", fields, timeout)
        ids, index = body.get("siblings"), body.get("index")
        if (
            not isinstance(ids, list)
            or not all(isinstance(i, str) for i in ids)
            or not isinstance(index, int)
            or isinstance(index, bool)
        ):
            raise ClientError("server_error", f"the server answered siblings with {body!r}")
        return list(ids), index

    async def create_branch(
        self,
        name: str,
        *,
        at: str | None = None,
        from_branch: BranchRef | None = None,
        timeout: float = _BRANCH_WAIT,
    ) -> JSONDict:
        """Create a branch (`durachat_branch_op` `create`). The client keeps viewing its branch.

        Args:
            name: The new branch's name, unique in the conversation (1 to 200 characters, not
                digits only).
            at: The UIMessage id on `from_branch`'s path to fork at; its leaf by default.
            from_branch: The branch to fork from (id or name); the viewed one by default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The new branch, as `branches` lists it (`{"id", "name", "leaf_message_id",
            "parent_branch_id", "fork_message_id", "created_at", "updated_at"}`).

        Raises:
            ClientError: `branch_exists` if the name is taken; `invalid_branch_name`;
                `unknown_branch`; `unknown_message` if `at` is not on the branch's path;
                `unavailable`; `timeout`; `disconnected`; `closed`.
        """
        fields: JSONDict = {"name": name}
        if at is not None:
            fields["at"] = at
        if from_branch is not None:
            fields["from_branch"] = _op_branch(from_branch)
        return await self._operate("create", fields, timeout)

    async def rename_branch(
        self, branch: BranchRef, name: str, *, timeout: float = _BRANCH_WAIT
    ) -> JSONDict:
        """Rename a branch (`durachat_branch_op` `rename`). Its id, which `branch` reports,
        does not change.

        Args:
            branch: The branch to rename (id or name).
            name: Its new name.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            The renamed branch, as `branches` lists it.

        Raises:
            ClientError: `branch_exists` if the name is taken; `main_branch` for `main`;
                `unknown_branch`; `invalid_branch_name`; `unavailable`; `timeout`;
                `disconnected`; `closed`.
        """
        return await self._operate("rename", {"branch": _op_branch(branch), "name": name}, timeout)

    async def delete_branch(self, branch: BranchRef, *, timeout: float = _BRANCH_WAIT) -> int:
        """Delete a branch and the messages only it reaches (`durachat_branch_op` `delete`).

        A reply streaming on it is cancelled first. If this client views the branch, the server
        moves it to `main`: this returns once it has, so `branch` is then `"main"` and
        `messages` is `main`'s transcript.

        Args:
            branch: The branch to delete (id or name).
            timeout: How long to wait for the server (the answer, and the move to `main`), in
                seconds.

        Returns:
            How many messages were deleted.

        Raises:
            ClientError: `main_branch` for `main`; `unknown_branch`; `unavailable`; `timeout`
                (also when the branch was deleted but the move to `main` did not arrive in
                time); `disconnected`; `closed`.
        """
        ref = _op_branch(branch)
        deadline = asyncio.get_running_loop().time() + timeout
        viewed = self._branch
        follow = False
        if MAIN_BRANCH not in (viewed, ref):
            if ref.isdigit() and ref.isascii():
                follow = ref == viewed
            else:
                # A name: whether it is the viewed branch takes its id (the answer has none).
                listed = await self.branches(timeout=timeout)
                follow = any(
                    is_branch(record, ref) and is_branch(record, self._branch) for record in listed
                )
        remaining = max(deadline - asyncio.get_running_loop().time(), 0.0)
        body = await self._operate("delete", {"branch": ref}, remaining, follow_delete=follow)
        deleted = body.get("deleted_messages")
        if not isinstance(deleted, int) or isinstance(deleted, bool):
            raise ClientError("server_error", f"the server answered delete with {body!r}")
        return deleted

    async def fork_conversation(
        self, name: str, *, branch: BranchRef | None = None, timeout: float = _BRANCH_WAIT
    ) -> JSONDict:
        """Copy a branch into a new conversation, as its `main` (`durachat_branch_op` `fork`).

        The new conversation has the same agent; connect to it with
        `ChatClient.connect(base_url, agent, name)`.

        Args:
            name: The new conversation's name; it must not exist.
            branch: The branch to copy (id or name); the viewed one by default.
            timeout: How long to wait for the answer, in seconds.

        Returns:
            `{"agent", "name"}` of the new conversation.

        Raises:
            ClientError: `conversation_exists` if it exists; `unknown_branch`; `unavailable`;
                `timeout`; `disconnected`; `closed`.
        """
        fields: JSONDict = {"name": name}
        if branch is not None:
            fields["branch"] = _op_branch(branch)
        return await self._operate("fork", fields, timeout)

    async def _operate(
        self, op: str, fields: JSONDict, timeout: float, *, follow_delete: bool = False
    ) -> JSONDict:
        """Send a `durachat_branch_op` and return the body of its 2xx answer."""
        op_id = new_request_id()
        frame: JSONDict = {"type": MessageType.BRANCH_OP.value, "id": op_id, "op": op, **fields}
        answer = await self._branch_request(
            frame, "op", timeout, op_id=op_id, follow_delete=follow_delete
        )
        status, body = answer.get("status"), answer.get("body")
        if not isinstance(body, dict):
            body = {}
        if not isinstance(status, int) or not 200 <= status < 300:
            code, message = body.get("code"), body.get("message")
            raise ClientError(
                code if isinstance(code, str) else "server_error",
                message if isinstance(message, str) else f"the server answered {op} with {status}",
                status=status if isinstance(status, int) else None,
            )
        return body

    async def _branch_request(
        self,
        frame: JSONDict,
        kind: _BranchKind,
        timeout: float,
        *,
        op_id: str | None = None,
        follow_delete: bool = False,
    ) -> JSONDict:
        async with self._branch_lock:
            op = _BranchOp(kind, op_id, follow_delete=follow_delete)
            self._branch_op = op
            self._last_op = op
            try:
                await self._send(frame)
                try:
                    async with asyncio.timeout(timeout):
                        answer = await op.answer
                        if op.follow_delete and _succeeded(answer):
                            await op.moved
                        return answer
                except TimeoutError:
                    if op.answer.done():
                        raise ClientError(
                            "timeout",
                            f"the branch was deleted, but the server did not move the client "
                            f"to main in {timeout}s",
                        ) from None
                    raise ClientError(
                        "timeout", f"the server did not answer {frame['type']} in {timeout}s"
                    ) from None
            finally:
                if self._branch_op is op:
                    self._branch_op = None
                if self._last_op is op:
                    self._last_op = None

    # Tools

    def pending_tool_calls(self) -> list[ToolCall]:
        """Return the tool calls of the local transcript that wait for this client.

        Returns:
            The calls in `input-available` (client tools: answer with `add_tool_output` or
            `add_tool_error`) and `approval-requested` (answer with `approve_tool`), oldest
            first.
        """
        return pending_tool_calls(self.messages)

    async def add_tool_output(
        self,
        tool_call_id: str,
        output: Any,
        *,
        tool_name: str | None = None,
        auto_continue: bool = True,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply | None:
        """Answer a client tool call with its output (`cf_agent_tool_result`, PROTOCOL §3.6).

        The part becomes `output-available` in `messages` at once; the server stores it and
        sends `cf_agent_message_updated` to every tab. With `auto_continue`, the server then
        continues the assistant message (a new turn whose chunks extend it); the reply of that
        continuation is returned, like `send` returns the reply to a message. It waits only
        while the server holds the continuation back: not when other calls of the same step
        still wait for an answer (the answer to the last of them returns the continuation).

        Args:
            tool_call_id: The call's id (`ToolCall.tool_call_id`).
            output: The tool's output, any JSON value.
            tool_name: The tool's name; looked up in the transcript by default.
            auto_continue: Let the server continue once every call of the step is answered
                (the hook's `autoContinueAfterToolResult`).
            client_tools: The schemas of the client's tools (`{name, description?,
                parameters?}`), which replace the ones the server keeps for continuations.

        Returns:
            The continuation's reply, streaming; None if no continuation started.

        Raises:
            ClientError: the server's error (`unknown_tool_call` for a call the chat does not
                have); `closed` if the client is closed.
        """
        control = await self._tool_output(
            tool_call_id,
            output,
            tool_name=tool_name,
            auto_continue=auto_continue,
            client_tools=client_tools,
        )
        return control.reply if control is not None else None

    async def _tool_output(
        self,
        tool_call_id: str,
        output: Any,
        *,
        tool_name: str | None,
        auto_continue: bool = True,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> ReplyControl | None:
        frame = self._tool_result_frame(tool_call_id, tool_name, client_tools)
        frame.update(output=output, autoContinue=auto_continue)
        expected = self._apply_locally(
            tool_call_id, lambda part: apply_tool_result(part, output=output)
        )
        return await self._answer(frame, expected=auto_continue and expected)

    async def add_tool_error(
        self,
        tool_call_id: str,
        error_text: str,
        *,
        tool_name: str | None = None,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report that a client tool failed (`cf_agent_tool_result` with `output-error`).

        The part becomes `output-error` with `errorText`. The server never continues after an
        error: the client decides what happens next (send a message, say).

        Args:
            tool_call_id: The call's id.
            error_text: What went wrong; shown to the user and to the model.
            tool_name: The tool's name; looked up in the transcript by default.
            client_tools: The schemas of the client's tools, as for `add_tool_output`.

        Raises:
            ClientError: the server's error (`unknown_tool_call`); `closed` if the client is
                closed.
        """
        frame = self._tool_result_frame(tool_call_id, tool_name, client_tools)
        frame.update(output=None, state="output-error", errorText=error_text, autoContinue=False)
        self._apply_locally(
            tool_call_id,
            lambda part: apply_tool_result(part, state="output-error", error_text=error_text),
        )
        await self._answer(frame, expected=False)

    async def approve_tool(
        self, tool_call_id: str, approved: bool, *, auto_continue: bool = True
    ) -> Reply | None:
        """Answer an approval request (`cf_agent_tool_approval`, PROTOCOL §3.7).

        The part becomes `approval-responded` (approved) or `output-denied` (refused). With
        `auto_continue`, the server then continues: it runs an approved call and calls the
        model again (a refused call is reported to the model as denied).

        Args:
            tool_call_id: The call's id (`ToolCall.tool_call_id`).
            approved: The user's decision.
            auto_continue: Let the server continue once every call of the step is answered.

        Returns:
            The continuation's reply, streaming; None if no continuation started.

        Raises:
            ClientError: the server's error (`unknown_tool_call`); `closed` if the client is
                closed.
        """
        frame: JSONDict = {
            "type": MessageType.TOOL_APPROVAL.value,
            "toolCallId": tool_call_id,
            "approved": approved,
            "autoContinue": auto_continue,
        }
        expected = self._apply_locally(
            tool_call_id, lambda part: apply_tool_approval(part, approved)
        )
        control = await self._answer(frame, expected=auto_continue and expected)
        return control.reply if control is not None else None

    def _tool_result_frame(
        self,
        tool_call_id: str,
        tool_name: str | None,
        client_tools: Sequence[Mapping[str, Any]] | None,
    ) -> JSONDict:
        if tool_name is None:
            call = next(
                (c for c in self.pending_tool_calls() if c.tool_call_id == tool_call_id), None
            )
            tool_name = call.tool_name if call is not None else None
        frame: JSONDict = {"type": MessageType.TOOL_RESULT.value, "toolCallId": tool_call_id}
        if tool_name is not None:
            frame["toolName"] = tool_name
        if client_tools:
            frame["clientTools"] = [dict(t) for t in client_tools]
        return frame

    def _apply_locally(
        self, tool_call_id: str, change: Callable[[JSONDict], JSONDict | None]
    ) -> bool:
        """Answer a call in the local transcript, as the hook does; return whether the server
        will continue after it (as far as the local transcript tells)."""
        where = find_tool_call(self.messages, tool_call_id)
        if where is None:
            return True  # the server knows better
        index, part_index = where
        updated = change(self.messages[index]["parts"][part_index])
        if updated is not None:
            self._set_messages(replace_part(self.messages, where, updated))
        return will_continue(self.messages[index])

    async def _answer(self, frame: JSONDict, *, expected: bool) -> ReplyControl | None:
        """Send a tool answer and return the continuation it starts, if it starts one."""
        seen = self._continuations
        if not expected:
            # The probe still tells when the server has handled the answer, and its errors.
            await self._probe(frame, pending_timeout=None)
            return None
        reply = await self._probe(frame)
        for _ in range(_FOLLOW_TURNS):
            if reply is None:
                break
            await reply.started()
            if reply.reply.continuation:
                return self._tool_reply(reply)
            # Another turn runs (or ran); the continuation is queued behind it.
            await reply.reply.wait()
            reply = await self._probe()
        if self._continuations > seen and self._last_continuation is not None:
            # It ran so fast that it had ended before the server answered the probe.
            return self._tool_reply(self._last_continuation)
        return None

    def _tool_reply(self, reply: ReplyControl) -> ReplyControl:
        """A reply whose tool calls the `on_tool_call` hook answers (if there is a hook)."""
        if self._on_tool_call is not None and reply.follow is None:
            reply.follow = asyncio.get_running_loop().create_future()
            self._spawn(self._answer_tool_calls(reply, reply.follow))
        return reply

    async def _answer_tool_calls(
        self, reply: ReplyControl, follow: asyncio.Future[ReplyControl | None]
    ) -> None:
        """Run the `on_tool_call` hook on the client tool calls a reply ended with."""
        continuation: ReplyControl | None = None
        try:
            if await reply.reply.wait() != "completed" or self._on_tool_call is None:
                return
            hook = self._on_tool_call
            message_id = reply.reply.message_id
            calls = [
                call
                for call in self.pending_tool_calls()
                if call.state == "input-available" and call.message_id == message_id
            ]
            answers = await asyncio.gather(*(self._call_hook(hook, call) for call in calls))
            # Errors first: they never continue, so the last answer of a batch is an output,
            # whose continuation then runs with every result.
            ordered = sorted(
                zip(calls, answers, strict=True), key=lambda pair: not isinstance(pair[1], _Failed)
            )
            for call, answer in ordered:
                if isinstance(answer, _Failed):
                    await self.add_tool_error(
                        call.tool_call_id, answer.text, tool_name=call.tool_name
                    )
                elif answer is not None:
                    answered = await self._tool_output(
                        call.tool_call_id, answer, tool_name=call.tool_name
                    )
                    continuation = answered or continuation
        except ClientError as exc:
            log.warning("chat %s: could not answer a tool call: %s", self.name, exc)
        finally:
            if not follow.done():
                follow.set_result(continuation)

    @staticmethod
    async def _call_hook(hook: ToolCallHook, call: ToolCall) -> Any:
        try:
            return await hook(call)
        except Exception as exc:
            log.info("on_tool_call failed for %s", call.tool_name, exc_info=True)
            return _Failed(str(exc) or type(exc).__name__)

    async def resume(
        self, *, answer_timeout: float = 5.0, pending_timeout: float = 60.0
    ) -> Reply | None:
        """Pick up the chat's running reply, if there is one (the resume handshake, §4.4).

        Sends `cf_agent_stream_resume_request`; on `cf_agent_stream_resuming` acknowledges the
        stream once and returns its reply, which replays the stored chunks and then continues
        live. If the server offered a stream unprompted on connect, that reply is returned.

        Args:
            answer_timeout: How long to wait for the server's answer, in seconds.
            pending_timeout: How long to wait after `cf_agent_stream_pending` (a turn accepted
                but not streaming yet), refreshed by every such frame.

        Returns:
            The running reply (possibly this client's own, after a reconnect), or None if the
            chat is idle or the server did not answer in time.

        Raises:
            ClientError: the server's `durachat_error` for the request, or `disconnected` if
                the socket dropped while waiting.
        """
        control = await self._probe(answer_timeout=answer_timeout, pending_timeout=pending_timeout)
        return control.reply if control is not None else None

    async def _probe(
        self,
        before: JSONDict | None = None,
        *,
        answer_timeout: float = 5.0,
        pending_timeout: float | None = 60.0,
    ) -> ReplyControl | None:
        """Send `before` (if any), then a resume probe; see `resume`.

        Server errors after `before` was sent are its errors (the probe is the operation they
        belong to); they are raised. With `pending_timeout=None`, a pending turn is not waited
        for (None is returned).
        """
        async with self._resume_lock:
            probe = _Probe(new_request_id())
            self._probes[probe.probe_id] = probe
            self._last_op = probe
            try:
                if before is not None:
                    await self._send(before)
                await self._send(
                    {"type": MessageType.STREAM_RESUME_REQUEST.value, "probeId": probe.probe_id},
                    stamp=partial(self._probe_sent.__setitem__, probe.probe_id),
                )
                wait = answer_timeout
                while True:
                    try:
                        async with asyncio.timeout(wait):
                            answer = await probe.answers.get()
                    except TimeoutError:
                        return self._take_offered()
                    if answer.kind == "pending":
                        if pending_timeout is None:
                            return None
                        wait = pending_timeout
                    elif answer.kind == "error":
                        raise answer.error or ClientError("disconnected", "the socket dropped")
                    elif answer.kind == "resuming":
                        self._offered = None
                        return answer.reply
                    else:
                        return self._take_offered()
            finally:
                self._probes.pop(probe.probe_id, None)
                if self._last_op is probe:
                    self._last_op = None

    async def close(self) -> None:
        """Close the socket and the HTTP client. Replies still running end with an error."""
        if self._closing:
            await self._close_done.wait()
            return
        self._closing = True
        for task in [self._recovery, *self._tasks]:
            if task is not None:
                task.cancel()
        ws = self._ws
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            # It may be between sockets, in a backoff sleep or a handshake.
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._shutdown(ClientError("closed", "the client was closed"))
        await self._http.aclose()
        self._close_done.set()

    # Sending

    async def _request(
        self,
        trigger: str,
        user_message_id: str | None,
        body: Mapping[str, Any] | None,
        *,
        stale_ids: frozenset[str] = frozenset(),
        may_fork: bool = False,
    ) -> ReplyControl:
        request_id = new_request_id()
        payload = {"messages": self.messages, "trigger": trigger, **(body or {})}
        frame = {
            "id": request_id,
            "init": {"method": "POST", "body": json.dumps(payload)},
            "type": MessageType.USE_CHAT_REQUEST.value,
        }
        reply = new_reply(
            request_id,
            observed=False,
            user_message_id=user_message_id,
            canceller=self.cancel,
            branch=self._branch,
        )
        reply.may_fork = may_fork
        reply.request_frame = frame
        reply.stale_ids = stale_ids
        # Registered before sending: the first chunk may arrive before `send` returns.
        self._replies[request_id] = reply
        self._last_op = reply
        try:
            await self._send(frame)
        except BaseException:
            self._replies.pop(request_id, None)
            raise
        return self._tool_reply(reply)

    async def _send(self, frame: JSONDict, *, stamp: Callable[[int], object] | None = None) -> None:
        """Send on the current socket, waiting through a reconnect.

        `stamp` gets the frame's position among the frames sent on the socket it goes out on.
        """
        text = json.dumps(frame)
        while True:
            if self._closed is not None:
                raise ClientError(self._closed.code, self._closed.message)
            if self._closing:
                raise ClientError("closed", "the client was closed")
            ws = self._ws
            if ws is not None and self._connected.is_set():
                try:
                    position = self._position(ws)
                    if stamp is not None:
                        stamp(position)
                    await ws.send(text)
                    return
                except websockets.ConnectionClosed:
                    if self._ws is ws:
                        self._connected.clear()
            await self._connected.wait()

    async def _send_on(
        self, ws: ClientConnection, frame: JSONDict, *, stamp: Callable[[int], object] | None = None
    ) -> None:
        # From the reader: a frame that only makes sense on this socket.
        position = self._position(ws)
        if stamp is not None:
            stamp(position)
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps(frame))

    def _position(self, ws: ClientConnection) -> int:
        # The server handles a socket's frames in order, so positions order our frames as the
        # server saw them (numbered before the send: the answer may arrive before it returns).
        if ws is not self._ws:
            return -1
        self._sends += 1
        return self._sends

    # The socket

    async def _open_socket(self) -> ClientConnection:
        url = socket_url(self.base_url, self.agent, self.name, self.connection_id, self._branch)
        try:
            return await ws_connect(
                url,
                additional_headers=self._headers or None,
                max_size=None,
                open_timeout=self._open_timeout,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            text = exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
            raise ClientError(
                "connect_failed",
                f"{url.split('?', 1)[0]} refused the connection: HTTP {status} {text}".rstrip(),
                status=status,
            ) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            where = url.split("?", 1)[0]
            raise ClientError("connect_failed", f"cannot connect to {where}: {exc}") from exc

    def _use(self, ws: ClientConnection) -> None:
        for reply in self._replies.values():
            reply.new_socket()
        self._ws = ws
        self._acked = {}
        self._sends = 0
        self._ack_at = {}
        self._probe_sent = {}
        self._offered = None
        self._connected.set()

    async def _read(self, ws: ClientConnection) -> None:
        while True:
            try:
                async for raw in ws:
                    if isinstance(raw, str):
                        await self._receive(ws, raw)
            except websockets.ConnectionClosed:
                pass
            self._connected.clear()
            if self._closing:
                return
            for probe in list(self._probes.values()):
                probe.answers.put_nowait(
                    _ProbeAnswer("error", error=ClientError("disconnected", "the socket dropped"))
                )
            if self._branch_op is not None:
                self._branch_op.fail(ClientError("disconnected", "the socket dropped"))
            code = ws.close_code
            if code is not None and (code == 1008 or 4000 <= code <= 4999):
                self._shutdown(ClientError("closed", f"the server closed the connection ({code})"))
                return
            log.info("chat %s: socket dropped (%s); reconnecting", self.name, code)
            reconnected = await self._reconnect()
            if reconnected is None:
                # None also when close() interrupted the attempts; close() shuts down then.
                if not self._closing_now():
                    self._shutdown(ClientError("disconnected", "the connection was lost"))
                return
            ws = reconnected
            self._use(ws)
            if self._recovery is not None:
                self._recovery.cancel()
            self._recovery = asyncio.create_task(self._recover())

    async def _reconnect(self) -> ClientConnection | None:
        delay = 0.1
        for attempt in range(1, self._reconnect_attempts + 1):
            # Jittered so that clients dropped together do not come back together.
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            if self._closing:
                return None
            try:
                return await self._open_socket()
            except ClientError as exc:
                log.info("chat %s: reconnect attempt %d failed: %s", self.name, attempt, exc)
                if exc.status is not None and 400 <= exc.status < 500:
                    return None
            delay = min(delay * 2, self._reconnect_max_delay)
        return None

    async def _recover(self) -> None:
        """After a reconnect: resume the running stream, then settle replies left open."""
        try:
            followed: set[str] = set()
            while True:
                reply = await self._probe()
                if reply is None or reply.request_id in followed:
                    break
                followed.add(reply.request_id)
                if not any(r is not reply for r in self._replies.values()):
                    return
                # Other replies are queued behind this one or ended while we were away.
                await reply.reply.wait()
            for straggler in list(self._replies.values()):
                if straggler.request_id in self._acked:
                    continue
                # The server replays a stream it still buffers; otherwise it answers with a
                # bare `done` and the transcript tells how the reply ended.
                straggler.begin_replay(recovering=True)
                self._acked[straggler.request_id] = straggler
                await self._send(
                    {"type": MessageType.STREAM_RESUME_ACK.value, "id": straggler.request_id},
                    stamp=partial(self._ack_at.__setitem__, straggler.request_id),
                )
        except ClientError as exc:
            log.info("chat %s: recovery stopped: %s", self.name, exc)
        except Exception:
            log.exception("chat %s: recovery failed", self.name)

    def _closing_now(self) -> bool:
        # Read through a call: close() may run during an await, which a type checker that
        # narrowed `self._closing` before that await cannot see.
        return self._closing

    def _shutdown(self, error: ClientError) -> None:
        if self._closed is None:
            self._closed = error
        self._connected.set()  # wakes senders, which then see `_closed`
        for reply in list(self._replies.values()):
            reply.finish("error", error)
            self._retire(reply)
        for probe in self._probes.values():
            probe.answers.put_nowait(_ProbeAnswer("error", error=error))
        if self._branch_op is not None:
            self._branch_op.fail(error)

    # Receiving

    async def _receive(self, ws: ClientConnection, raw: str) -> None:
        try:
            frame = json.loads(raw)
        except ValueError:
            log.debug("chat %s: ignoring a non-JSON frame", self.name)
            return
        if not isinstance(frame, dict):
            return
        try:
            await self._dispatch(ws, frame)
        except Exception:
            log.exception("chat %s: cannot handle frame %s", self.name, frame.get("type"))
        if self._on_frame is not None:
            try:
                self._on_frame(frame)
            except Exception:
                log.exception("chat %s: on_frame hook failed", self.name)

    async def _dispatch(self, ws: ClientConnection, frame: JSONDict) -> None:
        kind = frame.get("type")
        if kind == MessageType.USE_CHAT_RESPONSE:
            await self._on_response(ws, frame)
        elif kind == MessageType.CHAT_MESSAGES:
            messages = frame.get("messages")
            if isinstance(messages, list):
                self._set_transcript([m for m in messages if isinstance(m, dict)])
            op = self._branch_op
            if op is not None and op.switched:
                # The transcript that follows `durachat_branch_switched`: the switch is done.
                if op.kind == "switch":
                    op.resolve(frame)
                else:
                    op.arrive()
        elif kind == MessageType.CHAT_CLEAR:
            self._clear_transcript()
        elif kind == MessageType.MESSAGE_UPDATED:
            self._on_message_updated(frame)
        elif kind == MessageType.STREAM_RESUMING:
            await self._on_resuming(ws, frame)
        elif kind == MessageType.STREAM_RESUME_NONE:
            self._answer_probes(frame, _ProbeAnswer("none"))
        elif kind == MessageType.STREAM_PENDING:
            probe = self._probes.get(str(frame.get("probeId")))
            if probe is not None:
                probe.answers.put_nowait(_ProbeAnswer("pending"))
        elif kind == MessageType.ERROR:
            self._on_error(frame)
        elif kind == MessageType.BRANCH_SWITCHED:
            self._on_switched(frame)
        elif kind == MessageType.BRANCHES:
            viewing = frame.get("viewing")
            if isinstance(viewing, (str, int)) and not isinstance(viewing, bool):
                self._known_as(str(viewing))
            if self._branch_op is not None and self._branch_op.kind == "list":
                self._branch_op.resolve(frame)
        elif kind == MessageType.BRANCH_OP:
            op = self._branch_op
            # Matched by id: the answer to an operation that timed out may still come.
            if op is not None and op.kind == "op" and frame.get("id") == op.op_id:
                op.resolve(frame)

    async def _on_response(self, ws: ClientConnection, frame: JSONDict) -> None:
        request_id = frame.get("id")
        if not isinstance(request_id, str):
            return
        reply = self._replies.get(request_id)
        if reply is None:
            if frame.get("done") is True or frame.get("replay") is True:
                return
            if request_id in self._recent:
                return
            reply = self._observe(request_id)
        seed = None
        if frame.get("continuation") is True and reply.needs_seed:
            seed = next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)
        was_continuation = reply.reply.continuation
        if reply.handle(frame, seed):
            self._merge(reply)
        if reply.reply.continuation and not was_continuation:
            self._continuations += 1
            self._last_continuation = reply
        if reply.take_gap():
            await self._ack(ws, reply)
        if reply.take_orphaned():
            self._spawn(self._settle_from_history(reply))
        if reply.done:
            self._retire(reply)

    def _observe(self, request_id: str) -> ReplyControl:
        reply = new_reply(request_id, observed=True, canceller=self.cancel, branch=self._branch)
        self._replies[request_id] = reply
        if self._on_reply is not None:
            try:
                self._on_reply(reply.reply)
            except Exception:
                log.exception("chat %s: on_reply hook failed", self.name)
        return reply

    async def _on_resuming(self, ws: ClientConnection, frame: JSONDict) -> None:
        request_id = frame.get("id")
        if not isinstance(request_id, str):
            return
        probe_id = frame.get("probeId")
        # Every `resuming` holds this socket's live frames back until an ACK the server handles
        # after sending it; every ACK replays the whole stream. So ACK unless an earlier ACK
        # already followed what prompted this offer: the connect, or the probe it answers.
        if probe_id is None:
            prompted_at = 0
        elif isinstance(probe_id, str) and probe_id in self._probe_sent:
            prompted_at = self._probe_sent[probe_id]
        else:
            prompted_at = self._sends + 1
        reply = self._acked.get(request_id)
        acked_at = self._ack_at.get(request_id)
        if reply is None or acked_at is None or acked_at < prompted_at:
            reply = reply or self._replies.get(request_id) or self._observe(request_id)
            if probe_id is None:
                self._offered = reply
            await self._ack(ws, reply)
        self._answer_probes(frame, _ProbeAnswer("resuming", reply=reply))

    async def _ack(self, ws: ClientConnection, reply: ReplyControl) -> None:
        """Acknowledge a stream on this socket: the server replays it, then goes on live."""
        reply.begin_replay()
        self._acked[reply.request_id] = reply
        await self._send_on(
            ws,
            {"type": MessageType.STREAM_RESUME_ACK.value, "id": reply.request_id},
            stamp=partial(self._ack_at.__setitem__, reply.request_id),
        )

    def _answer_probes(self, frame: JSONDict, answer: _ProbeAnswer) -> None:
        probe_id = frame.get("probeId")
        if isinstance(probe_id, str):
            probe = self._probes.get(probe_id)
            if probe is not None:
                probe.answers.put_nowait(answer)
            return
        # Unprompted (on connect, or releasing a parked connection): news for every waiter.
        for probe in self._probes.values():
            probe.answers.put_nowait(answer)

    def _on_error(self, frame: JSONDict) -> None:
        code = frame.get("code")
        message = frame.get("message")
        error = ClientError(
            code if isinstance(code, str) else "server_error",
            message if isinstance(message, str) else "the server reported an error",
        )
        log.debug("chat %s: server error %s: %s", self.name, error.code, error.message)
        self.errors.append(error)
        # The frame names no request: it belongs to the last operation still waiting, if any.
        op, self._last_op = self._last_op, None
        if error.code == "unknown_branch" and not (
            isinstance(op, _BranchOp) and op.kind == "switch"
        ):
            # The socket's URL named a branch the conversation does not have (any more): the
            # connection views main.
            self._last_op = op
            self._lost_view()
            return
        if isinstance(op, _BranchOp):
            op.fail(error)
        elif isinstance(op, _Probe):
            op.answers.put_nowait(_ProbeAnswer("error", error=error))
        elif isinstance(op, ReplyControl) and op.reject(error):
            self._retire(op)

    def _on_switched(self, frame: JSONDict) -> None:
        """`durachat_branch_switched`: the connection views another branch from now on."""
        branch = frame.get("branch")
        if not isinstance(branch, (str, int)) or isinstance(branch, bool):
            return
        new = str(branch)
        reason = frame.get("reason")
        log.debug("chat %s: now on branch %s (%s)", self.name, new, reason)
        moved = None
        if reason in _FORK_REASONS:
            # The server forked one of our requests: its reply streams on the new branch.
            # It is sent before anything of the reply, so the reply has received nothing yet.
            fresh = [
                r
                for r in self._replies.values()
                if not r.reply.observed and not r.received and r.branch == self._branch
            ]
            moved = next((r for r in fresh if r.may_fork), fresh[0] if fresh else None)
            if moved is not None:
                moved.branch = new
        self._view(new)
        op = self._branch_op
        if op is None:
            return
        if op.kind == "switch" and reason not in _FORK_REASONS and reason != "deleted":
            # Our switch (`reason: "switch"`; servers before reasons sent none).
            op.switched = True
        elif op.follow_delete and reason == "deleted" and new == MAIN_BRANCH:
            # Our delete of the viewed branch moved us; main's transcript follows.
            op.switched = True

    def _known_as(self, branch: str) -> None:
        """The viewed branch, as the server names it (a branch named at connect time becomes
        its id), with the replies streaming on it."""
        if branch == self._branch:
            return
        for reply in self._replies.values():
            if reply.branch == self._branch:
                reply.branch = branch
        if self._offered is not None and self._offered.branch == self._branch:
            self._offered.branch = branch
        self._branch = branch

    def _lost_view(self) -> None:
        """The server does not know the branch the socket's URL named: it views main."""
        if self._branch == MAIN_BRANCH:
            return
        log.info("chat %s: no branch %s (any more); viewing main", self.name, self._branch)
        self._view(MAIN_BRANCH)
        if self._ready and not self._closing:
            self._spawn(self._reload())

    def _view(self, branch: str) -> None:
        """View `branch` from now on. Replies running elsewhere end: their frames no longer
        reach this connection."""
        self._branch = branch
        # A transcript read in flight is of the branch left.
        self._transcript_version += 1
        for reply in list(self._replies.values()):
            if reply.branch != branch:
                reply.detach()
                reply.finish(
                    "error",
                    ClientError(
                        "left_branch",
                        f"the client left branch {reply.branch}; the reply goes on there",
                    ),
                )
                self._retire(reply)
        if self._offered is not None and self._offered.branch != branch:
            self._offered = None

    async def _reload(self) -> None:
        with contextlib.suppress(ClientError):
            await self.history()

    def _on_message_updated(self, frame: JSONDict) -> None:
        """Replace the message with the same id, else the one with the same tool calls
        (keeping its id); never append (PROTOCOL §3.8)."""
        message = frame.get("message")
        if not isinstance(message, dict):
            return
        ids = [m.get("id") for m in self.messages]
        if message.get("id") in ids:
            index = ids.index(message.get("id"))
        else:
            calls = _tool_call_ids(message)
            index = next((i for i, m in enumerate(self.messages) if calls & _tool_call_ids(m)), -1)
            if index < 0:
                return
            message = {**message, "id": self.messages[index].get("id")}
        messages = list(self.messages)
        messages[index] = message
        self._set_messages(messages)

    async def _settle_from_history(self, reply: ReplyControl, *, final: bool = False) -> None:
        """End a reply whose stream the server no longer had after a reconnect."""
        version = self._transcript_version
        try:
            messages = await fetch_history(
                self.base_url, self.agent, self.name, branch=reply.branch, http=self._http
            )
        except ClientError as exc:
            reply.finish("error", ClientError("lost", f"the reply was lost: {exc.message}"))
            self._retire(reply)
            return
        answer = self._answer_to(messages, reply)
        if answer is None and not final and reply.request_frame is not None:
            # Not answered yet. The server may not have had the request when it said it was
            # idle (it was still on its way), or may never have got it. Wait for the turn's
            # frames, which now come live; resend a request that never arrived (the server
            # knows a request by its id, so a copy still in flight is not run twice).
            reply.recovering = False
            stored = {m.get("id") for m in messages}
            if reply.reply.user_message_id not in stored or reply.stale_ids & stored:
                await self._send(reply.request_frame)
            self._spawn(self._await_turn(reply))
            return
        if answer is not None:
            reply.adopt(answer)
        else:
            reply.finish(
                "error", ClientError("lost", "the connection dropped and the reply was lost")
            )
        self._retire(reply)
        # Retired first, so the stored transcript wins over the reply's partial message.
        if version == self._transcript_version and reply.branch == self._branch:
            self._set_transcript(messages)

    async def _await_turn(self, reply: ReplyControl) -> None:
        try:
            async with asyncio.timeout(_TURN_WAIT):
                await reply.reply.wait()
        except TimeoutError:
            await self._settle_from_history(reply, final=True)

    @staticmethod
    def _answer_to(messages: list[UIMessage], control: ReplyControl) -> UIMessage | None:
        reply = control.reply
        ids = [m.get("id") for m in messages]
        if reply.message_id is not None and reply.message_id in ids:
            return messages[ids.index(reply.message_id)]
        if reply.user_message_id is not None and reply.user_message_id in ids:
            following = ids.index(reply.user_message_id) + 1
            if (
                following < len(messages)
                and messages[following].get("role") == "assistant"
                and ids[following] not in control.stale_ids
            ):
                return messages[following]
        return None

    # The transcript

    def _set_messages(self, messages: list[UIMessage]) -> None:
        self.messages = messages

    def _set_transcript(self, messages: list[UIMessage]) -> None:
        """Replace the transcript from the server, keeping replies still streaming."""
        self._transcript_version += 1
        self.messages = list(messages)
        for reply in self._replies.values():
            self._merge(reply)

    def _clear_transcript(self) -> None:
        # Replies running now belong to the cleared chat: they must not come back into it.
        for reply in self._replies.values():
            reply.detach()
        self._set_transcript([])

    def _merge(self, reply: ReplyControl) -> None:
        self.messages = reply.merge_into(self.messages)

    def _retire(self, reply: ReplyControl) -> None:
        if self._replies.get(reply.request_id) is reply:
            del self._replies[reply.request_id]
            self._recent.append(reply.request_id)

    def _take_offered(self) -> ReplyControl | None:
        reply, self._offered = self._offered, None
        return reply

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _op_branch(branch: BranchRef) -> str:
    """A branch as a `durachat_branch_op` names it: its id or name (`""` means `main`)."""
    return branch_query(branch) or MAIN_BRANCH


def _succeeded(answer: JSONDict) -> bool:
    """Whether a `durachat_branch_op` answer has a 2xx status."""
    status = answer.get("status")
    return isinstance(status, int) and 200 <= status < 300


def _tool_call_ids(message: UIMessage) -> set[str]:
    parts = message.get("parts")
    return {
        part["toolCallId"]
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("toolCallId"), str)
    }


class Connecting:
    """What `ChatClient.connect` returns: await it, or use it as an async context manager."""

    def __init__(self, create: Callable[[], ChatClient], *, load_history: bool) -> None:
        """Hold what it takes to connect.

        Args:
            create: Builds the client (inside the event loop, when connecting).
            load_history: Whether to seed the transcript once connected.
        """
        self._create = create
        self._load_history = load_history
        self._client: ChatClient | None = None

    def __await__(self) -> Generator[Any, None, ChatClient]:
        return self._connect().__await__()

    async def _connect(self) -> ChatClient:
        if self._client is not None:
            raise RuntimeError("ChatClient.connect(...) can be awaited only once")
        self._client = self._create()
        await self._client._start(load_history=self._load_history)
        return self._client

    async def __aenter__(self) -> ChatClient:
        return await self._connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()
