"""A tenant's webhooks (docs/observability.md#webhooks), on every store backend: registered,
listed, found and deleted per tenant, never across tenants, and gone with their tenant."""

from __future__ import annotations

import pytest

from durachat_infra.store import StoreError, UnknownTenantError
from durachat_infra.store.port import StorePort


async def test_webhooks_are_kept_per_tenant(store: StorePort) -> None:
    await store.create_tenant("acme")
    await store.create_tenant("other")
    first = await store.add_webhook(
        "acme", "wh1", url="https://example.com/a", types=["chat:turn:*"], secret="s1"
    )
    await store.add_webhook("acme", "wh2", url="http://example.com/b", types=[], secret="s2")
    await store.add_webhook("other", "wh3", url="https://example.org", types=["x"], secret="s3")

    assert (first.id, first.tenant, first.url, first.types, first.secret) == (
        "wh1",
        "acme",
        "https://example.com/a",
        ["chat:turn:*"],
        "s1",
    )
    assert first.to_json() == {
        "id": "wh1",
        "url": "https://example.com/a",
        "types": ["chat:turn:*"],
        "created_at": first.created_at.isoformat(),
    }
    listed = await store.list_webhooks("acme")
    assert [(w.id, w.types) for w in listed] == [("wh1", ["chat:turn:*"]), ("wh2", [])]
    assert listed[0] == first
    assert await store.get_webhook("acme", "wh1") == first
    # Another tenant's webhook is not found, nor deleted.
    assert await store.get_webhook("acme", "wh3") is None
    assert await store.delete_webhook("acme", "wh3") is False
    assert [w.id for w in await store.list_webhooks("other")] == ["wh3"]

    assert await store.delete_webhook("acme", "wh1") is True
    assert await store.delete_webhook("acme", "wh1") is False
    assert [w.id for w in await store.list_webhooks("acme")] == ["wh2"]


async def test_webhook_ids_are_unique_and_need_a_tenant(store: StorePort) -> None:
    await store.create_tenant("acme")
    await store.add_webhook("acme", "wh1", url="https://a", types=[], secret="s")
    with pytest.raises(StoreError):
        await store.add_webhook("acme", "wh1", url="https://b", types=[], secret="s")
    with pytest.raises(UnknownTenantError):
        await store.add_webhook("nobody", "wh2", url="https://a", types=[], secret="s")
    assert await store.list_webhooks("nobody") == []


async def test_webhooks_go_with_their_tenant(store: StorePort) -> None:
    await store.create_tenant("acme")
    await store.add_webhook("acme", "wh1", url="https://a", types=[], secret="s")
    await store.delete_tenant("acme")
    assert await store.list_webhooks("acme") == []
    await store.create_tenant("acme")
    assert await store.get_webhook("acme", "wh1") is None
