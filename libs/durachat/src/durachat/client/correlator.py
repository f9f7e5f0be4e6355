"""Requests waiting for the server's answers: the one correlator of the resume probes and the
branch requests, and of the errors that name no request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeAlias

from durachat.client.errors import ClientError
from durachat.client.reply_control import ReplyControl
from durachat.types import JSONDict

WaiterKind: TypeAlias = Literal["probe", "list", "switch", "op"]
"""What a waiter waits for: a resume probe's answer (`cf_agent_stream_resume_request`), or the
answer to `durachat_branches`, `durachat_branch_switch` or `durachat_branch_op`."""

AnswerKind: TypeAlias = Literal["resuming", "none", "pending", "answer", "moved"]
"""A probe is answered `resuming`, `none` or `pending` (see docs/protocol.md#resume-handshake);
a branch request gets its `answer`, and a delete of the viewed branch also the news that the
client was `moved` to `main`."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer to a waiting request.

    Attributes:
        kind: What the server answered.
        frame: The answering frame, for a branch request.
        reply: (`resuming`) the reply of the stream offered.
    """

    kind: AnswerKind
    frame: JSONDict | None = None
    reply: ReplyControl | None = None


class Waiter:
    """One request waiting for the server's answers, in the order they arrive.

    Attributes:
        kind: What it waits for.
        key: Its id: a probe's `probeId`, a branch op's `id`; a local id for the branch
            requests whose answers carry none.
    """

    def __init__(self, kind: WaiterKind, key: str) -> None:
        """Create a waiter; `Correlator.waiting` does."""
        self.kind = kind
        self.key = key
        self._answers: asyncio.Queue[Answer | ClientError] = asyncio.Queue()

    def __repr__(self) -> str:
        return f"Waiter({self.kind!r}, {self.key!r})"

    def answer(self, answer: Answer) -> None:
        """Deliver an answer."""
        self._answers.put_nowait(answer)

    def fail(self, error: ClientError) -> None:
        """Deliver an error: `next` raises it once the answers before it are taken."""
        self._answers.put_nowait(error)

    async def next(self) -> Answer:
        """Wait for the next answer.

        Raises:
            ClientError: the error delivered in its place.
        """
        answer = await self._answers.get()
        if isinstance(answer, ClientError):
            raise answer
        return answer


Operation: TypeAlias = ReplyControl | Waiter
"""What the client sent last and still waits on: a chat request's reply, or a waiter."""


class Correlator:
    """The requests waiting for the server's answers, by key, and the operation a
    `durachat_error` belongs to.

    A `durachat_error` names no request: it belongs to the last operation sent that is still
    waiting (`note_sent`, `take_last`). A dropped socket or a closed client fails every waiter
    (`fail_all`).
    """

    def __init__(self) -> None:
        """Start with nothing waiting."""
        self._waiting: dict[str, Waiter] = {}
        self._last: Operation | None = None

    @contextmanager
    def waiting(self, kind: WaiterKind, key: str) -> Iterator[Waiter]:
        """Wait for the answers to a request about to be sent: the waiter is registered under
        `key`, and is the last operation sent, until the block ends.

        Args:
            kind: What it waits for.
            key: Its id (unique among the requests waiting).

        Yields:
            The waiter.
        """
        waiter = Waiter(kind, key)
        self._waiting[key] = waiter
        self._last = waiter
        try:
            yield waiter
        finally:
            if self._waiting.get(key) is waiter:
                del self._waiting[key]
            if self._last is waiter:
                self._last = None

    def find(self, key: str, kind: WaiterKind) -> Waiter | None:
        """The waiter of that kind registered under `key`, if it still waits."""
        waiter = self._waiting.get(key)
        return waiter if waiter is not None and waiter.kind == kind else None

    def of_kind(self, kind: WaiterKind) -> list[Waiter]:
        """Every waiter of that kind, oldest first."""
        return [w for w in self._waiting.values() if w.kind == kind]

    def note_sent(self, operation: Operation | None) -> None:
        """Record the operation just sent (None for one that waits for nothing: a cancel, a
        clear): a `durachat_error` that follows is its error."""
        self._last = operation

    def take_last(self) -> Operation | None:
        """The operation a `durachat_error` that just arrived belongs to; the error settles it,
        so it is forgotten."""
        last, self._last = self._last, None
        return last

    def fail_all(self, error: ClientError) -> None:
        """Fail every waiter with `error` (the socket dropped, or the client is closed)."""
        for waiter in list(self._waiting.values()):
            waiter.fail(error)
