"""In-process subscriptions to observability channels.

Handlers are plain callables run synchronously by the publisher, in subscription order: first
those of the event's channel, then those subscribed to `"*"`. Each publish iterates over a
snapshot, so a handler may subscribe or unsubscribe (itself or others) while it runs; the change
applies from the next event. A handler that raises is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from durachat.observability.events import Channel, Event

Handler = Callable[[Event], None]
"""A subscriber: called with each event of its channel."""

logger = logging.getLogger("durachat.observability")


class _Registration:
    """One subscription (a handler subscribed twice has two)."""

    __slots__ = ("handler",)

    def __init__(self, handler: Handler) -> None:
        self.handler = handler


# channel -> registrations; replaced, never mutated, so a snapshot stays valid.
_subscribers: dict[str, tuple[_Registration, ...]] = {}


def subscribe(channel: str, handler: Handler) -> Callable[[], None]:
    """Call `handler` with every event published on `channel` (`"*"`: on every channel).

    Returns a function that removes this subscription; calling it again does nothing.
    """
    registration = _Registration(handler)
    _subscribers[channel] = (*_subscribers.get(channel, ()), registration)

    def unsubscribe() -> None:
        current = _subscribers.get(channel, ())
        if registration not in current:
            return
        remaining = tuple(r for r in current if r is not registration)
        if remaining:
            _subscribers[channel] = remaining
        else:
            del _subscribers[channel]

    return unsubscribe


def has_subscribers(channel: str) -> bool:
    """Whether publishing on `channel` would reach any handler (`"*"` subscribers included)."""
    return bool(_subscribers.get(channel) or _subscribers.get(Channel.ALL))


def publish(event: Event) -> None:
    """Deliver `event` to the subscribers of its channel, then to those of `"*"`."""
    registrations = _subscribers.get(event.channel, ()) + _subscribers.get(Channel.ALL, ())
    for registration in registrations:
        try:
            registration.handler(event)
        except Exception:
            logger.exception(
                "observability handler %r failed on %s", registration.handler, event.type
            )
