"""Client mistakes (a malformed frame, a bad name, an oversized request): one log line each,
without a traceback, and at most one line per kind of mistake a second, so a client sending
garbage in a loop cannot flood the log (docs/security.md#bad-input)."""

from __future__ import annotations

import logging
import time
from typing import Final

log = logging.getLogger("durachat_gateway.client")

INTERVAL: Final = 1.0
"""Seconds between two log lines of the same kind of mistake."""

_last: dict[str, float] = {}
_dropped: dict[str, int] = {}


def client_mistake(code: str, detail: str) -> None:
    """Log a client's mistake (`code`: its stable error code) unless one of the same code was
    logged less than `INTERVAL` ago; the next line says how many were left out."""
    now = time.monotonic()
    if now - _last.get(code, -INTERVAL) < INTERVAL:
        _dropped[code] = _dropped.get(code, 0) + 1
        return
    _last[code] = now
    skipped = _dropped.pop(code, 0)
    more = f" ({skipped} more since the last line)" if skipped else ""
    log.info("client mistake %s: %s%s", code, detail[:200], more)
