"""What the fuzz tests share: how many cases to run, Hypothesis strategies for client frames
that must change nothing stored, and an event loop on a thread of its own (Hypothesis drives
sync test functions; the sockets they use live on that loop)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from hypothesis import strategies as st

from durachat.protocol import MessageType

T = TypeVar("T")


def cases(default: int) -> int:
    """How many cases a fuzz test runs: `DURACHAT_FUZZ_CASES` (`make fuzz`), else `default`
    (the quick run of `make test`)."""
    return int(os.environ.get("DURACHAT_FUZZ_CASES", default))


class LoopThread:
    """An asyncio loop on a daemon thread; `run` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run `coro` on the loop; its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@contextmanager
def loop_thread() -> Iterator[LoopThread]:
    """A `LoopThread` for the duration of the block."""
    thread = LoopThread()
    try:
        yield thread
    finally:
        thread.stop()


# Any JSON value, a few levels deep, with the odd character.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=25,
)

# Deep nesting, past the bounds on client JSON (durachat.limits).
deep_json = st.integers(min_value=50, max_value=3000).map(lambda depth: "[" * depth + "]" * depth)

VALID_ROLES = {"user", "assistant", "system"}

# A message no reader may accept: not an object, no parts list, or a role of no UIMessage.
invalid_messages = st.one_of(
    json_values.filter(lambda v: not isinstance(v, dict)),
    st.fixed_dictionaries(
        {"id": st.text(max_size=10), "role": st.sampled_from(["user", "assistant"])},
        optional={"parts": json_values.filter(lambda v: not isinstance(v, list))},
    ),
    st.fixed_dictionaries(
        {
            "id": st.text(max_size=10),
            "role": st.text(max_size=12).filter(lambda r: r not in VALID_ROLES),
            "parts": st.lists(json_values, max_size=3),
        }
    ),
    st.fixed_dictionaries(
        {
            "id": st.text(max_size=10),
            "role": st.just("user"),
            "parts": st.lists(json_values.filter(lambda v: not isinstance(v, dict)), min_size=1),
        }
    ),
)


@st.composite
def invalid_message_lists(draw: st.DrawFn) -> list[Any]:
    """A list of messages with at least one invalid message in it."""
    messages = draw(st.lists(json_values, max_size=3))
    messages.insert(draw(st.integers(0, len(messages))), draw(invalid_messages))
    return messages


@st.composite
def chat_request_bodies(draw: st.DrawFn) -> str:
    """The `init.body` of a chat request that must be refused."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.text(max_size=60))
    if choice == 1:
        return draw(deep_json)
    extra = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
    extra.pop("messages", None)
    if choice == 2:
        return json.dumps({**extra, "messages": draw(invalid_message_lists())})
    return json.dumps(
        {**extra, "messages": draw(json_values.filter(lambda v: not isinstance(v, list)))}
    )


request_ids = st.text(min_size=1, max_size=20)

# Frame types that change a conversation when valid: sent only in shapes that are not.
_TYPES = [t.value for t in MessageType if t is not MessageType.CHAT_CLEAR] + ["x", ""]


@st.composite
def frames(draw: st.DrawFn) -> Any:
    """A client frame that must change nothing stored: arbitrary JSON, a known type with
    arbitrary fields, a chat request whose messages are invalid, a branch write that names no
    operation, tool answers for calls that do not exist."""
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return draw(json_values)
    if kind == 1:
        return draw(deep_json)
    if kind == 2:
        fields = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
        fields["type"] = draw(st.sampled_from(_TYPES))
        if fields["type"] in (MessageType.CHAT_MESSAGES.value, MessageType.USE_CHAT_REQUEST.value):
            fields["messages"] = draw(invalid_message_lists())
            fields.pop("init", None)
        if fields["type"] == MessageType.BRANCH_OP.value:
            fields["op"] = draw(st.text(max_size=8).filter(lambda o: o not in _BRANCH_WRITES))
        return fields
    if kind == 3:
        init: dict[str, Any] = {"method": "POST", "body": draw(chat_request_bodies())}
        if draw(st.booleans()):
            init = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=3))
            init.pop("body", None)
        return {"type": MessageType.USE_CHAT_REQUEST.value, "id": draw(request_ids), "init": init}
    if kind == 4:
        return {"type": MessageType.CHAT_MESSAGES.value, "messages": draw(invalid_message_lists())}
    if kind == 5:
        return {
            "type": draw(
                st.sampled_from([MessageType.TOOL_RESULT.value, MessageType.TOOL_APPROVAL.value])
            ),
            "toolCallId": "fuzz-" + draw(st.text(max_size=10)),
            "output": draw(json_values),
            "approved": draw(st.booleans()),
            "autoContinue": draw(st.booleans()),
        }
    return {
        "type": MessageType.BRANCH_OP.value,
        "op": draw(st.sampled_from(["siblings", "nope", "", "FORK"])),
        "id": draw(request_ids),
        "branch": draw(json_values),
        "messageId": draw(json_values),
    }


_BRANCH_WRITES = frozenset({"create", "fork", "rename", "delete"})
