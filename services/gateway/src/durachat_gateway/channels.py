"""Conversations watched by this gateway's clients: fan-out and the resume handshake.

A channel mirrors one conversation's stream state from its event log and delivers every entry to
its local connections, honouring targeting and the handshake: a connection offered a stream is
excluded from broadcasts until it ACKs; its replay is read from the log and spliced with live
entries by entry id, so it gets every chunk exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import overload

from durachat.protocol import MAIN_BRANCH
from durachat.protocol.server_frames import (
    branch_switched_frame,
    chat_recovering_frame,
    gave_up_frame,
    replay_end_frame,
    stream_pending_frame,
    stream_resume_none_frame,
    stream_resuming_frame,
)
from durachat_gateway.connection import ClientConnection
from durachat_gateway.telemetry import (
    REPLAYS_ACK,
    REPLAYS_CURSOR,
    DeliveryTracker,
    observe_delivery,
    tracing_enabled,
)
from durachat_infra.eventlog import (
    EVERY_BRANCH,
    Kind,
    LogEntry,
    LogReader,
    StreamState,
    branch_change,
    branch_of,
    entry_id_key,
    is_for,
)
from durachat_infra.keys import ConversationKeys

log = logging.getLogger(__name__)

RECOVERING_FRESH_MS = 15 * 60 * 1000
"""How long a connecting client is told a turn is being recovered (the reference's 15 min)."""


class Channel:
    """One conversation on this gateway."""

    def __init__(self, keys: ConversationKeys, reader: LogReader) -> None:
        self.keys = keys
        self._reader = reader
        self.states: dict[str, StreamState] = {}
        """The stream state of each branch (connections view one branch each)."""
        self.connections: dict[str, ClientConnection] = {}
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._delivered: tuple[int, int] = (0, 0)
        self._progress = asyncio.Event()
        self._spans = DeliveryTracker() if tracing_enabled() else None
        """Delivery spans of traced streams; None when this gateway does not trace."""

    async def catch_up(self, timeout: float = 1.0) -> None:
        """Wait until every entry already in the log has been delivered here."""
        target = entry_id_key(await self._reader.last_id(self.keys))
        deadline = asyncio.get_running_loop().time() + timeout
        while self._delivered < target:
            self._progress.clear()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)

    async def open(self) -> None:
        """Read the current state and start following the log right after it."""
        self.states, last_id = await self._reader.snapshot(self.keys)
        self._delivered = entry_id_key(last_id)
        self._reader.follow(self.keys, last_id, self.deliver)

    def close(self) -> None:
        """Stop following."""
        self._reader.unfollow(self.keys)

    def state_of(self, branch: str) -> StreamState:
        """The stream state of a branch."""
        state = self.states.get(branch)
        if state is None:
            state = self.states[branch] = StreamState()
        return state

    def deliver(self, entries: list[LogEntry]) -> None:
        """Fan entries out to the local connections, in order: each connection gets what its
        branch's turns send, and what concerns every branch."""
        spans = self._spans
        # The delivery latency of the oldest entry sent, once per batch: entries read together
        # are delivered together, and one observation costs as much as the rest of a chunk's
        # fan-out on a quiet channel.
        first_sent: str | None = None
        for entry in entries:
            branch = branch_of(entry.branch)
            if spans is not None and spans.tracks(entry):
                self._track(spans, entry)
            if entry.kind is not Kind.CONTROL:
                sent = False
                for conn in list(self.connections.values()):
                    if conn.replaying:
                        visible = is_for(entry.target, conn.id)
                    else:
                        visible = _visible(entry, conn)
                        # Offered a stream and not ACKed yet: only a move to another branch.
                        if conn.pending_resume is not None and entry.kind is not Kind.VIEW:
                            continue
                    if not visible:
                        continue
                    if conn.replayed is not None and _already_replayed(conn, entry):
                        continue
                    if conn.replaying:
                        # Its branch is checked when the replay ends: a view entry held back
                        # with it may move the connection first.
                        conn.buffer.append(entry)
                    else:
                        self._send(conn, entry)
                        sent = True
                if sent and first_sent is None:
                    first_sent = entry.id
            # State changes apply after delivery: a connection released by the end of a stream
            # does not get that stream's terminal frame without its chunks.
            change = entry.state_change()
            if change is not None:
                # An entry for every branch (a clear of the whole conversation) changes main's.
                owner = MAIN_BRANCH if branch == EVERY_BRANCH else branch
                state = self.state_of(owner)
                before = state.status
                state.apply(branch_change(owner, change), entry.id)
                self._on_state(owner, before)
        if entries:
            self._delivered = entry_id_key(entries[-1].id)
            self._progress.set()
        if first_sent is not None:
            observe_delivery(first_sent, time.time())

    def _track(self, spans: DeliveryTracker, entry: LogEntry) -> None:
        if entry.kind is Kind.CONTROL:
            spans.control(entry)
        elif spans:
            spans.terminal(entry, len(self.connections))

    def _send(self, conn: ClientConnection, entry: LogEntry) -> None:
        """Deliver an entry meant for `conn`: its frame, or the move a view entry makes (to the
        branch its request was forked to, or away from a branch that was deleted)."""
        if entry.kind is not Kind.VIEW:
            conn.send_entry(entry)
            return
        view = entry.control()
        self.view(conn, str(view["branch"]), reason=str(view.get("reason", "")))

    def view(self, conn: ClientConnection, branch: str, *, reason: str) -> None:
        """Make `conn` view `branch` from now on, and tell it (`durachat_branch_switched`)."""
        conn.branch = branch
        conn.parked = None
        conn.pending_resume = None
        conn.send_json(branch_switched_frame(branch, reason))

    def _on_state(self, branch: str, before: str) -> None:
        state = self.state_of(branch)
        viewers = [c for c in self.connections.values() if c.branch == branch]
        if state.status == "streaming" and before != "streaming":
            for conn in viewers:
                if conn.parked is not None:
                    conn.parked = None
                    conn.pending_resume = state.request
                    conn.send_json(stream_resuming_frame(state.request))
        elif state.status in ("idle", "done"):
            for conn in viewers:
                if conn.parked is not None:
                    conn.parked = None
                    conn.send_json(stream_resume_none_frame())
                if not conn.replaying:
                    conn.pending_resume = None

    def greet(self, conn: ClientConnection) -> None:
        """Frames a new connection gets first: the stream it can resume, if any, else whether
        a turn is being recovered (on the branch the connection views)."""
        state = self.state_of(conn.branch)
        if state.status == "streaming":
            conn.pending_resume = state.request
            conn.send_json(stream_resuming_frame(state.request))
        elif state.status == "pending":
            conn.parked = state.request
            conn.send_json(stream_pending_frame(state.request))
        elif state.recovering and time.time() * 1000 - state.recovering_at < (RECOVERING_FRESH_MS):
            conn.send_json(chat_recovering_frame(state.recovering, active=True))

    def resume_request(self, conn: ClientConnection, probe_id: str | None) -> None:
        """Answer `cf_agent_stream_resume_request`."""
        state = self.state_of(conn.branch)
        if state.status == "streaming":
            conn.pending_resume = state.request
            conn.send_json(stream_resuming_frame(state.request, probe_id))
        elif state.status == "pending":
            conn.parked = state.request
            conn.send_json(stream_pending_frame(state.request, probe_id))
        elif (gave_up := state.gave_up()) is not None:
            # A turn recovery gave up on: the client is offered it, to be told how it ended.
            conn.send_json(stream_resuming_frame(gave_up[0], probe_id))
        else:
            conn.send_json(stream_resume_none_frame(idle=True, probe_id=probe_id))

    async def resume_ack(self, conn: ClientConnection, request_id: str) -> None:
        """Answer `cf_agent_stream_resume_ack`: replay the stream, then go live."""
        conn.pending_resume = None
        state = self.state_of(conn.branch)
        gave_up = state.gave_up()
        if state.status != "streaming" and gave_up is not None and gave_up[0] == request_id:
            await self._replay_terminal(conn, request_id, gave_up[1])
            return
        if (
            state.request != request_id
            or state.status not in ("streaming", "done")
            or not state.start
        ):
            # Nothing to replay: an empty replay that ends the request.
            conn.send_json(replay_end_frame(request_id, live=False, continuation=False))
            return
        REPLAYS_ACK.inc()
        entries = await self._replay_read(conn, state.start)
        last = entry_id_key(entries[-1].id) if entries else entry_id_key(state.start)
        ended = False
        transcript: LogEntry | None = None
        for entry in entries:
            if entry.kind is Kind.TRANSCRIPT:
                if _visible(entry, conn):
                    transcript = entry
                continue
            # Other frames and views carry no request id, so only this request's entries pass.
            if entry.request != request_id or not _visible(entry, conn):
                continue
            if entry.kind is Kind.CHUNK:
                conn.send_entry(entry, replay=True)
                if conn.filling:
                    await conn.room()
            elif entry.kind is Kind.TERMINAL:
                ended = True
        conn.send_json(
            replay_end_frame(request_id, live=not ended, continuation=state.continuation)
        )
        if ended and transcript is not None:
            # The stream ended while this connection waited to ACK, so it missed the
            # transcript sent at the end; it gets the latest one now.
            conn.send_entry(transcript)
        self._go_live(conn, request_id, last)

    async def resume_from(self, conn: ClientConnection, cursor: str) -> bool:
        """Send `conn` every entry after `cursor` meant for it, then go live: a client that
        kept the cursor of the last frame it got misses nothing and gets nothing twice, even
        when the turn moved to another shard meanwhile. False (nothing sent) if the log no
        longer reaches back to `cursor`: the client must reload the transcript."""
        entries = await self._replay_read(conn, "(" + cursor, reaching=cursor)
        if entries is None:
            return False
        REPLAYS_CURSOR.inc()
        last = entry_id_key(entries[-1].id) if entries else entry_id_key(cursor)
        for entry in entries:
            if entry.kind is not Kind.CONTROL and _visible(entry, conn):
                self._send(conn, entry)
                if conn.filling:
                    # Paced by the client (docs/operations.md#buffers).
                    await conn.room()
        self._go_live(conn, None, last)
        return True

    async def _replay_terminal(self, conn: ClientConnection, request_id: str, text: str) -> None:
        """Replay a turn that recovery gave up on: what it streamed, then its terminal error."""
        entries = await self._replay_read(conn, self.state_of(conn.branch).start or "-")
        last = entry_id_key(entries[-1].id) if entries else (0, 0)
        for entry in entries:
            if entry.request == request_id and entry.kind is Kind.CHUNK and _visible(entry, conn):
                conn.send_entry(entry, replay=True)
                if conn.filling:
                    await conn.room()
        conn.send_json(gave_up_frame(request_id, text))
        self._go_live(conn, request_id, last)

    @overload
    async def _replay_read(self, conn: ClientConnection, start: str) -> list[LogEntry]: ...

    @overload
    async def _replay_read(
        self, conn: ClientConnection, start: str, *, reaching: str
    ) -> list[LogEntry] | None: ...

    async def _replay_read(
        self, conn: ClientConnection, start: str, *, reaching: str | None = None
    ) -> list[LogEntry] | None:
        """Start a replay for `conn`: live entries are held back from now on (until `_go_live`)
        while the log is read from `start`. With `reaching`, None (and no replay) if the log's
        oldest entry is newer than that id: entries after it may have been trimmed."""
        conn.replaying = True
        conn.buffer = []
        try:
            if reaching is not None:
                first = await self._reader.first_id(self.keys)
                if first is None or entry_id_key(first) > entry_id_key(reaching):
                    conn.replaying = False
                    conn.buffer = []
                    return None
            return await self._reader.read_range(self.keys, start)
        except Exception:
            conn.replaying = False
            conn.buffer = []
            raise

    def _go_live(
        self, conn: ClientConnection, request_id: str | None, last: tuple[int, int]
    ) -> None:
        """End a replay: send what arrived meanwhile that the replay did not cover (of the
        request `request_id`, or of any request after a cursor replay: None)."""
        conn.replayed = (request_id, last)
        for entry in conn.buffer:
            if _visible(entry, conn) and not _already_replayed(conn, entry):
                self._send(conn, entry)
        conn.buffer = []
        conn.replaying = False


def _visible(entry: LogEntry, conn: ClientConnection) -> bool:
    """Whether an entry is for `conn`: addressed to it, and of the branch it views."""
    branch = branch_of(entry.branch)
    return is_for(entry.target, conn.id) and branch in (conn.branch, EVERY_BRANCH)


def _already_replayed(conn: ClientConnection, entry: LogEntry) -> bool:
    """Whether `entry` went to `conn` in its last replay (so must not go again live)."""
    if conn.replayed is None:
        return False
    request_id, last = conn.replayed
    if request_id is not None and (
        entry.request != request_id or entry.kind not in (Kind.CHUNK, Kind.TERMINAL)
    ):
        return False
    if entry_id_key(entry.id) <= last:
        return True
    # Entries come in log order: past the replay's end, nothing more can repeat.
    conn.replayed = None
    return False


class Channels:
    """Every channel of this gateway, opened on first join and closed on last leave."""

    def __init__(self, reader: LogReader, key_prefix: str) -> None:
        self._reader = reader
        self._prefix = key_prefix
        self._channels: dict[str, Channel] = {}

    def __len__(self) -> int:
        return len(self._channels)

    async def join(self, tag: str, conn: ClientConnection) -> Channel:
        """Add `conn` to the channel of conversation `tag`."""
        channel = self._channels.get(tag)
        if channel is None:
            channel = Channel(ConversationKeys(self._prefix, tag), self._reader)
            self._channels[tag] = channel
            try:
                await channel.open()
            except BaseException as exc:
                del self._channels[tag]
                channel.ready.set_exception(exc)
                channel.ready.exception()
                raise
            channel.ready.set_result(None)
        else:
            await asyncio.shield(channel.ready)
        channel.connections[conn.id] = conn
        return channel

    def leave(self, tag: str, conn: ClientConnection) -> None:
        """Remove `conn`; the channel closes when its last connection leaves."""
        channel = self._channels.get(tag)
        if channel is None:
            return
        if channel.connections.get(conn.id) is conn:
            del channel.connections[conn.id]
        if not channel.connections:
            channel.close()
            del self._channels[tag]
