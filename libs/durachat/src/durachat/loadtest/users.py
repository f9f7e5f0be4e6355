"""The simulated users: one Locust user class per behaviour, mixable with weights.

* `chat` (`ChatUser`): a new conversation of `--durachat-messages` messages, each reply
  streamed to its end, thinking between them.
* `long` (`LongReplyUser`): one long reply (`--durachat-long-prompt`: `slow` for the demo
  agent, any prompt for a real model).
* `resume` (`ResumeUser`): a long reply; the connection drops mid-stream, reconnects with the
  same `_pk` and ACKs the offered stream; every chunk must arrive exactly once.
* `tools` (`ToolUser`): a server tool call, an approval, a client tool's answer (each answer
  followed by its continuation).
* `branches` (`BranchUser`): a message, a regenerate, an edit of the first message.
* `idle` (`IdleTabUser`): a connected tab that sends nothing for `--durachat-idle-hold` s.
* `tabs` (`SecondTabUser`): two tabs on one conversation; the second must receive every chunk
  of the first's replies.

Only the core frames of the agents chat protocol are used (docs/protocol.md); `tools` and
`branches` need an agent with such tools and a server that forks or replaces on a regenerate.
Importing this module adds the `--durachat-*` options and the metric hooks to Locust.
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import ClassVar

import gevent
from locust import between, events, task

from durachat.loadtest.base import ChatSocketUser
from durachat.loadtest.frames import (
    new_connection_id,
    prompt,
    resume_ack,
    resume_request,
    tool_approval,
    tool_result,
    user_message,
)
from durachat.loadtest.metrics import TabRecorder, install
from durachat.loadtest.stream import ReplyStream
from durachat.loadtest.tab import ChatSocket
from durachat.types import JSONDict, UIMessage

install(events)


class ChatUser(ChatSocketUser):
    """Chats: a conversation of several messages, each reply streamed to its end."""

    @task
    def conversation(self) -> None:
        """One conversation on a tab of its own."""
        tab = self.connect(self.new_conversation("chat"))
        try:
            history: list[UIMessage] = []
            for index in range(self.settings.messages):
                if index:
                    self.pause()
                history.append(user_message(prompt(self.settings.words, random.randrange(99))))
                stream = self.turn(tab, history, "chat")
                if stream is None:
                    return
                history.append(stream.message())
        finally:
            tab.close()


class LongReplyUser(ChatSocketUser):
    """Asks for long replies (the demo agent's `slow`: 50 chunks, 100 ms apart)."""

    @task
    def long_reply(self) -> None:
        """One long reply in a new conversation."""
        tab = self.connect(self.new_conversation("long"))
        try:
            self.turn(tab, [user_message(self.settings.long_prompt)], "long")
        finally:
            tab.close()


class ResumeUser(ChatSocketUser):
    """Loses its connection in the middle of a long reply and resumes it."""

    drop_after: ClassVar[tuple[int, int]] = (3, 10)
    """The drop comes after this many chunks (inclusive range)."""

    @task
    def resume(self) -> None:
        """Drop, reconnect with the same connection id, ACK the offered stream, check it."""
        name = self.new_conversation("resume")
        connection_id = new_connection_id()
        first = self.connect(name, connection_id)
        stream = self.request(first, [user_message(self.settings.long_prompt)])
        after = random.randint(*self.drop_after)
        first.wait_until(
            lambda: len(stream.accepted) >= after or stream.done or first.closed,
            self.settings.reply_timeout_s,
        )
        if stream.done or first.closed or len(stream.accepted) < after:
            # The reply was too short to drop in the middle, or failed before.
            first.close()
            self.record_turn(first, stream, "resume")
            self.recorder.count("resumes_not_tried")
            return
        first.drop()
        stream.dropped(time.perf_counter())
        gevent.sleep(random.uniform(*self.settings.reconnect_delay_s))
        reconnected = time.perf_counter()
        second = self.connect(name, connection_id)
        second.track(stream)
        try:
            self._resume(second, stream, reconnected)
        finally:
            second.close()

    def _resume(self, tab: ChatSocket, stream: ReplyStream, reconnected: float) -> None:
        request_id = stream.request_id
        timeout = self.settings.reply_timeout_s
        # A live stream is offered on connect, before the identity frame; otherwise ask (also
        # when a server sends no identity frame).
        tab.wait_until(
            lambda: request_id in tab.offers or tab.identity or tab.closed, min(timeout, 5.0)
        )
        if request_id not in tab.offers and not tab.closed:
            self.send(tab, resume_request())
            tab.wait_until(
                lambda: request_id in tab.offers or tab.resume_none > 0 or tab.closed, timeout
            )
        if request_id not in tab.offers:
            if tab.closed:
                self.record_turn(tab, stream, "resume")
                return
            # The reply ended while the tab was away: a client reloads the transcript.
            self.recorder.event("RESUME", "ended while away", _ms(reconnected))
            self.recorder.count("resumes_after_end")
            return
        stream.replay_started()
        self.send(tab, resume_ack(request_id))
        tab.wait_until(
            lambda: stream.replay_ended_at is not None or stream.done or tab.closed, timeout
        )
        end = stream.replay_ended_at or stream.done_at
        if end is not None:
            self.recorder.event("RESUME", "replay", (end - reconnected) * 1000)
        if self.finish(tab, stream, "resume"):
            self.recorder.count("resumes")


class ToolUser(ChatSocketUser):
    """Calls tools: a server tool, one that needs an approval, a client tool. The prompts
    are the demo agent's; set them on a subclass for another agent."""

    server_tool_prompt: ClassVar[str] = "tool:Paris"
    approval_prompt: ClassVar[str] = "approve:alice"
    client_tool_prompt: ClassVar[str] = "client-tool:"
    client_tool_output: ClassVar[JSONDict] = {"city": "Paris", "country": "FR"}

    @task
    def server_tool(self) -> None:
        """The server runs the tool within the reply."""
        tab = self.connect(self.new_conversation("tool"))
        try:
            stream = self.request(tab, [user_message(self.server_tool_prompt)])
            tab.wait_until(lambda: stream.done or tab.closed, self.settings.reply_timeout_s)
            if stream.done and not stream.failure() and not stream.tool_outputs():
                stream.problems.append("no_tool_output")
            self.record_turn(tab, stream, "tool")
        finally:
            tab.close()

    @task
    def approval(self) -> None:
        """The reply asks for an approval; the user approves and follows the continuation."""
        self._answered(self.approval_prompt, "approval", needs_approval=True)

    @task
    def client_tool(self) -> None:
        """The reply calls a client tool; the user answers and follows the continuation."""
        self._answered(self.client_tool_prompt, "client tool", needs_approval=False)

    def _answered(self, text: str, name: str, *, needs_approval: bool) -> None:
        tab = self.connect(self.new_conversation("tool"))
        try:
            stream = self.turn(tab, [user_message(text)], f"{name} request")
            if stream is None:
                return
            calls = [c for c in stream.pending_calls() if c.needs_approval == needs_approval]
            if not calls:
                self.recorder.event("TURN", name, 0.0, "no_tool_call")
                return
            call = calls[0]
            answer = (
                tool_approval(call.tool_call_id, True)
                if needs_approval
                else tool_result(call.tool_call_id, call.tool_name, self.client_tool_output)
            )
            self.follow_answer(tab, answer, name)
        finally:
            tab.close()


class BranchUser(ChatSocketUser):
    """Regenerates a reply and edits a message (a branching server answers both on new
    branches)."""

    @task
    def regenerate_and_edit(self) -> None:
        """A message, a regenerate of its reply, an edit of the message."""
        tab = self.connect(self.new_conversation("branch"))
        try:
            first = user_message(prompt(self.settings.words, random.randrange(99)))
            if self.turn(tab, [first], "chat") is None:
                return
            self.pause()
            if self.turn(tab, [first], "regenerate", trigger="regenerate-message") is None:
                return
            self.pause()
            edited = user_message(prompt(self.settings.words, random.randrange(99)), first["id"])
            self.turn(tab, [edited], "edit")
        finally:
            tab.close()


class IdleTabUser(ChatSocketUser):
    """An open tab that sends nothing: connections held, memory per connection."""

    wait_time = between(0, 1)

    @task
    def idle(self) -> None:
        """Stay connected for `--durachat-idle-hold` seconds."""
        tab = self.connect(self.new_conversation("idle"))
        started = time.perf_counter()
        try:
            hold = random.uniform(*self.settings.idle_hold_s)
            tab.wait_until(lambda: tab.closed, hold)
            failure = f"closed_{tab.close_code}" if tab.closed else None
            self.recorder.event("IDLE", "hold", _ms(started), failure)
        finally:
            tab.close()


class SecondTabUser(ChatSocketUser):
    """Two tabs on one conversation: the first chats, the second must receive every chunk of
    every reply, in the same order."""

    @task
    def two_tabs(self) -> None:
        """A conversation watched by a second tab."""
        name = self.new_conversation("tabs")
        first = self.connect(name)
        second: ChatSocket | None = None
        try:
            second = self.connect(name)
            self._chat(first, second)
        finally:
            first.close()
            if second is not None:
                second.close()

    def _chat(self, first: ChatSocket, second: ChatSocket) -> None:
        watcher = TabRecorder(self.environment)

        def adopt(request_id: str, frame: JSONDict) -> ReplyStream:
            return ReplyStream(request_id, time.perf_counter(), watcher)

        second.adopt = adopt
        history: list[UIMessage] = []
        for index in range(self.settings.messages):
            if index:
                self.pause()
            history.append(user_message(prompt(self.settings.words, random.randrange(99))))
            stream = self.turn(first, history, "chat")
            if stream is None:
                return
            history.append(stream.message())
            request_id = stream.request_id
            second.wait_until(
                partial(_done_or_closed, second, request_id), self.settings.reply_timeout_s
            )
            seen = second.streams.get(request_id)
            if seen is None:
                seen = ReplyStream(request_id, stream.sent_at, watcher)
            seen.sent_at = stream.sent_at
            if seen.done and not seen.failure() and seen.accepted != stream.accepted:
                seen.problems.append("tab_mismatch")
            if not self.record_turn(second, seen, "second tab"):
                return


def _done_or_closed(tab: ChatSocket, request_id: str) -> bool:
    stream = tab.streams.get(request_id)
    return tab.closed or (stream is not None and stream.done)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
