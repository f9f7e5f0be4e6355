"""The per-conversation event log on Redis Streams: replay and broadcast in one mechanism.

The port it implements is in `durachat_infra.eventlog.port`, an in-memory adapter of the same
port in `durachat_infra.eventlog.memory` (docs/architecture.md#ports-and-adapters).
"""

from durachat_infra.eventlog.entries import (
    ALL,
    EVERY_BRANCH,
    Kind,
    LogEntry,
    all_but,
    branch_of,
    branch_tag,
    entry_id_key,
    is_for,
    only,
    with_cursor,
    with_replay_flag,
)
from durachat_infra.eventlog.maintenance import LogMaintenance
from durachat_infra.eventlog.reader import LogReader, LogReads, read_range, read_state, read_states
from durachat_infra.eventlog.state import (
    ENTRY_ID,
    StateChange,
    StreamState,
    branch_change,
    state_fields,
    state_prefix,
)
from durachat_infra.eventlog.writer import LogFencedError, LogWriter

__all__ = [
    "ALL",
    "ENTRY_ID",
    "EVERY_BRANCH",
    "Kind",
    "LogEntry",
    "LogFencedError",
    "LogMaintenance",
    "LogReader",
    "LogReads",
    "LogWriter",
    "StateChange",
    "StreamState",
    "all_but",
    "branch_change",
    "branch_of",
    "branch_tag",
    "entry_id_key",
    "is_for",
    "only",
    "read_range",
    "read_state",
    "read_states",
    "state_fields",
    "state_prefix",
    "with_cursor",
    "with_replay_flag",
]
