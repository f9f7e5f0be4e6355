"""`ChatClient`'s chat methods: send, regenerate, edit, cancel, clear, resume, history."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from durachat.client.connection import Connection
from durachat.client.correlator import Correlator
from durachat.client.errors import ClientError
from durachat.client.reply import Reply, new_reply
from durachat.client.reply_control import ReplyControl
from durachat.client.resume import Resumer
from durachat.client.tool_answers import ToolAnswers
from durachat.client.transcript import Transcript, edit_transcript, new_message_id
from durachat.messages import new_request_id
from durachat.protocol import chat_clear_frame
from durachat.protocol.client_frames import chat_request_cancel_frame, chat_request_frame
from durachat.types import UIMessage


class MessageMethods:
    """`ChatClient`'s chat methods (the requests of `useAgentChat`)."""

    _connection: Connection
    _correlator: Correlator
    _transcript: Transcript
    _resumer: Resumer
    _tool_answers: ToolAnswers

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
        return await self._transcript.reload(self._connection.fetch_history)

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
        self._transcript.set_messages([*self._transcript.messages, user])
        control = await self._request("submit-message", user["id"], body)
        return control.reply

    async def regenerate(self, *, body: Mapping[str, Any] | None = None) -> Reply:
        """Ask for a new answer to the last user message.

        The local transcript is cut after the last user message (dropping the assistant answer)
        and sent with the trigger `regenerate-message`. durachat answers it on the branch the
        client views and keeps the old answer (and what followed it) on a new branch; a server
        that answers on a new branch instead moves this client there (`branch`).

        Args:
            body: Extra fields for the request body.

        Returns:
            The new reply, streaming.

        Raises:
            ClientError: `nothing_to_regenerate` if the transcript has no user message;
                `closed` if the client is closed.
        """
        messages = self._transcript.messages
        last_user = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"),
            None,
        )
        if last_user is None:
            raise ClientError("nothing_to_regenerate", "the transcript has no user message")
        dropped = frozenset(
            str(m.get("id")) for m in messages[last_user + 1 :] if m.get("id") is not None
        )
        self._transcript.set_messages(messages[: last_user + 1])
        user_id = messages[last_user].get("id")
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
        `text` as its only part), and is sent with the trigger `submit-message`. durachat
        answers it on the branch the client views and keeps the original message and what
        followed it on a new branch; a server that answers on a new branch instead moves this
        client there (`branch`).

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
        transcript, dropped = edit_transcript(self._transcript.messages, message_id, text)
        self._transcript.set_messages(transcript)
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
            running = self._transcript.replies
            if not running:
                return None
            request_id = running[-1].request_id
        self._correlator.note_sent(None)
        await self._connection.send(chat_request_cancel_frame(request_id))
        return request_id

    async def clear(self) -> None:
        """Clear the chat for everyone (`cf_agent_chat_clear`) and empty `messages`.

        Running replies end as the server stops them.
        """
        self._correlator.note_sent(None)
        await self._connection.send(chat_clear_frame())
        self._transcript.clear()

    async def resume(
        self, *, answer_timeout: float = 5.0, pending_timeout: float = 60.0
    ) -> Reply | None:
        """Pick up the chat's running reply, if there is one (the resume handshake, see
        docs/protocol.md#resume-handshake).

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
        control = await self._resumer.probe(
            answer_timeout=answer_timeout, pending_timeout=pending_timeout
        )
        return control.reply if control is not None else None

    async def _request(
        self,
        trigger: str,
        user_message_id: str | None,
        body: Mapping[str, Any] | None,
        *,
        stale_ids: frozenset[str] = frozenset(),
        may_fork: bool = False,
    ) -> ReplyControl:
        """Send a chat request with the local transcript; return its reply."""
        request_id = new_request_id()
        payload = {"messages": self._transcript.messages, "trigger": trigger, **(body or {})}
        frame = chat_request_frame(request_id, json.dumps(payload))
        reply = new_reply(
            request_id,
            observed=False,
            user_message_id=user_message_id,
            canceller=self.cancel,
            branch=self._transcript.branch,
        )
        reply.may_fork = may_fork
        reply.request_frame = frame
        reply.stale_ids = stale_ids
        # Registered before sending: the first chunk may arrive before `send` returns.
        self._transcript.add(reply)
        self._correlator.note_sent(reply)
        try:
            await self._connection.send(frame)
        except BaseException:
            self._transcript.discard(request_id)
            raise
        return self._tool_answers.follow(reply)
