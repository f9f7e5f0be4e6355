"""Resuming streams: the resume handshake (docs/protocol.md#resume-handshake), and after a
reconnect, picking up the running stream and settling the replies left open."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, Final

from websockets.asyncio.client import ClientConnection

from durachat.client.connection import Connection
from durachat.client.correlator import Answer, Correlator
from durachat.client.errors import ClientError
from durachat.client.reply_control import ReplyControl
from durachat.client.transcript import Transcript
from durachat.messages import new_request_id
from durachat.protocol.client_frames import (
    stream_resume_ack_frame,
    stream_resume_request_frame,
)
from durachat.types import JSONDict, UIMessage

log = logging.getLogger(__name__)

_TURN_WAIT: Final = 60.0
"""How long a reply the server had not answered at a reconnect waits for its turn."""


class Resumer:
    """The resume side of a chat: probes (`cf_agent_stream_resume_request`), the streams the
    server offers (`cf_agent_stream_resuming`) and the ACKs that replay them, and recovery
    after a reconnect.

    Every `resuming` holds the socket's live frames back until the client ACKs, and every ACK
    replays the whole stream, so a stream is acknowledged once per offer: the ACK positions
    (frames sent on the socket) tell whether an ACK already followed what prompted an offer.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: Connection,
        correlator: Correlator,
        transcript: Transcript,
    ) -> None:
        """Resume on `connection`, for the replies of `transcript`.

        Args:
            name: The chat's name, for the logs.
            connection: The socket.
            correlator: Where probes wait for their answers.
            transcript: The transcript and its replies.
        """
        self._name = name
        self._connection = connection
        self._correlator = correlator
        self._transcript = transcript
        self._lock = asyncio.Lock()
        self._acked: dict[str, ReplyControl] = {}
        self._ack_at: dict[str, int] = {}
        self._probe_sent: dict[str, int] = {}
        self._offered: ReplyControl | None = None

    def new_socket(self) -> None:
        """A new socket is open: nothing is acknowledged or offered on it yet."""
        self._acked = {}
        self._ack_at = {}
        self._probe_sent = {}
        self._offered = None

    async def probe(
        self,
        before: Mapping[str, Any] | None = None,
        *,
        answer_timeout: float = 5.0,
        pending_timeout: float | None = 60.0,
    ) -> ReplyControl | None:
        """Send `before` (if any), then a resume probe, and return the stream it finds.

        Server errors after `before` was sent are its errors (the probe is the operation they
        belong to); they are raised.

        Args:
            before: A frame to send first (a tool answer, to learn when the server handled it).
            answer_timeout: How long to wait for the server's answer, in seconds.
            pending_timeout: How long to wait after `cf_agent_stream_pending`, refreshed by
                every such frame; None not to wait for a pending turn.

        Returns:
            The running reply; else the reply the server offered unprompted, if any; else
            None (also when the server did not answer in time, or a turn is pending and
            `pending_timeout` is None).

        Raises:
            ClientError: the server's error, or `disconnected` if the socket dropped.
        """
        async with self._lock:
            key = new_request_id()
            with self._correlator.waiting("probe", key) as probe:
                if before is not None:
                    await self._connection.send(before)
                await self._connection.send(
                    stream_resume_request_frame(key),
                    stamp=partial(self._probe_sent.__setitem__, key),
                )
                wait = answer_timeout
                while True:
                    try:
                        async with asyncio.timeout(wait):
                            answer = await probe.next()
                    except TimeoutError:
                        return self._take_offered()
                    if answer.kind == "pending":
                        if pending_timeout is None:
                            return None
                        wait = pending_timeout
                    elif answer.kind == "resuming":
                        self._offered = None
                        return answer.reply
                    else:
                        return self._take_offered()

    async def on_resuming(self, ws: ClientConnection, frame: JSONDict) -> None:
        """`cf_agent_stream_resuming`: acknowledge the stream unless an ACK already followed
        what prompted the offer, and tell the probes."""
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
            prompted_at = self._connection.sends + 1
        reply = self._acked.get(request_id)
        acked_at = self._ack_at.get(request_id)
        if reply is None or acked_at is None or acked_at < prompted_at:
            reply = (
                reply or self._transcript.get(request_id) or self._transcript.observe(request_id)
            )
            if probe_id is None:
                self._offered = reply
            await self.ack(ws, reply)
        self._answer_probes(frame, Answer("resuming", reply=reply))

    def on_none(self, frame: JSONDict) -> None:
        """`cf_agent_stream_resume_none`: nothing streams."""
        self._answer_probes(frame, Answer("none"))

    def on_pending(self, frame: JSONDict) -> None:
        """`cf_agent_stream_pending`: a turn is accepted and not streaming yet."""
        probe = self._correlator.find(str(frame.get("probeId")), "probe")
        if probe is not None:
            probe.answer(Answer("pending"))

    async def ack(self, ws: ClientConnection, reply: ReplyControl) -> None:
        """Acknowledge a stream on this socket: the server replays it, then goes on live."""
        reply.begin_replay()
        self._acked[reply.request_id] = reply
        await self._connection.send_on(
            ws,
            stream_resume_ack_frame(reply.request_id),
            stamp=partial(self._ack_at.__setitem__, reply.request_id),
        )

    def keep_offered_on(self, branch: str) -> None:
        """The client views `branch` now: a stream offered on another branch is no longer."""
        if self._offered is not None and self._offered.branch != branch:
            self._offered = None

    def rename_offered(self, old: str, new: str) -> None:
        """The viewed branch `old` is known as `new` now, and so is a stream offered on it."""
        if self._offered is not None and self._offered.branch == old:
            self._offered.branch = new

    async def recover(self) -> None:
        """After a reconnect: resume the running stream, then settle replies left open."""
        try:
            followed: set[str] = set()
            while True:
                reply = await self.probe()
                if reply is None or reply.request_id in followed:
                    break
                followed.add(reply.request_id)
                if not any(r is not reply for r in self._transcript.replies):
                    return
                # Other replies are queued behind this one or ended while we were away.
                await reply.reply.wait()
            for straggler in self._transcript.replies:
                if straggler.request_id in self._acked:
                    continue
                # The server replays a stream it still buffers; otherwise it answers with a
                # bare `done` and the transcript tells how the reply ended.
                straggler.begin_replay(recovering=True)
                self._acked[straggler.request_id] = straggler
                await self._connection.send(
                    stream_resume_ack_frame(straggler.request_id),
                    stamp=partial(self._ack_at.__setitem__, straggler.request_id),
                )
        except ClientError as exc:
            log.info("chat %s: recovery stopped: %s", self._name, exc)
        except Exception:
            log.exception("chat %s: recovery failed", self._name)

    async def settle(self, reply: ReplyControl, *, final: bool = False) -> None:
        """End a reply whose stream the server no longer had after a reconnect, from the
        stored transcript."""
        transcript = self._transcript
        version = transcript.version
        try:
            messages = await self._connection.fetch_history(reply.branch)
        except ClientError as exc:
            reply.finish("error", ClientError("lost", f"the reply was lost: {exc.message}"))
            transcript.retire(reply)
            return
        answer = _answer_to(messages, reply)
        if answer is None and not final and reply.request_frame is not None:
            # Not answered yet. The server may not have had the request when it said it was
            # idle (it was still on its way), or may never have got it. Wait for the turn's
            # frames, which now come live; resend a request that never arrived (the server
            # knows a request by its id, so a copy still in flight is not run twice).
            reply.recovering = False
            stored = {m.get("id") for m in messages}
            if reply.reply.user_message_id not in stored or reply.stale_ids & stored:
                await self._connection.send(reply.request_frame)
            self._connection.spawn(self._await_turn(reply))
            return
        if answer is not None:
            reply.adopt(answer)
        else:
            reply.finish(
                "error", ClientError("lost", "the connection dropped and the reply was lost")
            )
        transcript.retire(reply)
        # Retired first, so the stored transcript wins over the reply's partial message.
        if version == transcript.version and reply.branch == transcript.branch:
            transcript.replace(messages)

    async def _await_turn(self, reply: ReplyControl) -> None:
        try:
            async with asyncio.timeout(_TURN_WAIT):
                await reply.reply.wait()
        except TimeoutError:
            await self.settle(reply, final=True)

    def _answer_probes(self, frame: JSONDict, answer: Answer) -> None:
        probe_id = frame.get("probeId")
        if isinstance(probe_id, str):
            probe = self._correlator.find(probe_id, "probe")
            if probe is not None:
                probe.answer(answer)
            return
        # Unprompted (on connect, or releasing a parked connection): news for every waiter.
        for probe in self._correlator.of_kind("probe"):
            probe.answer(answer)

    def _take_offered(self) -> ReplyControl | None:
        reply, self._offered = self._offered, None
        return reply


def _answer_to(messages: list[UIMessage], control: ReplyControl) -> UIMessage | None:
    """The stored message that answers a reply's request, if the server stored one."""
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
