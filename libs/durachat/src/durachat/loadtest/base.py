"""The base of the simulated users: connecting a tab, sending a request, following its reply
and recording it (docs/load-testing.md#writing-your-own-users)."""

from __future__ import annotations

import logging
import random
import secrets
import time
from collections.abc import Sequence
from functools import partial
from typing import ClassVar

import websocket
from locust import User, between
from locust.exception import RescheduleTask

from durachat.loadtest.auth import TokenError, TokenSource
from durachat.loadtest.frames import chat_request, new_connection_id, socket_url
from durachat.loadtest.metrics import Recorder
from durachat.loadtest.settings import Settings
from durachat.loadtest.stream import Observer, ReplyStream
from durachat.loadtest.tab import ChatSocket
from durachat.types import JSONDict, UIMessage

log = logging.getLogger("durachat.loadtest")


class ChatSocketUser(User):
    """A user of a chat agent over the agents chat protocol. Subclasses add tasks.

    Class attributes a subclass (or a locustfile) may set: `agent` (default: the
    `--durachat-agent` option), `wait_time` (the think time between tasks and between the
    messages of a conversation; `--durachat-think` overrides it).
    """

    abstract = True
    wait_time = between(1, 3)
    agent: ClassVar[str | None] = None

    settings: Settings
    recorder: Recorder
    tokens: TokenSource

    def on_start(self) -> None:
        """Read the settings (sent by the master with each spawn message)."""
        self.settings = Settings.from_options(self.environment.parsed_options)
        self.recorder = Recorder(self.environment)
        self.tokens = TokenSource(
            self.host or "",
            self.settings.api_key,
            ttl_s=self.settings.token_ttl_s,
            timeout=self.settings.connect_timeout_s,
        )
        if self.settings.think_s is not None:
            self.wait_time = partial(random.uniform, *self.settings.think_s)  # type: ignore[method-assign]

    def pause(self) -> None:
        """Think (`wait_time`) in the middle of a task; the user may be stopped meanwhile."""
        self.wait()  # type: ignore[no-untyped-call]  # Locust's User.wait is not annotated

    @property
    def agent_name(self) -> str:
        """The agent this user talks to."""
        return self.agent or self.settings.agent

    def new_conversation(self, kind: str) -> str:
        """A fresh conversation name, recognisable as the load test's."""
        return f"load-{self.settings.run_id}-{kind}-{secrets.token_hex(5)}"

    def connect(self, name: str, connection_id: str | None = None) -> ChatSocket:
        """Open a tab on conversation `name` (with a token when an API key is set) and record
        the connection; a failure is recorded and ends the task (`RescheduleTask`)."""
        started = time.perf_counter()
        try:
            token = self.tokens.token(self.agent_name, name)
            if self.tokens.enabled:
                self.recorder.event("HTTP", "POST /v1/tokens", _ms(started))
        except TokenError as exc:
            self.recorder.event("HTTP", "POST /v1/tokens", _ms(started), exc.code)
            raise RescheduleTask() from exc
        url = socket_url(
            self.host or "",
            self.agent_name,
            name,
            connection_id=connection_id or new_connection_id(),
            token=token,
        )
        tab = ChatSocket(url, on_error=self.recorder.error)
        opened = time.perf_counter()
        try:
            tab.open(self.settings.connect_timeout_s)
        except websocket.WebSocketBadStatusException as exc:
            self.recorder.event("WS", "connect", _ms(opened), f"connect_{exc.status_code}")
            raise RescheduleTask() from exc
        except (websocket.WebSocketException, OSError) as exc:
            self.recorder.event("WS", "connect", _ms(opened), "connect_failed")
            raise RescheduleTask() from exc
        self.recorder.event("WS", "connect", _ms(opened))
        return tab

    def request(
        self,
        tab: ChatSocket,
        messages: Sequence[UIMessage],
        *,
        trigger: str = "submit-message",
        observer: Observer | None = None,
    ) -> ReplyStream:
        """Send a chat request with `messages` on `tab`; returns its stream, already tracked."""
        frame = chat_request(messages, trigger=trigger)
        stream = ReplyStream(str(frame["id"]), time.perf_counter(), observer or self.recorder)
        tab.track(stream)
        self.send(tab, frame)
        return stream

    def send(self, tab: ChatSocket, frame: JSONDict) -> None:
        """Send a frame; a closed socket is recorded and ends the task."""
        try:
            tab.send(frame)
        except (websocket.WebSocketException, OSError) as exc:
            self.recorder.error("send_failed")
            raise RescheduleTask() from exc

    def finish(self, tab: ChatSocket, stream: ReplyStream, name: str) -> bool:
        """Wait for `stream`'s terminal frame and record the turn as `TURN name`; returns
        whether it succeeded."""
        tab.wait_until(lambda: stream.done or tab.closed, self.settings.reply_timeout_s)
        return self.record_turn(tab, stream, name)

    def record_turn(self, tab: ChatSocket, stream: ReplyStream, name: str) -> bool:
        """Record a turn that ended (or did not) as `TURN name`; returns whether it succeeded."""
        end = stream.done_at if stream.done_at is not None else time.perf_counter()
        failure = stream.failure()
        if not stream.done:
            failure = f"closed_{tab.close_code}" if tab.closed else "timeout"
        self.recorder.event("TURN", name, (end - stream.sent_at) * 1000, failure)
        if failure is not None:
            # Enough to find the turn in the server's logs; the query (a token) stays out.
            log.warning(
                "%s failed: %s%s (%s, request %s)",
                name,
                failure,
                f" {stream.error_texts[0]!r}" if stream.error_texts else "",
                tab.url.split("?", 1)[0],
                stream.request_id,
            )
        if stream.done:
            self.recorder.count("turns")
        return failure is None

    def turn(
        self,
        tab: ChatSocket,
        messages: Sequence[UIMessage],
        name: str,
        *,
        trigger: str = "submit-message",
    ) -> ReplyStream | None:
        """Send a request and follow its reply to the end; returns the stream if it succeeded."""
        stream = self.request(tab, messages, trigger=trigger)
        return stream if self.finish(tab, stream, name) else None

    def follow_answer(self, tab: ChatSocket, answer: JSONDict, name: str) -> ReplyStream | None:
        """Send a tool answer and follow the continuation it starts (a reply under a request
        id of the server's) to its end, recorded as `TURN name`."""
        started = time.perf_counter()
        found: list[ReplyStream] = []

        def adopt(request_id: str, frame: JSONDict) -> ReplyStream | None:
            if found:
                return None
            found.append(ReplyStream(request_id, started, self.recorder, continuation=True))
            return found[0]

        tab.adopt = adopt
        try:
            self.send(tab, answer)
            tab.wait_until(
                lambda: (bool(found) and found[0].done) or tab.closed,
                self.settings.reply_timeout_s,
            )
        finally:
            tab.adopt = None
        if not found:
            failure = f"closed_{tab.close_code}" if tab.closed else "no_continuation"
            self.recorder.event("TURN", name, _ms(started), failure)
            return None
        return found[0] if self.record_turn(tab, found[0], name) else None


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
