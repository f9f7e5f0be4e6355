"""An async client of the `@cloudflare/ai-chat` WebSocket chat protocol (docs/protocol.md):
`ChatClient` puts the client's parts together (docs/client.md#inside-the-client)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Mapping
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection

from durachat.client.branch_ops import BranchOps
from durachat.client.branches import BranchMethods
from durachat.client.connection import Connection, SocketEvents
from durachat.client.correlator import Correlator
from durachat.client.dispatch import Dispatcher, FrameHook
from durachat.client.errors import ClientError
from durachat.client.messaging import MessageMethods
from durachat.client.reply import Reply
from durachat.client.resume import Resumer
from durachat.client.tool_answers import ToolAnswers, ToolMethods
from durachat.client.tools import ToolCallHook
from durachat.client.transcript import ReplyHook, Transcript, edit_transcript, new_message_id
from durachat.client.urls import (
    branch_query,
    fetch_history,
    http_url,
    is_branch,
    socket_url,
)
from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat.types import UIMessage

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


class ChatClient(MessageMethods, BranchMethods, ToolMethods):
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
    `switch_branch` views another one; the client follows every move the server announces
    (`durachat_branch_switched`, e.g. a deleted branch's viewers go to `main`; durachat answers
    edits and regenerates on the viewed branch itself). Reconnects come back to
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
        self.errors: list[ClientError] = []
        # The client's parts, one per responsibility (docs/client.md#inside-the-client). The
        # public methods come from MessageMethods, BranchMethods and ToolMethods, over them.
        self._transcript = Transcript(
            name, branch_query(branch) or MAIN_BRANCH, canceller=self.cancel, on_reply=on_reply
        )
        self._correlator = Correlator()
        self._connection = Connection(
            base_url=self.base_url,
            agent=agent,
            name=name,
            connection_id=self.connection_id,
            branch=lambda: self._transcript.branch,
            headers=headers or {},
            open_timeout=open_timeout,
            reconnect_attempts=reconnect_attempts,
            reconnect_max_delay=reconnect_max_delay,
        )
        connection, correlator, transcript = self._connection, self._correlator, self._transcript
        self._resumer = Resumer(
            name, connection=connection, correlator=correlator, transcript=transcript
        )
        self._tool_answers = ToolAnswers(
            name,
            connection=connection,
            transcript=transcript,
            resumer=self._resumer,
            on_tool_call=on_tool_call,
        )
        self._branch_ops = BranchOps(
            name,
            connection=connection,
            correlator=correlator,
            transcript=transcript,
            resumer=self._resumer,
        )
        self._dispatcher = Dispatcher(
            name,
            connection=connection,
            correlator=correlator,
            transcript=transcript,
            resumer=self._resumer,
            branch_ops=self._branch_ops,
            tool_answers=self._tool_answers,
            errors=self.errors,
            on_frame=on_frame,
        )

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
        await self._connection.start(
            SocketEvents(
                receive=self._dispatcher.receive,
                opened=self._socket_opened,
                dropped=self._correlator.fail_all,
                recover=self._resumer.recover,
                shut_down=self._shut_down,
            )
        )
        try:
            if self._transcript.branch != MAIN_BRANCH:
                wanted = self._transcript.branch
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
        self._connection.started = True

    def _socket_opened(self) -> None:
        self._transcript.new_socket()
        self._resumer.new_socket()

    def _shut_down(self, error: ClientError) -> None:
        self._transcript.end_all(error)
        self._correlator.fail_all(error)

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
    def messages(self) -> list[UIMessage]:
        """The local transcript, oldest first. Replaced (never mutated in place) on every
        change."""
        return self._transcript.messages

    @messages.setter
    def messages(self, messages: list[UIMessage]) -> None:
        self._transcript.set_messages(messages)

    @property
    def connected(self) -> bool:
        """Whether a socket is open right now (False while reconnecting and after `close`)."""
        return self._connection.connected

    @property
    def websocket(self) -> ClientConnection | None:
        """The current socket, for diagnostics and tests; None while reconnecting."""
        return self._connection.websocket

    @property
    def replies(self) -> list[Reply]:
        """The replies that have not ended yet, own and observed, oldest first."""
        return [control.reply for control in self._transcript.replies]

    @property
    def branch(self) -> str:
        """The branch this client views: `"main"` or the branch's id (a string of digits).

        It changes with `switch_branch`, and when the server moves the client (the viewed
        branch was deleted). Until a branch named at connect time is looked up, it is that
        name.
        """
        return self._transcript.branch

    async def close(self) -> None:
        """Close the socket and the HTTP client. Replies still running end with an error."""
        await self._connection.close()


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
