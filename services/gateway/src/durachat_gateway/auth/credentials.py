"""API keys and token signing secrets: how they are made, read and checked
(docs/security.md#credentials).

An API key reads `dck_<key id>_<secret>`. The key id is public (it names the key in the admin
API and lets a gateway find it without a scan); only a SHA-256 hash of the secret is stored. The
secret has 256 bits of entropy, so a fast hash is as strong as a slow one here: nobody can guess
their way back from it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

API_KEY_PREFIX: Final = "dck_"
_KEY_ID_BYTES: Final = 8
_SECRET_BYTES: Final = 32


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """A freshly made API key: `key` is shown once; the store keeps `key_id` and `secret_hash`."""

    key_id: str
    key: str
    secret_hash: str


def hash_secret(secret: str) -> str:
    """The stored form of an API key's secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_api_key() -> NewApiKey:
    """Make an API key."""
    key_id = secrets.token_hex(_KEY_ID_BYTES)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    return NewApiKey(key_id, f"{API_KEY_PREFIX}{key_id}_{secret}", hash_secret(secret))


def parse_api_key(text: str) -> tuple[str, str] | None:
    """`(key id, secret)` of something shaped like an API key, or None."""
    if not text.startswith(API_KEY_PREFIX):
        return None
    key_id, _, secret = text[len(API_KEY_PREFIX) :].partition("_")
    if len(key_id) != 2 * _KEY_ID_BYTES or not secret:
        return None
    return key_id, secret


def secret_matches(secret: str, secret_hash: str) -> bool:
    """Whether `secret` is the one `secret_hash` was made from (in constant time)."""
    return hmac.compare_digest(hash_secret(secret), secret_hash)


def same_secret(given: str, expected: str) -> bool:
    """Compare two secrets (the admin key) in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())


def new_signing_key() -> tuple[str, str]:
    """`(key id, secret)` of a new token signing key."""
    return f"sk_{secrets.token_hex(8)}", secrets.token_urlsafe(48)
