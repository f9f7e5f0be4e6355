"""One turn, run by `TurnRunner` against in-memory collaborators: the real write chain and
transcript over an in-memory database, a recording sink for frames, a scripted agent stream.

What is checked is what clients and the database end up with: chunk numbering, the order of
writes, and that the terminal frame only goes out once the reply is stored.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from durachat.agent import TurnResult
from durachat.messages import ReplyAssembler
from durachat.models import ModelError
from durachat.recovery import IncidentState
from durachat.types import JSONDict, UIMessage
from durachat_shard.actor.runner import GENERIC_ERROR, STORE_ERROR, TurnRunner
from durachat_shard.actor.state import ActorState, QueuedTurn
from durachat_shard.actor.writes import WriteChain
from durachat_shard.recovery import Incident, Recovered, Splice
from durachat_shard.requests import ChatRequest
from durachat_shard.transcript import Transcript
from support.actor_memory import (
    Fail,
    MemoryDatabase,
    MemoryTransaction,
    NoLedger,
    RecordingRecovery,
    RecordingSink,
    ScriptedAgent,
    Silence,
    Step,
    Wait,
)
from support.waiting import eventually

pytestmark = pytest.mark.timeout(10)

U1: UIMessage = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}

HELLO: list[Step] = [
    {"type": "start"},
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "Hel"},
    {"type": "text-delta", "id": "t", "delta": "lo"},
    {"type": "text-end", "id": "t"},
    {"type": "finish"},
]


def text(message: UIMessage) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p.get("type") == "text")


@dataclass(eq=False)
class Harness:
    """A runner over in-memory collaborators, and what they recorded."""

    agent: ScriptedAgent
    messages: list[UIMessage] = field(default_factory=lambda: [U1])
    db: MemoryDatabase = field(default_factory=MemoryDatabase)
    state: ActorState = field(default_factory=ActorState)
    recovery: RecordingRecovery = field(default_factory=RecordingRecovery)
    failures: list[BaseException] = field(default_factory=list)
    events: list[tuple[str, JSONDict]] = field(default_factory=list)
    synced: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.transcript = Transcript(list(enumerate(self.messages, start=100)))
        self.sink = RecordingSink(self.db)
        self.writes = WriteChain[MemoryTransaction](
            self.db.run_transaction, on_failure=self.failures.append
        )
        self.runner = TurnRunner(
            agent=self.agent,
            transcript=self.transcript,
            emit=self.sink,
            writes=self.writes,
            state=self.state,
            ledger=NoLedger(),
            recovery=self.recovery,
            sync_agent=lambda: self.synced.append([m["id"] for m in self.transcript.messages]),
            event=lambda kind, payload: self.events.append((kind, payload)),
        )

    def queued(self, request_id: str = "r1", **fields: Any) -> QueuedTurn:
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        accepted.set_result(None)
        request = ChatRequest(request_id, [U1], "submit-message", None, None)
        defaults: dict[str, Any] = {"anchor": "u1"}
        return QueuedTurn(
            request, "conn-1", self.state.generation, accepted=accepted, **(defaults | fields)
        )

    def start(self, queued: QueuedTurn | None = None) -> asyncio.Task[TurnResult | None]:
        return asyncio.create_task(self.runner.run(queued or self.queued()))

    async def chunks_sent(self, count: int) -> None:
        async def enough() -> bool:
            return len(self.sink.of("chunk")) >= count

        await eventually(enough, timeout=5)


async def test_chunks_are_numbered_in_order_and_the_reply_is_stored_before_the_terminal() -> None:
    h = Harness(ScriptedAgent(list(HELLO)))
    result = await h.start()
    assert result is not None and result.status == "completed"
    assert h.sink.kinds() == ["start", *["chunk"] * 6, "messages", "terminal"]
    assert [c["seq"] for c in h.sink.of("chunk")] == [0, 1, 2, 3, 4, 5]
    reply_id = h.sink.chunks()[0]["messageId"]
    assert result.message is not None and result.message["id"] == reply_id
    assert text(result.message) == "Hello"
    # One transaction: the reply at the end of the path, the leaf moved, the turn settled.
    assert h.db.kinds() == [["insert", "leaf", "turn"]]
    assert h.db.ops[-1] == ("turn", "r1", "completed", reply_id, None)
    # Nobody is told before the commit; the requester has the reply already.
    assert h.sink.of("messages") == [{"ids": ["u1", reply_id], "exclude": "conn-1", "commits": 1}]
    terminal = h.sink.of("terminal")[0]
    assert terminal["commits"] == 1
    assert terminal["outcome"] is None and terminal["message_ids"] == ["u1"]
    assert h.synced == [["u1", reply_id]]
    assert [kind for kind, _ in h.events] == [
        "chat:turn:started",
        "message:response",
        "chat:turn:finished",
    ]
    finished = h.events[-1][1]
    assert finished == {"requestId": "r1", "outcome": "completed", "messageId": reply_id}
    assert h.agent.turns[0].messages == [U1] and h.agent.closed


async def test_a_reply_always_opens_with_start() -> None:
    h = Harness(ScriptedAgent(list(HELLO[1:])))
    result = await h.start()
    chunks = h.sink.chunks()
    assert chunks[0]["type"] == "start"
    assert result is not None and result.message is not None
    assert chunks[0]["messageId"] == result.message["id"]
    assert [c["seq"] for c in h.sink.of("chunk")] == list(range(len(chunks)))
    assert [c["type"] for c in chunks[1:]] == [
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish",
    ]


async def test_a_reply_that_cannot_be_stored_ends_the_turn_with_an_error() -> None:
    h = Harness(ScriptedAgent(list(HELLO)))
    h.db.refuse.add("turn")
    result = await h.start()
    assert result is not None
    assert (result.status, result.message) == ("error", None)
    assert h.db.committed == []
    assert [op[0] for op in h.db.rolled_back[0]] == ["insert", "leaf"]
    # No transcript goes out (the reply is not stored); the error, then the terminal frame.
    assert h.sink.kinds()[-2:] == ["error", "terminal"]
    assert "messages" not in h.sink.kinds()
    assert h.sink.of("error")[0]["text"] == GENERIC_ERROR
    assert h.sink.of("terminal")[0]["outcome"] == "error"
    assert len(h.failures) == 1  # the chain reports it: the owner steps down


async def test_a_cancel_ends_the_turn_aborted_and_keeps_its_partial() -> None:
    forever = asyncio.Event()
    h = Harness(ScriptedAgent([*HELLO[:3], Wait(forever)]))
    running = h.start()
    await h.chunks_sent(3)
    assert h.state.abort_active() == "r1"
    result = await running
    assert result is not None and result.status == "aborted"
    assert result.message is not None and text(result.message) == "Hel"
    assert h.db.ops[-1][:3] == ("turn", "r1", "aborted")
    assert h.sink.of("terminal")[0]["outcome"] == "aborted"
    assert "error" not in h.sink.kinds()
    assert h.agent.closed


async def test_a_turn_stopped_by_a_failed_write_ends_as_an_error() -> None:
    forever = asyncio.Event()
    h = Harness(ScriptedAgent([*HELLO[:3], Wait(forever)]))
    running = h.start()
    await h.chunks_sent(3)
    # What the actor does when a queued write fails: it steps down, aborting the turn.
    h.state.write_failed = True
    h.state.abort_active()
    result = await running
    assert result is not None and (result.status, result.error) == ("error", STORE_ERROR)
    assert h.sink.of("error")[0]["text"] == STORE_ERROR
    assert h.sink.of("terminal")[0]["outcome"] == "error"


async def test_a_silent_stream_is_left_to_recovery() -> None:
    h = Harness(ScriptedAgent([*HELLO[:3], Silence()], stream_stall_timeout=0.05))
    result = await h.start()
    assert result is None
    assert h.sink.kinds() == ["start", "chunk", "chunk", "chunk"]
    assert h.db.committed == [] and h.db.rolled_back == []
    assert h.events[1:] == [("chat:stream:stalled", {"requestId": "r1", "timeoutMs": 50})]
    assert h.events[0][0] == "chat:turn:started"
    assert h.agent.closed


async def test_the_stall_deadline_restarts_at_every_chunk() -> None:
    """Gaps each shorter than the stall timeout, together longer than it: not a stall."""
    gates = [asyncio.Event() for _ in range(4)]
    steps: list[Step] = [HELLO[0], HELLO[1]]
    for gate in gates:
        steps += [Wait(gate), {"type": "text-delta", "id": "t", "delta": "x"}]
    h = Harness(ScriptedAgent([*steps, *HELLO[4:]], stream_stall_timeout=0.3))
    running = asyncio.ensure_future(h.start())
    for n, gate in enumerate(gates):
        await h.chunks_sent(2 + n)
        await asyncio.sleep(0.15)  # the gap under test, not synchronisation
        gate.set()
    result = await running
    assert result is not None and result.status == "completed"
    assert not any(kind == "chat:stream:stalled" for kind, _ in h.events)


async def test_an_agent_timing_out_on_its_own_is_an_error_not_a_stall() -> None:
    h = Harness(
        ScriptedAgent([*HELLO[:3], Fail(TimeoutError("a tool gave up"))], stream_stall_timeout=5)
    )
    result = await h.start()
    assert result is not None and result.status == "error"
    assert not any(kind == "chat:stream:stalled" for kind, _ in h.events)


async def test_a_model_error_is_reported_and_the_partial_kept() -> None:
    down = ModelError("provider said 503", public_message="The model is unavailable.")
    h = Harness(ScriptedAgent([*HELLO[:3], Fail(down)]))
    result = await h.start()
    assert result is not None and (result.status, result.error) == (
        "error",
        "The model is unavailable.",
    )
    assert h.sink.kinds()[-3:] == ["error", "messages", "terminal"]
    assert result.message is not None and text(result.message) == "Hel"
    assert h.db.ops[-1][:3] == ("turn", "r1", "error")
    assert [kind for kind, _ in h.events[-2:]] == ["message:error", "chat:turn:failed"]
    assert h.events[-1][1]["outcome"] == "error"
    assert h.events[-1][1]["error"] == "The model is unavailable."


async def test_an_approval_request_is_stored_while_the_turn_streams() -> None:
    answered = asyncio.Event()
    h = Harness(
        ScriptedAgent(
            [
                {"type": "start"},
                {
                    "type": "tool-input-available",
                    "toolCallId": "c1",
                    "toolName": "delete_file",
                    "input": {"path": "a.txt"},
                },
                {"type": "tool-approval-request", "approvalId": "ap1", "toolCallId": "c1"},
                Wait(answered),
                {"type": "finish"},
            ]
        )
    )
    running = h.start()

    async def approval_stored() -> bool:
        return h.db.kinds() == [["insert", "leaf"]]

    # Committed while the turn still streams, so a reload shows the approval to answer.
    await eventually(approval_stored, timeout=5)
    stored = h.db.ops[0][3][0]
    assert stored["parts"][0]["state"] == "approval-requested"
    answered.set()
    result = await running
    assert result is not None and result.status == "completed"
    # The turn's own transaction comes after it and updates the same message.
    assert h.db.kinds() == [["insert", "leaf"], ["turn"]]
    assert h.transcript.messages[-1]["id"] == stored["id"]


async def test_a_reply_finished_after_a_clear_is_not_stored() -> None:
    cleared = asyncio.Event()
    h = Harness(ScriptedAgent([*HELLO[:3], Wait(cleared), *HELLO[3:]]))
    running = h.start()
    await h.chunks_sent(3)
    h.state.generation += 1
    cleared.set()
    result = await running
    assert result is not None and (result.status, result.message) == ("completed", None)
    assert h.db.kinds() == [["turn"]]
    assert "messages" not in h.sink.kinds()
    assert h.transcript.messages == [U1]


async def test_a_hand_over_leaves_the_running_turn_to_the_next_owner() -> None:
    forever = asyncio.Event()
    h = Harness(ScriptedAgent([*HELLO[:3], Wait(forever)]))
    running = h.start()
    await h.chunks_sent(3)
    h.state.checkpointing = True
    h.state.abort_active()
    assert await running is None
    assert "terminal" not in h.sink.kinds()
    assert h.db.committed == []


async def test_a_continuation_extends_the_last_assistant_message() -> None:
    a1: UIMessage = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Hi"}]}
    h = Harness(ScriptedAgent(list(HELLO)), messages=[U1, a1])
    result = await h.start(h.queued(continuation=True, anchor=None))
    start = h.sink.of("start")[0]
    assert (start["continuation"], start["base"]) == (True, ("a1", 1))
    assert all(c["continuation"] for c in h.sink.of("chunk"))
    assert result is not None and result.message is not None
    assert result.message["id"] == "a1" and result.continuation
    # Stored in place; every tab gets the transcript; a continuation answers no user message.
    assert h.db.kinds() == [["update", "turn"]]
    assert h.sink.of("messages")[0]["exclude"] is None
    assert h.sink.of("terminal")[0]["message_ids"] is None
    assert h.agent.turns[0].messages == [U1, a1]


async def test_the_model_sees_replies_stored_while_its_turn_waited() -> None:
    u2: UIMessage = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "and?"}]}
    a1: UIMessage = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Hi"}]}
    # u2 was sent while a1 streamed; a1 was stored after it.
    h = Harness(ScriptedAgent(list(HELLO)), messages=[U1, u2, a1])
    await h.start(h.queued(anchor="u2"))
    assert [m["id"] for m in h.agent.turns[0].messages] == ["u1", "a1", "u2"]


async def test_a_recovered_turn_goes_on_where_its_stream_broke_off() -> None:
    sent = [
        {"type": "start", "messageId": "m1"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "Hel"},
    ]
    assembler = ReplyAssembler({"id": "m1", "role": "assistant", "parts": []}, continuation=False)
    for chunk in sent:
        assembler.process(chunk)
    partial = assembler.message
    # A model with assistant prefill goes on from the partial.
    rest: list[Step] = [
        {"type": "start"},
        {"type": "text-start", "id": "t9"},
        {"type": "text-delta", "id": "t9", "delta": "lo"},
        {"type": "text-end", "id": "t9"},
        {"type": "finish"},
    ]
    # The planner stored a copy of the partial before queuing the turn.
    h = Harness(ScriptedAgent(rest), messages=[U1, copy.deepcopy(partial)])
    queued = h.queued()
    queued.recovery = Recovered(
        request=queued.request,
        anchor="u1",
        continuation=False,
        incident=Incident("inc-1", "r1", "r1", "continue", IncidentState(attempt=1), 10),
        assembler=assembler,
        splice=Splice(sent),
        next_seq=3,
        live=True,
        messages=[U1, partial],
        text_before=3,
    )
    result = await h.start(queued)
    # The stream is still open in the log: no new start; the model's own `start` and its new
    # text block are folded into the block that was open.
    assert "start" not in h.sink.kinds()
    chunks = h.sink.of("chunk")
    assert [c["seq"] for c in chunks] == [3, 4, 5]
    assert [(c["chunk"]["type"], c["chunk"].get("id")) for c in chunks] == [
        ("text-delta", "t1"),
        ("text-end", "t1"),
        ("finish", None),
    ]
    assert h.agent.turns[0].continuation
    assert result is not None and result.message is not None and text(result.message) == "Hello"
    # The reply, the turn and the incident in one transaction.
    assert h.db.kinds() == [["update", "turn", "incident"]]
    assert h.recovery.finished_with == [("r1", "completed", result.message)]
