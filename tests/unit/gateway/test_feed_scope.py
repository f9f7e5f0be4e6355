"""What each credential reads of the event feed (docs/security.md#credentials)."""

from __future__ import annotations

import pytest

from durachat_gateway.auth.principal import Principal
from durachat_gateway.events_api import FeedRefusedError, feed_scope
from durachat_infra.events import EventFilter
from durachat_infra.keys import EventKeys

KEYS = EventKeys("dc")


def test_an_api_key_reads_its_tenant() -> None:
    scope = feed_scope(
        Principal(kind="key", tenant="acme"),
        KEYS,
        types="chat:turn:*",
        agent=None,
        name="n",
        tenant="other",  # ignored: a key acts for its own tenant only
    )
    assert scope.stream == KEYS.tenant("acme")
    assert scope.where == EventFilter(("chat:turn:*",), None, "n", tenant="acme")


def test_the_admin_reads_every_tenant_or_one() -> None:
    admin = Principal(kind="admin", tenant=None)
    every = feed_scope(admin, KEYS, types=None, agent=None, name=None, tenant=None)
    assert every.stream == KEYS.all and every.where == EventFilter()
    one = feed_scope(admin, KEYS, types=None, agent=None, name=None, tenant="acme")
    assert one.stream == KEYS.tenant("acme")


def test_a_token_reads_the_conversations_it_covers() -> None:
    named = Principal(kind="token", tenant="acme", agent="bot", name="c1")
    scope = feed_scope(named, KEYS, types=None, agent=None, name=None, tenant=None)
    assert scope.where == EventFilter((), "bot", "c1", tenant="acme")
    prefixed = Principal(kind="token", tenant="acme", agent="bot", prefix="user-7-")
    scope = feed_scope(prefixed, KEYS, types=None, agent=None, name=None, tenant=None)
    assert scope.where == EventFilter((), "bot", None, prefix="user-7-", tenant="acme")
    narrowed = feed_scope(prefixed, KEYS, types=None, agent="bot", name="user-7-a", tenant=None)
    assert narrowed.where.name == "user-7-a"


@pytest.mark.parametrize(
    ("principal", "agent", "name", "status"),
    [
        (Principal(kind="token", tenant="t", agent="bot", name="c1"), None, "c2", 404),
        (Principal(kind="token", tenant="t", agent="bot", name="c1"), "other", None, 404),
        (Principal(kind="token", tenant="t", agent="bot", prefix="p-"), None, "q-1", 404),
        (
            Principal(kind="token", tenant="t", agent="bot", name="c1", scopes=frozenset({"chat"})),
            None,
            None,
            403,
        ),
    ],
)
def test_a_token_is_refused_outside_its_conversations(
    principal: Principal, agent: str | None, name: str | None, status: int
) -> None:
    with pytest.raises(FeedRefusedError) as refused:
        feed_scope(principal, KEYS, types=None, agent=agent, name=name, tenant=None)
    assert refused.value.status == status
