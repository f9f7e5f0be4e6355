"""API keys, client tokens and what a principal covers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jwt
import pytest

from durachat_gateway.auth.credentials import (
    hash_secret,
    new_api_key,
    parse_api_key,
    same_secret,
    secret_matches,
)
from durachat_gateway.auth.principal import Principal
from durachat_gateway.auth.tokens import SCOPES, TokenError, key_id_of, mint, verify

SECRET = "signing-secret-0123456789-0123456789"


def test_an_api_key_carries_its_id_and_only_a_hash_is_kept() -> None:
    key = new_api_key()

    parsed = parse_api_key(key.key)

    assert parsed is not None and parsed[0] == key.key_id
    assert key.secret_hash == hash_secret(parsed[1])
    assert parsed[1] not in key.secret_hash
    assert secret_matches(parsed[1], key.secret_hash)
    assert not secret_matches(parsed[1] + "x", key.secret_hash)
    assert new_api_key().key != key.key


@pytest.mark.parametrize("text", ["", "dck_", "dck_short_x", "abc", "dck_0123456789abcdef_"])
def test_malformed_api_keys_are_not_parsed(text: str) -> None:
    assert parse_api_key(text) is None


def test_admin_keys_compare_exactly() -> None:
    assert same_secret("adm", "adm")
    assert not same_secret("adm", "adm ")


def token(**overrides: object) -> str:
    args: dict[str, object] = {
        "kid": "sk_1",
        "secret": SECRET,
        "tenant": "acme",
        "agent": "chat-agent",
        "name": "c1",
        "prefix": None,
        "scopes": SCOPES,
        "subject": "user-7",
        "api_key": "k1",
        "ttl": 600,
    }
    args.update(overrides)
    minted, _ = mint(**args)  # type: ignore[arg-type]
    return minted


def test_a_token_round_trips_its_grant() -> None:
    minted, expires = mint(
        kid="sk_1",
        secret=SECRET,
        tenant="acme",
        agent="chat-agent",
        name=None,
        prefix="user-7/",
        scopes=["read", "events", "bogus"],
        subject="user-7",
        api_key="k1",
        ttl=60,
    )

    assert key_id_of(minted) == "sk_1"
    claims = verify(minted, kid="sk_1", secret=SECRET)
    assert (claims.tenant, claims.agent, claims.name, claims.prefix) == (
        "acme",
        "chat-agent",
        None,
        "user-7/",
    )
    assert claims.scopes == {"read", "events"}
    assert (claims.subject, claims.api_key, claims.kid) == ("user-7", "k1", "sk_1")
    assert claims.expires_at == expires
    assert timedelta(seconds=55) < expires - datetime.now(UTC) <= timedelta(seconds=60)


def test_expired_tokens_and_other_secrets_are_refused() -> None:
    old = token(now=datetime.now(UTC) - timedelta(hours=1), ttl=60)
    with pytest.raises(TokenError) as expired:
        verify(old, kid="sk_1", secret=SECRET)
    assert expired.value.code == "expired_token"

    with pytest.raises(TokenError) as forged:
        verify(token(), kid="sk_1", secret=SECRET + "x")
    assert forged.value.code == "invalid_token"


def test_tokens_must_be_durachats() -> None:
    foreign = jwt.encode(
        {"sub": "x", "exp": 9999999999, "iat": 1, "iss": "durachat", "aud": "durachat"},
        SECRET,
        algorithm="HS256",
        headers={"kid": "sk_1"},
    )
    with pytest.raises(TokenError):
        verify(foreign, kid="sk_1", secret=SECRET)
    unsigned = jwt.encode({"ten": "acme"}, None, algorithm="none")
    with pytest.raises(TokenError):
        verify(unsigned, kid="sk_1", secret=SECRET)
    assert key_id_of("not a jwt") is None


def test_what_a_principal_covers() -> None:
    one = Principal.of_token(verify(token(), kid="sk_1", secret=SECRET))
    prefix = Principal.of_token(verify(token(name=None, prefix="u7-"), kid="sk_1", secret=SECRET))
    key = Principal(kind="key", tenant="acme", key_id="k1")

    assert one.covers("chat-agent", "c1")
    assert not one.covers("chat-agent", "c2")
    assert not one.covers("other-agent", "c1")
    assert prefix.covers("chat-agent", "u7-anything")
    assert not prefix.covers("chat-agent", "u8-x")
    assert key.covers("any-agent", "any")
    assert not Principal(kind="admin", tenant=None).covers("a", "b")
