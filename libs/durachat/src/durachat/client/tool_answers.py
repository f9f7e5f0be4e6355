"""Answering tool calls: the results and approvals the client sends, the continuation each
answer starts, and the `on_tool_call` hook (docs/client.md#tools-and-approvals)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from durachat.client.connection import Connection
from durachat.client.errors import ClientError
from durachat.client.reply import Reply
from durachat.client.reply_control import ReplyControl
from durachat.client.resume import Resumer
from durachat.client.tools import (
    ToolCall,
    ToolCallHook,
    find_tool_call,
    pending_tool_calls,
    replace_part,
    will_continue,
)
from durachat.client.transcript import Transcript
from durachat.protocol.client_frames import (
    tool_approval_frame,
    tool_result_frame,
)
from durachat.tools import apply_tool_approval, apply_tool_result
from durachat.types import JSONDict

log = logging.getLogger(__name__)

_FOLLOW_TURNS: Final = 8
"""How many other turns a tool answer waits behind for its continuation to start."""


@dataclass(frozen=True, slots=True)
class _Failed:
    """What an `on_tool_call` hook raised: sent as the call's error."""

    text: str


class ToolAnswers:
    """Sends tool answers (`cf_agent_tool_result`, `cf_agent_tool_approval`, see
    docs/protocol.md#client--server-frames), applies them to the local transcript as the hook
    does, and finds the continuation each one starts. With an `on_tool_call` hook, it answers
    the client tool calls a reply of this client ends with (`follow`)."""

    def __init__(
        self,
        name: str,
        *,
        connection: Connection,
        transcript: Transcript,
        resumer: Resumer,
        on_tool_call: ToolCallHook | None = None,
    ) -> None:
        """Answer on `connection`, in `transcript`.

        Args:
            name: The chat's name, for the logs.
            connection: Runs the hook's tasks.
            transcript: The transcript holding the calls.
            resumer: Sends the answers, each followed by a probe that finds its continuation.
            on_tool_call: Answers client tool calls.
        """
        self._name = name
        self._connection = connection
        self._transcript = transcript
        self._resumer = resumer
        self._on_tool_call = on_tool_call
        self._continuations = 0
        self._last_continuation: ReplyControl | None = None

    def pending(self) -> list[ToolCall]:
        """The tool calls of the transcript that wait for this client."""
        return pending_tool_calls(self._transcript.messages)

    async def output(
        self,
        tool_call_id: str,
        output: Any,
        *,
        tool_name: str | None = None,
        auto_continue: bool = True,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> ReplyControl | None:
        """Answer a client tool call with its output; see `ChatClient.add_tool_output`."""
        frame = tool_result_frame(
            tool_call_id,
            output,
            tool_name=self._tool_name(tool_call_id, tool_name),
            client_tools=[dict(t) for t in client_tools or ()],
            auto_continue=auto_continue,
        )
        expected = self._apply_locally(
            tool_call_id, lambda part: apply_tool_result(part, output=output)
        )
        return await self._answer(frame, expected=auto_continue and expected)

    async def error(
        self,
        tool_call_id: str,
        error_text: str,
        *,
        tool_name: str | None = None,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report that a client tool failed; see `ChatClient.add_tool_error`."""
        frame = tool_result_frame(
            tool_call_id,
            None,
            tool_name=self._tool_name(tool_call_id, tool_name),
            client_tools=[dict(t) for t in client_tools or ()],
            error_text=error_text,
            auto_continue=False,
        )
        self._apply_locally(
            tool_call_id,
            lambda part: apply_tool_result(part, state="output-error", error_text=error_text),
        )
        await self._answer(frame, expected=False)

    async def approval(
        self, tool_call_id: str, approved: bool, *, auto_continue: bool = True
    ) -> ReplyControl | None:
        """Answer an approval request; see `ChatClient.approve_tool`."""
        frame = tool_approval_frame(tool_call_id, approved, auto_continue=auto_continue)
        expected = self._apply_locally(
            tool_call_id, lambda part: apply_tool_approval(part, approved)
        )
        return await self._answer(frame, expected=auto_continue and expected)

    def follow(self, reply: ReplyControl) -> ReplyControl:
        """Have the `on_tool_call` hook answer the client tool calls `reply` ends with (if
        there is a hook); `Reply.final` then follows the continuation.

        Returns:
            `reply`.
        """
        if self._on_tool_call is not None and reply.follow is None:
            reply.follow = asyncio.get_running_loop().create_future()
            self._connection.spawn(self._answer_tool_calls(reply, reply.follow))
        return reply

    def saw_continuation(self, reply: ReplyControl) -> None:
        """A reply turned out to be a continuation (its first `continuation` frame arrived)."""
        self._continuations += 1
        self._last_continuation = reply

    def _tool_name(self, tool_call_id: str, tool_name: str | None) -> str | None:
        """The tool name a result names: the one given, else the pending call's."""
        if tool_name is None:
            call = next((c for c in self.pending() if c.tool_call_id == tool_call_id), None)
            tool_name = call.tool_name if call is not None else None
        return tool_name

    def _apply_locally(
        self, tool_call_id: str, change: Callable[[JSONDict], JSONDict | None]
    ) -> bool:
        """Answer a call in the local transcript, as the hook does; return whether the server
        will continue after it (as far as the local transcript tells)."""
        messages = self._transcript.messages
        where = find_tool_call(messages, tool_call_id)
        if where is None:
            return True  # the server knows better
        index, part_index = where
        updated = change(messages[index]["parts"][part_index])
        if updated is not None:
            self._transcript.set_messages(replace_part(messages, where, updated))
        return will_continue(self._transcript.messages[index])

    async def _answer(self, frame: Mapping[str, Any], *, expected: bool) -> ReplyControl | None:
        """Send a tool answer and return the continuation it starts, if it starts one."""
        seen = self._continuations
        if not expected:
            # The probe still tells when the server has handled the answer, and its errors.
            await self._resumer.probe(frame, pending_timeout=None)
            return None
        reply = await self._resumer.probe(frame)
        for _ in range(_FOLLOW_TURNS):
            if reply is None:
                break
            await reply.started()
            if reply.reply.continuation:
                return self.follow(reply)
            # Another turn runs (or ran); the continuation is queued behind it.
            await reply.reply.wait()
            reply = await self._resumer.probe()
        if self._continuations > seen and self._last_continuation is not None:
            # It ran so fast that it had ended before the server answered the probe.
            return self.follow(self._last_continuation)
        return None

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
                for call in self.pending()
                if call.state == "input-available" and call.message_id == message_id
            ]
            answers = await asyncio.gather(*(_call_hook(hook, call) for call in calls))
            # Errors first: they never continue, so the last answer of a batch is an output,
            # whose continuation then runs with every result.
            ordered = sorted(
                zip(calls, answers, strict=True), key=lambda pair: not isinstance(pair[1], _Failed)
            )
            for call, answer in ordered:
                if isinstance(answer, _Failed):
                    await self.error(call.tool_call_id, answer.text, tool_name=call.tool_name)
                elif answer is not None:
                    answered = await self.output(
                        call.tool_call_id, answer, tool_name=call.tool_name
                    )
                    continuation = answered or continuation
        except ClientError as exc:
            log.warning("chat %s: could not answer a tool call: %s", self._name, exc)
        finally:
            if not follow.done():
                follow.set_result(continuation)


async def _call_hook(hook: ToolCallHook, call: ToolCall) -> Any:
    try:
        return await hook(call)
    except Exception as exc:
        log.info("on_tool_call failed for %s", call.tool_name, exc_info=True)
        return _Failed(str(exc) or type(exc).__name__)


class ToolMethods:
    """`ChatClient`'s tool methods: answering the tool calls that wait for the client."""

    _tool_answers: ToolAnswers

    def pending_tool_calls(self) -> list[ToolCall]:
        """Return the tool calls of the local transcript that wait for this client.

        Returns:
            The calls in `input-available` (client tools: answer with `add_tool_output` or
            `add_tool_error`) and `approval-requested` (answer with `approve_tool`), oldest
            first.
        """
        return self._tool_answers.pending()

    async def add_tool_output(
        self,
        tool_call_id: str,
        output: Any,
        *,
        tool_name: str | None = None,
        auto_continue: bool = True,
        client_tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Reply | None:
        """Answer a client tool call with its output (`cf_agent_tool_result`, see
        docs/protocol.md#client--server-frames).

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
        control = await self._tool_answers.output(
            tool_call_id,
            output,
            tool_name=tool_name,
            auto_continue=auto_continue,
            client_tools=client_tools,
        )
        return control.reply if control is not None else None

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
        await self._tool_answers.error(
            tool_call_id, error_text, tool_name=tool_name, client_tools=client_tools
        )

    async def approve_tool(
        self, tool_call_id: str, approved: bool, *, auto_continue: bool = True
    ) -> Reply | None:
        """Answer an approval request (`cf_agent_tool_approval`, see
        docs/protocol.md#client--server-frames).

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
        control = await self._tool_answers.approval(
            tool_call_id, approved, auto_continue=auto_continue
        )
        return control.reply if control is not None else None
