"""The exactly-once tool ledger on a real SQL store, under a retried continuation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from durachat.steps import stream_steps
from durachat.tools import INTERRUPTED_TOOL_ERROR, ToolSet, tool
from durachat.types import UIChunk
from durachat_infra.store import ConversationKey, FencedTransaction, Store, migrate
from durachat_shard.ledger import SqlToolLedger


class Payment(BaseModel):
    amount: int
    recipient: str


@pytest.fixture
async def write(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[None]]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(url)
    store = Store.from_url(url)
    conversation = await store.get_or_create_conversation(ConversationKey("default", "a", "c"))
    await store.claim(conversation.id, 1)

    async def run(work: Callable[[FencedTransaction], Awaitable[None]]) -> None:
        async with store.transaction(conversation.id, 1) as tx:
            await work(tx)

    yield run
    await store.close()


def _history(state: str = "approval-responded") -> list[dict[str, object]]:
    return [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "approve:bob"}]},
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-processPayment",
                    "toolCallId": "call-1",
                    "state": state,
                    "input": {"amount": 42, "recipient": "bob"},
                    "approval": {"id": "ap-1", "approved": True},
                },
            ],
        },
    ]


async def _collect(stream: AsyncIterator[UIChunk]) -> list[UIChunk]:
    return [c async for c in stream]


async def test_a_completed_call_is_never_run_again(write: Callable[..., Awaitable[None]]) -> None:
    runs: list[str] = []

    @tool(description="pay", input=Payment, needs_approval=True)
    def processPayment(payment: Payment) -> dict[str, object]:  # noqa: N802
        runs.append(payment.recipient)
        return {"ok": True, "amount": payment.amount, "recipient": payment.recipient}

    tools = ToolSet([processPayment])
    ledger = SqlToolLedger(write, "shard-a")
    first = await _collect(
        stream_steps("durachat/scripted", _history(), tools, continuation=True, ledger=ledger)
    )
    # The worker died before the reply was stored: the same continuation runs again, on
    # another shard (a new ledger object over the same database).
    again = await _collect(
        stream_steps(
            "durachat/scripted",
            _history(),
            tools,
            continuation=True,
            ledger=SqlToolLedger(write, "shard-b"),
        )
    )
    assert runs == ["bob"]
    expected = {"ok": True, "amount": 42, "recipient": "bob"}
    for chunks in (first, again):
        output = next(c for c in chunks if c["type"] == "tool-output-available")
        assert output["output"] == expected
        text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
        assert text == 'tool result: {"ok":true,"amount":42,"recipient":"bob"}'


async def test_a_call_cut_off_while_running_is_reported_not_rerun(
    write: Callable[..., Awaitable[None]],
) -> None:
    runs: list[str] = []

    @tool(description="pay", input=Payment, needs_approval=True)
    def processPayment(payment: Payment) -> dict[str, object]:  # noqa: N802
        runs.append(payment.recipient)
        return {"ok": True}

    # A worker entered the call in the ledger and died before it finished.
    assert await SqlToolLedger(write, "dead").begin("call-1", "processPayment", {}) is None
    chunks = await _collect(
        stream_steps(
            "durachat/scripted",
            _history(),
            ToolSet([processPayment]),
            continuation=True,
            ledger=SqlToolLedger(write, "shard-b"),
        )
    )
    assert runs == []
    error = next(c for c in chunks if c["type"] == "tool-output-error")
    assert error["errorText"] == INTERRUPTED_TOOL_ERROR


async def test_a_failed_call_keeps_its_error(write: Callable[..., Awaitable[None]]) -> None:
    runs = 0

    @tool(description="pay", input=Payment, needs_approval=True)
    def processPayment(payment: Payment) -> dict[str, object]:  # noqa: N802
        nonlocal runs
        runs += 1
        raise RuntimeError("card declined")

    tools = ToolSet([processPayment])
    for shard in ("a", "b"):
        chunks = await _collect(
            stream_steps(
                "durachat/scripted",
                _history(),
                tools,
                continuation=True,
                ledger=SqlToolLedger(write, shard),
            )
        )
        error = next(c for c in chunks if c["type"] == "tool-output-error")
        assert error["errorText"] == "card declined"
    assert runs == 1
