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
    return f"assistant_{time.time_ns() // 1_000_000}_{_random_string(_BASE36, 9)}"


def new_request_id() -> str:
    """Allocate a request id for a server-initiated turn.

    Returns:
        8 random characters from the nanoid URL alphabet (``A-Za-z0-9_-``), like the ids
        the client transport puts on ``cf_agent_use_chat_request``.
    """
    return _random_string(_NANOID_ALPHABET, 8)


def _random_string(alphabet: str, length: int) -> str:
    """`length` characters drawn uniformly from `alphabet`, from one draw of the system's
    random source (a draw per character would be a system call per character)."""
    size = len(alphabet)
    number = secrets.randbelow(size**length)
    out = []
    for _ in range(length):
        number, digit = divmod(number, size)
        out.append(alphabet[digit])
    return "".join(out)
