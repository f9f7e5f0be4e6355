"""Client tokens: short-lived JWTs a tenant's backend has the gateway mint for a browser
(docs/security.md#client-tokens).

A token is an HS256 JWT signed with one of its tenant's signing keys, named in its header
(`kid`), so a gateway checks it with what it holds in memory, without a database read. Claims:

| claim | meaning |
| --- | --- |
| `iss`, `aud` | `durachat` |
| `ten` | the tenant |
| `agt` | the agent |
| `cnv` / `cnp` | the conversation's name, or a prefix of the names it may use |
| `scp` | scopes: `chat`, `read`, `branches`, `events` |
| `sub` | the end user, as the backend names it (optional) |
| `akey` | the id of the API key that asked for the token |
| `iat`, `exp`, `jti` | issued, expires, a unique id |
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import jwt

ISSUER: Final = "durachat"
ALGORITHM: Final = "HS256"
SCOPES: Final = ("chat", "read", "branches", "events")
"""What a token may do: `chat` send chat frames, `read` read transcripts and branches,
`branches` create, rename, delete and fork branches, `events` open the WebSocket and receive the
conversation's frames."""


class TokenError(Exception):
    """A token was refused; `code` is `expired_token` or `invalid_token`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a verified token grants."""

    tenant: str
    agent: str
    name: str | None
    prefix: str | None
    scopes: frozenset[str]
    subject: str | None
    api_key: str | None
    kid: str
    expires_at: datetime


def mint(
    *,
    kid: str,
    secret: str,
    tenant: str,
    agent: str,
    name: str | None,
    prefix: str | None,
    scopes: Iterable[str],
    subject: str | None,
    api_key: str | None,
    ttl: float,
    now: datetime | None = None,
) -> tuple[str, datetime]:
    """Sign a token; returns it and when it expires."""
    issued = now or datetime.now(UTC)
    expires = datetime.fromtimestamp(int(issued.timestamp() + ttl), UTC)
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": ISSUER,
        "ten": tenant,
        "agt": agent,
        "scp": sorted(set(scopes)),
        "iat": int(issued.timestamp()),
        "exp": int(expires.timestamp()),
        "jti": secrets.token_urlsafe(12),
    }
    if name is not None:
        claims["cnv"] = name
    if prefix is not None:
        claims["cnp"] = prefix
    if subject is not None:
        claims["sub"] = subject
    if api_key is not None:
        claims["akey"] = api_key
    token = jwt.encode(claims, secret, algorithm=ALGORITHM, headers={"kid": kid})
    return token, expires


def key_id_of(token: str) -> str | None:
    """The `kid` a token's header names (unverified), or None if it is not a JWT."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return None
    kid = header.get("kid")
    return kid if isinstance(kid, str) else None


def verify(token: str, *, kid: str, secret: str, leeway: float = 1.0) -> TokenClaims:
    """Check a token's signature, issuer, audience and expiry, and read its grant.

    Raises:
        TokenError: the token is expired or not valid.
    """
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            audience=ISSUER,
            issuer=ISSUER,
            leeway=leeway,
            options={"require": ["exp", "iat", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise TokenError("expired_token", "the token has expired") from exc
    except jwt.PyJWTError as exc:
        raise TokenError("invalid_token", f"the token is not valid: {exc}") from exc
    tenant, agent = claims.get("ten"), claims.get("agt")
    name, prefix = claims.get("cnv"), claims.get("cnp")
    scopes = claims.get("scp")
    if (
        not isinstance(tenant, str)
        or not isinstance(agent, str)
        or (name is None) == (prefix is None)
        or not isinstance(name if name is not None else prefix, str)
        or not isinstance(scopes, list)
        or not all(isinstance(s, str) for s in scopes)
    ):
        raise TokenError("invalid_token", "the token's claims are not durachat's")
    subject, api_key = claims.get("sub"), claims.get("akey")
    return TokenClaims(
        tenant=tenant,
        agent=agent,
        name=name,
        prefix=prefix,
        scopes=frozenset(scopes) & frozenset(SCOPES),
        subject=subject if isinstance(subject, str) else None,
        api_key=api_key if isinstance(api_key, str) else None,
        kid=kid,
        expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
    )
