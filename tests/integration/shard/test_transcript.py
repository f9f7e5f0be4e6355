"""The shard's transcript rules on a real SQLite store: the tree keeps everything, the path is
what the client sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from durachat_infra.store import ConversationKey, FencedError, Store, migrate
from durachat_shard.transcript import Change, Transcript


def msg(message_id: str, role: str, text: str) -> dict[str, object]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(url)
    store = Store.from_url(url)
    yield store
    await store.close()


class Owned:
    """A transcript with its owner's fenced writes, applied in order as the shard does."""

    def __init__(self, store: Store, conversation_id: int, epoch: int, t: Transcript) -> None:
        self.store, self.conversation_id, self.epoch, self.t = store, conversation_id, epoch, t

    @property
    def messages(self) -> list[dict[str, object]]:
        return self.t.messages

    async def apply(self, change: Change) -> None:
        async with self.store.transaction(self.conversation_id, self.epoch) as tx:
            await change.apply(tx)


async def _transcript(store: Store, epoch: int = 1) -> Owned:
    conversation = await store.get_or_create_conversation(ConversationKey("default", "a", "c"))
    await store.claim(conversation.id, epoch)
    stored = await store.load_path(conversation.id)
    return Owned(store, conversation.id, epoch, Transcript([(m.pk, m.message) for m in stored]))


async def _persist(o: Owned, incoming: list[dict[str, object]], *, truncate: bool) -> None:
    _, change = o.t.persist(incoming, truncate=truncate)
    await o.apply(change)


async def _reply(o: Owned, message: dict[str, object], *, anchor: str) -> None:
    await o.apply(o.t.put_reply(message, anchor=anchor))


async def _reloaded(store: Store) -> list[str]:
    return [str(m["id"]) for m in await store.transcript(ConversationKey("default", "a", "c"))]


async def test_append_and_reply(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "hi")], truncate=True)
    await _reply(t, msg("a1", "assistant", "hello"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "hi"), msg("a1", "assistant", "hello"), msg("u2", "user", "more")],
        truncate=True,
    )
    assert await _reloaded(store) == ["u1", "a1", "u2"]


async def test_regenerate_moves_the_leaf_back_without_deleting(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "hi")], truncate=True)
    await _reply(t, msg("a1", "assistant", "first"), anchor="u1")
    await _persist(t, [msg("u1", "user", "hi")], truncate=True)
    assert [m["id"] for m in t.messages] == ["u1"]
    await _reply(t, msg("a2", "assistant", "second"), anchor="u1")
    assert await _reloaded(store) == ["u1", "a2"]


async def test_a_request_with_new_messages_appends_like_the_reference(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1", "assistant", "r1"), msg("u2", "user", "two")],
        truncate=True,
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    await _persist(t, [msg("u3", "user", "three")], truncate=True)
    assert await _reloaded(store) == ["u1", "a1", "u2", "a2", "u3"]


async def test_sync_without_truncation_only_updates_and_appends(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one"), msg("u2", "user", "two")], truncate=False)
    await _persist(t, [msg("u3", "user", "three")], truncate=False)
    assert await _reloaded(store) == ["u1", "u2", "u3"]
    await _persist(t, [msg("u2", "user", "two edited")], truncate=False)
    reloaded = await _transcript(store)
    assert reloaded.messages[1]["parts"] == [{"type": "text", "text": "two edited"}]


async def test_reply_to_an_earlier_message_is_spliced_after_it(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    # A second send arrives while the first reply still streams and without its placeholder.
    await _persist(t, [msg("u1", "user", "one"), msg("u2", "user", "two")], truncate=True)
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    assert [m["id"] for m in t.messages] == ["u1", "a1", "u2", "a2"]
    assert await _reloaded(store) == ["u1", "a1", "u2", "a2"]


async def test_an_empty_placeholder_never_wipes_a_stored_reply(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    await _reply(t, msg("a1", "assistant", "full reply"), anchor="u1")
    placeholder = {"id": "a1", "role": "assistant", "parts": []}
    await _persist(
        t, [msg("u1", "user", "one"), placeholder, msg("u2", "user", "two")], truncate=True
    )
    reloaded = await _transcript(store)
    assert reloaded.messages[1]["parts"] == [{"type": "text", "text": "full reply"}]


async def test_a_former_owner_is_fenced_and_nothing_applies(store: Store) -> None:
    old = await _transcript(store, epoch=1)
    await _persist(old, [msg("u1", "user", "one")], truncate=True)
    new = await _transcript(store, epoch=2)
    with pytest.raises(FencedError):
        await _reply(old, msg("a1", "assistant", "zombie"), anchor="u1")
    await _reply(new, msg("a2", "assistant", "owner"), anchor="u1")
    assert await _reloaded(store) == ["u1", "a2"]


async def test_trim_keeps_the_newest_and_deletes_the_rest(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    # A regenerated reply leaves the first one off the path, in the tree.
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    await _reply(t, msg("a1b", "assistant", "r1 again"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1b", "assistant", "r1 again"), msg("u2", "user", "two")],
        truncate=True,
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    await t.apply(t.t.trim(2))
    assert await _reloaded(store) == ["u2", "a2"]
    conversation = await store.find_conversation(ConversationKey("default", "a", "c"))
    assert conversation is not None
    stored = await store.load_path(conversation.id)
    assert stored[0].parent_pk is None
    # Nothing else is left in the tree.
    async with store.engine.connect() as conn:
        count = await conn.execute(text("SELECT COUNT(*) FROM messages"))
        assert count.scalar_one() == 2


async def test_trim_keeps_what_another_branch_reaches(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")], truncate=True)
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1", "assistant", "r1"), msg("u2", "user", "two")],
        truncate=True,
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    async with store.transaction(t.conversation_id, t.epoch) as tx:
        await tx.create_branch("earlier", fork_message_id="a1")
    await t.apply(t.t.trim(2))
    assert await _reloaded(store) == ["u2", "a2"]
    kept = await store.branch_path(t.conversation_id, "earlier")
    assert kept is not None
    assert [m.message_id for m in kept] == ["u1", "a1"]
