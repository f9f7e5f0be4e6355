"""The per-conversation event log on Redis Streams: replay and broadcast in one mechanism."""

from durachat_infra.eventlog.entries import (
    ALL,
    EVERY_BRANCH,
    MAIN,
    Kind,
    LogEntry,
    all_but,
    branch_of,
    entry_id_key,
    is_for,
    only,
    state_fields,
    state_prefix,
    with_cursor,
    with_replay_flag,
)
from durachat_infra.eventlog.reader import LogReader, read_range, read_state
from durachat_infra.eventlog.state import StreamState
from durachat_infra.eventlog.writer import LogFencedError, LogWriter

__all__ = [
    "ALL",
    "EVERY_BRANCH",
    "MAIN",
    "Kind",
    "LogEntry",
    "LogFencedError",
    "LogReader",
    "LogWriter",
    "StreamState",
    "all_but",
    "branch_of",
    "entry_id_key",
    "is_for",
    "only",
    "read_range",
    "read_state",
    "state_fields",
    "state_prefix",
    "with_cursor",
    "with_replay_flag",
]
