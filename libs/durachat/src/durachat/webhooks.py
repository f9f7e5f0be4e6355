"""Signing and verifying webhook deliveries (docs/observability.md#webhooks).

A delivery is a POST of one event as JSON. It carries `durachat-timestamp` (seconds since the
epoch) and `durachat-signature`: the hex HMAC-SHA256, keyed with the webhook's secret, of
`<timestamp>.<body>`. A receiver recomputes it over the raw body, compares in constant time,
and refuses deliveries older than a few minutes (a replayed one).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Final

SIGNATURE_HEADER: Final = "durachat-signature"
TIMESTAMP_HEADER: Final = "durachat-timestamp"
DEFAULT_TOLERANCE: Final = 300.0
"""Seconds a delivery's timestamp may be away from the receiver's clock."""


def sign_delivery(secret: str, timestamp: int, body: bytes) -> str:
    """The signature of a delivery: hex HMAC-SHA256 of `<timestamp>.<body>`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_delivery(
    secret: str,
    *,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a delivery is signed with `secret` and recent enough (the header values as
    received; `body` the raw request body)."""
    if not timestamp or not signature:
        return False
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    current = time.time() if now is None else now
    if abs(current - sent) > tolerance:
        return False
    return hmac.compare_digest(sign_delivery(secret, sent, body), signature.strip())
