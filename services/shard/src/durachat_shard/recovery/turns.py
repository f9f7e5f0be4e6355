"""The turns recovery works on: the record an interrupted turn left (`Interrupted`, read from
the request snapshot `turn_snapshot` wrote when the turn was accepted), and the plan for the
turn that continues it (`Recovered`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durachat.messages import ReplyAssembler
from durachat.types import JSONDict, UIMessage
from durachat_infra.store import TurnRecord
from durachat_shard.recovery.incidents import Incident
from durachat_shard.recovery.stream import Splice
from durachat_shard.requests import ChatRequest


def turn_snapshot(request: ChatRequest, anchor: str | None, branch: str) -> JSONDict:
    """What a turn's record keeps so another worker can run it again: the request context,
    the message the reply answers and the user messages it was sent with."""
    snapshot: JSONDict = {
        "body": request.body,
        "clientTools": request.client_tools,
        "anchor": anchor,
        "userMessageIds": request.user_message_ids,
        "branch": branch,
    }
    if request.trigger == "regenerate-message":
        snapshot["regenerate"] = True
    return snapshot


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A turn that did not finish, as recovery sees it."""

    request_id: str
    snapshot: JSONDict
    continuation: bool
    stash: Any
    created_at: float

    @classmethod
    def of_record(cls, record: TurnRecord) -> Interrupted:
        """A turn a former owner left open in SQL."""
        snapshot = dict(record.request or {})
        continuation = record.kind == "continuation" or bool(snapshot.get("continuation"))
        stash = record.stash.get("data") if isinstance(record.stash, dict) else None
        return cls(record.request_id, snapshot, continuation, stash, record.created_at.timestamp())

    @property
    def body(self) -> JSONDict | None:
        body = self.snapshot.get("body")
        return body if isinstance(body, dict) else None

    @property
    def client_tools(self) -> list[JSONDict] | None:
        tools = self.snapshot.get("clientTools")
        return tools if isinstance(tools, list) else None

    @property
    def trigger(self) -> str:
        return "regenerate-message" if self.snapshot.get("regenerate") else "submit-message"

    @property
    def anchor(self) -> str | None:
        """The message the reply answers."""
        anchor = self.snapshot.get("anchor")
        return anchor if isinstance(anchor, str) else None

    @property
    def user_message_ids(self) -> list[str]:
        """The user messages the request was sent with."""
        raw = self.snapshot.get("userMessageIds")
        return [str(i) for i in raw] if isinstance(raw, list) else []

    @property
    def root(self) -> str:
        """The request the first interruption of this incident happened to."""
        return str(self.snapshot.get("root") or self.request_id)


@dataclass(slots=True)
class Recovered:
    """How a queued turn continues an interrupted one."""

    request: ChatRequest
    """The interrupted request, under its own id."""
    anchor: str | None
    """The message the reply answers (None: it extends the last assistant message)."""
    continuation: bool
    incident: Incident
    assembler: ReplyAssembler | None
    """The partial reply rebuilt from the log (None: nothing was streamed; run afresh)."""
    splice: Splice | None
    next_seq: int
    live: bool
    """The log still shows the interrupted stream open, so no new `start` is needed."""
    messages: list[UIMessage]
    """The transcript the model sees."""
    text_before: int
    """Characters of text the partial already had (the rest counts against budgets)."""
