"""The local transcript of the viewed branch and the replies streaming into it; user message
ids, and the transcript an edit sends."""

from __future__ import annotations

import logging
import secrets
import string
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from durachat.client.errors import ClientError
from durachat.client.reply import Reply, new_reply
from durachat.client.reply_control import ReplyControl
from durachat.types import UIMessage

log = logging.getLogger(__name__)

_ID_ALPHABET: Final = string.ascii_letters + string.digits
_RECENT_REPLIES: Final = 512
"""How many ended replies are remembered, so that their late frames start no new reply."""

ReplyHook = Callable[[Reply], object]
"""Called with every reply the client did not start itself (observed or offered for resume)."""


def new_message_id() -> str:
    """Allocate a user message id the way the AI SDK's `generateId()` does.

    Returns:
        16 random characters from `A-Za-z0-9`.
    """
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


def edit_transcript(
    messages: Sequence[UIMessage], message_id: str, text: str
) -> tuple[list[UIMessage], frozenset[str]]:
    """The transcript an edit sends, like the AI SDK's `sendMessage({text, messageId})`.

    Args:
        messages: The transcript, oldest first.
        message_id: The id of the user message to edit (the one nearest the end, if the id
            occurs twice).
        text: The message's new text.

    Returns:
        The messages before it, then the edited message (same id, one text part); and the ids
        of the messages the edit drops (those after it).

    Raises:
        ClientError: `unknown_message` if the transcript has no message `message_id`;
            `not_a_user_message` if that message is not a user message.
    """
    index = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("id") == message_id),
        None,
    )
    if index is None:
        raise ClientError("unknown_message", f"the transcript has no message {message_id!r}")
    role = messages[index].get("role")
    if role != "user":
        raise ClientError(
            "not_a_user_message", f"the message {message_id!r} is not a user message ({role})"
        )
    edited: UIMessage = {
        "id": message_id,
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }
    dropped = frozenset(str(m.get("id")) for m in messages[index + 1 :] if m.get("id") is not None)
    return [*messages[:index], edited], dropped


class Transcript:
    """The local transcript of the viewed branch, and the replies streaming into it.

    The transcript follows the server: the client's own user messages, the assistant message of
    every reply streaming on the viewed branch (own or observed), the transcripts the server
    sends (which replace it but keep the replies still streaming), `cf_agent_message_updated`,
    clears. The replies that have not ended are kept by request id; the ids of ended ones are
    remembered for a while, so that late frames of an ended reply start no new one.

    Attributes:
        messages: The transcript, oldest first. Replaced (never mutated in place) on every
            change.
        branch: The viewed branch: `"main"` or a branch id (until a branch named at connect
            time is looked up, that name).
        version: Counts the changes that make a transcript read in flight stale: the server's
            transcripts and the view's changes.
    """

    def __init__(
        self,
        name: str,
        branch: str,
        *,
        canceller: Callable[[str], Awaitable[object]],
        on_reply: ReplyHook | None = None,
    ) -> None:
        """Start empty.

        Args:
            name: The chat's name, for the logs.
            branch: The branch viewed first.
            canceller: Cancels a request (every reply's `cancel`).
            on_reply: Called with every reply observed (`observe`).
        """
        self.messages: list[UIMessage] = []
        self.branch = branch
        self.version = 0
        self._name = name
        self._canceller = canceller
        self._on_reply = on_reply
        self._replies: dict[str, ReplyControl] = {}
        self._recent: deque[str] = deque(maxlen=_RECENT_REPLIES)

    # The replies

    @property
    def replies(self) -> list[ReplyControl]:
        """The replies that have not ended, own and observed, oldest first."""
        return list(self._replies.values())

    def get(self, request_id: str) -> ReplyControl | None:
        """The reply of a request, if it has not ended."""
        return self._replies.get(request_id)

    def ended_recently(self, request_id: str) -> bool:
        """Whether the reply of this request ended a short while ago."""
        return request_id in self._recent

    def add(self, reply: ReplyControl) -> None:
        """Keep a reply this client started."""
        self._replies[reply.request_id] = reply

    def discard(self, request_id: str) -> None:
        """Forget a reply whose request could not be sent."""
        self._replies.pop(request_id, None)

    def observe(self, request_id: str) -> ReplyControl:
        """Follow a reply this client did not start, on the viewed branch, and tell the
        `on_reply` hook."""
        reply = new_reply(request_id, observed=True, canceller=self._canceller, branch=self.branch)
        self._replies[request_id] = reply
        if self._on_reply is not None:
            try:
                self._on_reply(reply.reply)
            except Exception:
                log.exception("chat %s: on_reply hook failed", self._name)
        return reply

    def retire(self, reply: ReplyControl) -> None:
        """Forget a reply that ended (remembering its request id)."""
        if self._replies.get(reply.request_id) is reply:
            del self._replies[reply.request_id]
            self._recent.append(reply.request_id)

    def end_all(self, error: ClientError) -> None:
        """End every reply with `error` (the client is closed or gave up reconnecting)."""
        for reply in list(self._replies.values()):
            reply.finish("error", error)
            self.retire(reply)

    def new_socket(self) -> None:
        """A new socket is open (see `ReplyControl.new_socket`)."""
        for reply in self._replies.values():
            reply.new_socket()

    # The messages

    def set_messages(self, messages: list[UIMessage]) -> None:
        """Change the transcript locally (a user message, an edit, a tool answer)."""
        self.messages = messages

    def replace(self, messages: list[UIMessage]) -> None:
        """Replace the transcript from the server, keeping replies still streaming."""
        self.version += 1
        self.messages = list(messages)
        for reply in self._replies.values():
            self.merge(reply)

    def clear(self) -> None:
        """Empty the transcript (a clear)."""
        # Replies running now belong to the cleared chat: they must not come back into it.
        for reply in self._replies.values():
            reply.detach()
        self.replace([])

    def merge(self, reply: ReplyControl) -> None:
        """Put a reply's assistant message, as assembled so far, into the transcript."""
        self.messages = reply.merge_into(self.messages)

    def last_assistant(self) -> UIMessage | None:
        """The last assistant message, which a continuation extends."""
        return next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)

    def update_message(self, message: object) -> None:
        """Apply `cf_agent_message_updated`: replace the message with the same id, else the one
        holding any of the same tool calls (keeping its id); never append
        (docs/protocol.md#server--client-frames)."""
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
        self.set_messages(messages)

    async def reload(self, fetch: Callable[[str], Awaitable[list[UIMessage]]]) -> list[UIMessage]:
        """Read the viewed branch's stored transcript and make it the transcript, unless a
        newer one arrived meanwhile (or the view changed).

        Args:
            fetch: Reads a branch's stored transcript.

        Returns:
            The stored transcript.
        """
        version = self.version
        branch = self.branch
        messages = await fetch(branch)
        if version == self.version and branch == self.branch:
            self.replace(messages)
        return messages

    # The view

    def view(self, branch: str) -> None:
        """View `branch` from now on. Replies running elsewhere end: their frames no longer
        reach this connection."""
        self.branch = branch
        # A transcript read in flight is of the branch left.
        self.version += 1
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
                self.retire(reply)

    def rename_view(self, branch: str) -> None:
        """The viewed branch is known as `branch` (a name looked up becomes an id), and so are
        the replies streaming on it."""
        for reply in self._replies.values():
            if reply.branch == self.branch:
                reply.branch = branch
        self.branch = branch


def _tool_call_ids(message: UIMessage) -> set[str]:
    parts = message.get("parts")
    return {
        part["toolCallId"]
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("toolCallId"), str)
    }
