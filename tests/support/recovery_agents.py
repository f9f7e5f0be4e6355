"""Agents for the crash-recovery tests: a slow counting tool, a stalling model, a hopeless one."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from durachat import ChatRecovery, RecoveryContext, RecoveryOptions, Turn
from durachat.demo import ChatAgent, City
from durachat.tools import tool
from durachat.types import UIChunk

COUNTER_DIR_ENV = "DURACHAT_TEST_COUNTER_DIR"
"""Directory where `CountingToolAgent` records each execution of its tool (one line each)."""

TOOL_SECONDS = 3.0
"""How long one execution of the counting tool takes."""


@tool(description="The weather, slowly; every execution is counted.", input=City)
async def getWeather(place: City) -> dict[str, object]:  # noqa: N802 - the tool's wire name
    counter = Path(os.environ[COUNTER_DIR_ENV]) / f"{place.city}.count"
    with counter.open("a") as out:
        out.write("run\n")
    await asyncio.sleep(TOOL_SECONDS)
    return {"city": place.city, "temperature": 19}


class CountingToolAgent(ChatAgent):
    """`tool:<key>` runs a slow tool that records every execution in `<key>.count`."""

    tools = (getWeather,)


class StallingAgent(ChatAgent):
    """The demo agent with a stall watchdog: the `stall` directive goes silent after ten
    deltas, and recovery continues the reply."""

    stream_stall_timeout = 1.0


class HopelessAgent(ChatAgent):
    """Starts a reply, then goes silent; every recovery goes silent at once. Recovery gives up
    after two attempts without progress."""

    stream_stall_timeout = 0.5
    chat_recovery = ChatRecovery(max_attempts=2, terminal_message="Gave up on this one.")

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        if not turn.continuation:
            yield {"type": "text-start", "id": "t"}
            yield {"type": "text-delta", "id": "t", "delta": "working "}
        await asyncio.Event().wait()


class DiscardingAgent(ChatAgent):
    """Neither keeps nor continues an interrupted reply (`on_chat_recovery` says so)."""

    stream_stall_timeout = 1.0

    async def on_chat_recovery(self, ctx: RecoveryContext) -> RecoveryOptions:
        return RecoveryOptions(persist=False, continue_turn=False)
