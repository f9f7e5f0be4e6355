"""Events of the feed as the publisher writes them: the stream entry's field, and the feed's
form of an observability event."""

from __future__ import annotations

from durachat.observability import Event
from durachat.observability.feed import EventFilter, FeedEvent, type_matches

FIELD = "e"
"""The stream entry field holding an event's JSON."""

__all__ = ["FIELD", "EventFilter", "FeedEvent", "feed_event_of", "type_matches"]


def feed_event_of(event: Event, *, process: str, default_tenant: str) -> FeedEvent:
    """The feed's form of an observability event (events without a tenant are the default
    tenant's, as a process in open mode acts for it)."""
    return FeedEvent(
        type=event.type,
        tenant=event.tenant or default_tenant,
        agent=event.agent,
        name=event.name,
        time=event.timestamp,
        data=event.payload,
        process=process,
    )
