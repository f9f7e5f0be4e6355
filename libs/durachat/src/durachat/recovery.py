"""Crash recovery of chat turns: the agent's configuration, hook contexts and budgets.

When the worker running a turn dies (or its model stream stalls), the conversation's next owner
rebuilds the partial reply from the event log and asks the agent what to do through
`Agent.on_chat_recovery`. Every attempt is one step of an *incident* whose budget decides when
recovery gives up (is *sealed*); the settings, their defaults and the order of the checks are in
docs/recovery.md#budgets, the checks themselves in `evaluate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from durachat.types import JSONDict, UIMessage, UIPart

RecoveryKind = Literal["retry", "continue"]
"""`retry`: nothing of the reply was streamed and the user message is unanswered, so the turn
runs again; `continue`: the partial reply is kept and extended."""

SealReason = Literal[
    "work_budget_exceeded",
    "no_progress_timeout",
    "recovery_aborted",
    "max_attempts_exceeded",
    "stable_timeout",
    "tenant_budget_exceeded",
]
"""Why recovery gave up on an incident."""

DEFAULT_TERMINAL_MESSAGE: Final = (
    "The assistant was interrupted and could not recover. Please try again."
)


@dataclass(frozen=True, slots=True)
class ChatRecovery:
    """How hard to try to recover an interrupted turn (the agent's `chat_recovery`).

    Attributes:
        enabled: recover at all; when False an interrupted turn is sealed at once with the
            terminal message.
        max_attempts: attempts without progress before giving up (`max_attempts_exceeded`);
            an attempt that made progress resets the count to 1.
        stable_timeout: seconds a scheduled recovery waits for the conversation to settle
            (no other turn running) before it gives up (`stable_timeout`).
        no_progress_timeout: seconds without new chunks after which an incident is sealed
            (`no_progress_timeout`).
        max_recovery_work: chunks a recovered turn may add across all its attempts
            (`work_budget_exceeded`).
        terminal_message: what the client is told when recovery gives up.
        tenant_token_budget: tokens (estimated from the recovered text, four characters a
            token) a tenant's recovered turns may use per hour; past it, incidents of that
            tenant are sealed with `tenant_budget_exceeded`. None: unlimited.
    """

    enabled: bool = True
    max_attempts: int = 10
    stable_timeout: float = 10.0
    no_progress_timeout: float = 300.0
    max_recovery_work: int = 1000
    terminal_message: str = DEFAULT_TERMINAL_MESSAGE
    tenant_token_budget: int | None = None


@dataclass(frozen=True, slots=True)
class RecoveryContext:
    """What `Agent.on_chat_recovery` and `Agent.should_keep_recovering` are told."""

    incident_id: str
    recovery_root_request_id: str
    request_id: str
    attempt: int
    max_attempts: int
    recovery_kind: RecoveryKind
    stream_id: str
    """The event log entry id where the interrupted stream started ("" if none)."""
    partial_text: str
    partial_parts: list[UIPart]
    recovery_data: Any
    """What the turn passed to `Agent.stash` before it was interrupted (None if nothing)."""
    messages: list[UIMessage]
    last_body: JSONDict | None
    last_client_tools: list[JSONDict] | None
    created_at: float
    """When the interrupted turn was accepted (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class RecoveryOptions:
    """What to do with an interrupted turn (returned by `Agent.on_chat_recovery`).

    Attributes:
        persist: store the partial reply. A partial holding settled tool results is stored
            regardless: a tool that ran is never forgotten.
        continue_turn: continue (or retry) the turn; False ends recovery here (`skipped`).
    """

    persist: bool = True
    continue_turn: bool = True


@dataclass(frozen=True, slots=True)
class ExhaustedContext:
    """What `Agent.on_exhausted` is told when recovery gives up."""

    incident_id: str
    request_id: str
    recovery_root_request_id: str
    attempt: int
    max_attempts: int
    recovery_kind: RecoveryKind
    stream_id: str
    created_at: float
    partial_text: str
    partial_parts: list[UIPart]
    reason: SealReason
    terminal_message: str


@dataclass(slots=True)
class IncidentState:
    """The budget state of an incident, kept between attempts (stored by the host).

    Times are seconds since the epoch; `progress` counts the chunks the turn has streamed.
    """

    attempt: int = 0
    first_seen_at: float = 0.0
    last_attempt_at: float = 0.0
    last_progress_at: float = 0.0
    progress: int = 0
    work_baseline: int = 0
    extra: JSONDict = field(default_factory=dict)

    def to_json(self) -> JSONDict:
        """The stored form."""
        return {
            "firstSeenAt": self.first_seen_at,
            "lastAttemptAt": self.last_attempt_at,
            "lastProgressAt": self.last_progress_at,
            "progress": self.progress,
            "workBaseline": self.work_baseline,
            **self.extra,
        }

    @classmethod
    def from_json(cls, attempt: int, data: JSONDict) -> IncidentState:
        """Read the stored form back."""
        known = {"firstSeenAt", "lastAttemptAt", "lastProgressAt", "progress", "workBaseline"}
        return cls(
            attempt=attempt,
            first_seen_at=float(data.get("firstSeenAt", 0.0)),
            last_attempt_at=float(data.get("lastAttemptAt", 0.0)),
            last_progress_at=float(data.get("lastProgressAt", 0.0)),
            progress=int(data.get("progress", 0)),
            work_baseline=int(data.get("workBaseline", 0)),
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of `evaluate`: the incident's new state, whether it is new, and the reason
    it is sealed (None: try again)."""

    state: IncidentState
    first: bool
    sealed: SealReason | None


def evaluate(
    previous: IncidentState | None,
    *,
    progress: int,
    now: float,
    config: ChatRecovery,
) -> Evaluation:
    """Count one more recovery attempt of an incident and check its budget.

    Progress since the last attempt resets the attempt count to 1. The seal checks run in the
    reference's order: work budget, no-progress timeout, attempts (`should_keep_recovering`
    and the tenant budget are checked by the host, which can call out).

    Args:
        previous: the incident's state, None on first detection.
        progress: chunks the interrupted turn has streamed so far (all attempts).
        now: the current time (seconds since the epoch).
        config: the agent's recovery configuration.
    """
    if previous is None:
        state = IncidentState(
            attempt=1,
            first_seen_at=now,
            last_attempt_at=now,
            last_progress_at=now,
            progress=progress,
            work_baseline=progress,
        )
        first = True
    else:
        state = replace(previous, extra=dict(previous.extra))
        if progress > previous.progress:
            state.attempt = 1
            state.last_progress_at = now
        else:
            state.attempt = previous.attempt + 1
        state.progress = progress
        state.last_attempt_at = now
        first = False
    sealed: SealReason | None = None
    if progress - state.work_baseline > config.max_recovery_work:
        sealed = "work_budget_exceeded"
    elif now - state.last_progress_at > config.no_progress_timeout:
        sealed = "no_progress_timeout"
    elif state.attempt > config.max_attempts:
        sealed = "max_attempts_exceeded"
    return Evaluation(state, first, sealed)


def incident_id(root_request_id: str, latest_user_message_id: str | None) -> str:
    """The reference's incident id: `<root request id>:<latest user message id or "">`."""
    return f"{root_request_id}:{latest_user_message_id or ''}"


def partial_text(parts: list[UIPart]) -> str:
    """The text of a partial reply's text parts, concatenated."""
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def has_settled_tool_results(parts: list[UIPart]) -> bool:
    """Whether a partial reply holds tool results (never dropped, whatever the hook says)."""
    return any(
        isinstance(p, dict)
        and str(p.get("state", "")).startswith("output-")
        and (str(p.get("type", "")).startswith("tool-") or p.get("type") == "dynamic-tool")
        for p in parts
    )
