"""Reading the feed back: where a stream ends, and the events after a cursor."""

from __future__ import annotations

import re
from typing import Final

from durachat_infra.events.record import FIELD, FeedEvent
from durachat_infra.redis_client import RedisClient

_CURSOR: Final = re.compile(r"\d{1,20}(-\d{1,20})?")


class FeedCursorError(ValueError):
    """A resume cursor (`Last-Event-ID`) that is not a stream id."""


def check_cursor(raw: str) -> str:
    """`raw` as a stream id (`<ms>-<seq>`; `<ms>` alone means `<ms>-0`).

    Raises:
        FeedCursorError: it is not one.
    """
    value = raw.strip()
    if not _CURSOR.fullmatch(value):
        raise FeedCursorError(f"not an event id: {raw[:64]!r}")
    return value if "-" in value else f"{value}-0"


async def feed_tail(redis: RedisClient, stream: str) -> str:
    """The id of the stream's last entry (`0-0` when it is empty or missing): a subscriber
    starting now reads after it."""
    last = await redis.xrevrange(stream, count=1)
    return str(last[0][0]) if last else "0-0"


async def read_feed(
    redis: RedisClient, stream: str, after: str, *, block_ms: int, count: int = 500
) -> tuple[str, list[FeedEvent]]:
    """The events after `after`, waiting up to `block_ms` for the first; returns the cursor
    to read from next (past entries that are not events too) and the events."""
    answer = await redis.xread({stream: after}, count=count, block=block_ms)
    cursor = after
    events: list[FeedEvent] = []
    for _, entries in answer or ():
        for entry_id, fields in entries:
            cursor = str(entry_id)
            raw = fields.get(FIELD)
            if raw is None:
                continue
            try:
                events.append(FeedEvent.from_entry(cursor, raw))
            except ValueError:
                continue
    return cursor, events
