"""What the gateway and the jobs worker agree on about webhooks: ids and secrets, the URLs
accepted, and the dead-letter list (docs/observability.md#webhooks)."""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
from collections.abc import Awaitable
from typing import Any, Final, cast
from urllib.parse import urlsplit

from durachat_infra.keys import EventKeys
from durachat_infra.redis_client import RedisClient

MAX_URL: Final = 2048
"""Longest webhook URL accepted."""
MAX_WEBHOOKS: Final = 20
"""Most webhooks one tenant may register."""


_WEBHOOK_ID: Final = re.compile(r"wh_[0-9a-f]{16}")


def new_webhook_id() -> str:
    """A fresh webhook id."""
    return f"wh_{secrets.token_hex(8)}"


def is_webhook_id(value: str) -> bool:
    """Whether `value` has the form of a webhook id (anything else names no webhook)."""
    return bool(_WEBHOOK_ID.fullmatch(value))


def new_webhook_secret() -> str:
    """A fresh signing secret (256 random bits)."""
    return f"whsec_{secrets.token_urlsafe(32)}"


def check_webhook_url(url: str) -> str:
    """`url` if a webhook may be registered with it: http or https, with a host, no
    credentials in it.

    Raises:
        ValueError: it may not.
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise ValueError(f"a webhook URL is 1..{MAX_URL} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError("a webhook URL is http:// or https://")
    if not parts.hostname:
        raise ValueError("a webhook URL names a host")
    if parts.username or parts.password:
        raise ValueError("a webhook URL carries no credentials (the signature authenticates)")
    return url


def is_private_address(host: str) -> bool:
    """Whether an IP address (as text) is loopback, private, link-local (cloud metadata
    services), reserved, multicast or unspecified."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


async def dead_letters(
    redis: RedisClient, keys: EventKeys, tenant: str, webhook_id: str, *, limit: int = 100
) -> list[dict[str, Any]]:
    """The failed deliveries of a webhook, newest first."""
    pending = redis.lrange(keys.dead_letters(tenant, webhook_id), 0, max(0, limit - 1))
    raw = await cast(Awaitable[list[str]], pending)
    found: list[dict[str, Any]] = []
    for item in raw:
        try:
            entry = json.loads(item)
        except ValueError:
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found
