"""Identifiers the server allocates for messages and requests."""

from __future__ import annotations

import secrets
import string
import time

_BASE36 = string.digits + string.ascii_lowercase
_NANOID_ALPHABET = string.ascii_letters + string.digits + "_-"


def new_assistant_id() -> str:
    """Allocate the id of a new assistant message.

    Returns:
        ``assistant_<epoch milliseconds>_<9 random base36 characters>``, the shape the
        reference server stamps on a new turn's ``start`` chunk.
    """
    suffix = "".join(secrets.choice(_BASE36) for _ in range(9))
    return f"assistant_{time.time_ns() // 1_000_000}_{suffix}"


def new_request_id() -> str:
    """Allocate a request id for a server-initiated turn.

    Returns:
        8 random characters from the nanoid URL alphabet (``A-Za-z0-9_-``), like the ids
        the client transport puts on ``cf_agent_use_chat_request``.
    """
    return "".join(secrets.choice(_NANOID_ALPHABET) for _ in range(8))
