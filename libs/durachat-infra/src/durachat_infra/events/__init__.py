"""The tenants' event feed (docs/observability.md#subscribing-to-events).

Every process publishes the observability events it emits (`durachat.observability.emit`) to
a Redis Stream per tenant, plus one stream of every tenant's for the operator
(`EventPublisher`); gateways read them back for SSE and WebSocket subscribers (`read_feed`), and
the jobs worker delivers them to webhooks (`durachat_infra.events.webhooks`).
"""

from durachat_infra.events.publisher import DEFAULT_TENANT, EventPublisher
from durachat_infra.events.reading import FeedCursorError, feed_tail, read_feed
from durachat_infra.events.record import EventFilter, FeedEvent, feed_event_of

__all__ = [
    "DEFAULT_TENANT",
    "EventFilter",
    "EventPublisher",
    "FeedCursorError",
    "FeedEvent",
    "feed_event_of",
    "feed_tail",
    "read_feed",
]
