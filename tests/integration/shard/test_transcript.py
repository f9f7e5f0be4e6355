"""The shard's transcript rules on a real SQLite store: the tree keeps everything, the path is
what the client sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from durachat_infra.store import ConversationKey, FencedError, Store, migrate
from durachat_shard.transcript import Change, Fork, Transcript


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


async def _persist(o: Owned, incoming: list[dict[str, object]]) -> None:
    _, change = o.t.persist(incoming)
    await o.apply(change)


def fork_of(
    o: Owned, incoming: list[dict[str, object]], *, inflight: dict[str, object] | None
) -> Fork | None:
    return o.t.fork_of(o.t.reconcile(incoming), inflight=inflight)


async def _reply(o: Owned, message: dict[str, object], *, anchor: str) -> None:
    await o.apply(o.t.put_reply(message, anchor=anchor))


async def _reloaded(store: Store) -> list[str]:
    return [str(m["id"]) for m in await store.transcript(ConversationKey("default", "a", "c"))]


async def test_append_and_reply(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "hi")])
    await _reply(t, msg("a1", "assistant", "hello"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "hi"), msg("a1", "assistant", "hello"), msg("u2", "user", "more")],
    )
    assert await _reloaded(store) == ["u1", "a1", "u2"]


async def test_a_truncated_transcript_forks_and_changes_nothing(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "hi")])
    await _reply(t, msg("a1", "assistant", "first"), anchor="u1")
    assert fork_of(t, [msg("u1", "user", "hi")], inflight=None) == Fork(1, "regenerate")
    assert [m["id"] for m in t.messages] == ["u1", "a1"]
    assert await _reloaded(store) == ["u1", "a1"]


async def test_a_reply_still_streaming_counts_as_on_the_path(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "hi")])
    streaming = msg("a1", "assistant", "par")
    assert fork_of(t, [msg("u1", "user", "hi")], inflight=streaming) == Fork(1, "regenerate")
    # A send that crossed the streaming reply (the client has not seen it yet) appends.
    sent = [msg("u1", "user", "hi"), msg("u2", "user", "more")]
    assert fork_of(t, sent, inflight=streaming) is None
    # A continuation streams into the last message: it is not a message of its own.
    await _reply(t, streaming, anchor="u1")
    regenerate = [msg("u1", "user", "hi")]
    assert fork_of(t, regenerate, inflight=msg("a1", "assistant", "partial")) == Fork(
        1, "regenerate"
    )
    same = [msg("u1", "user", "hi"), msg("a1", "assistant", "par")]
    assert fork_of(t, same, inflight=msg("a1", "assistant", "partial")) is None


async def test_edits_fork_at_the_edited_message(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one"), msg("a1", "assistant", "r1")])
    await _persist(
        t, [msg("u1", "user", "one"), msg("a1", "assistant", "r1"), msg("u2", "user", "two")]
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    kept = [msg("u1", "user", "one"), msg("a1", "assistant", "r1")]
    # The same id with other content (the AI SDK's sendMessage({text, messageId})).
    assert fork_of(t, [*kept, msg("u2", "user", "TWO")], inflight=None) == Fork(2, "edit")
    # A new id where the path has another user message.
    assert fork_of(t, [*kept, msg("u2b", "user", "two")], inflight=None) == Fork(2, "edit")
    # The first message edited in place forks at the root.
    assert fork_of(t, [msg("u1", "user", "ONE")], inflight=None) == Fork(0, "edit")
    # Unchanged user messages and new messages after the path fork nothing.
    whole = [*kept, msg("u2", "user", "two"), msg("a2", "assistant", "r2")]
    assert fork_of(t, [*whole, msg("u3", "user", "three")], inflight=None) is None
    # A client that sends only its new message appends, as with the reference.
    assert fork_of(t, [msg("u3", "user", "three")], inflight=None) is None
    # An assistant message whose tool state changed is an update, never an edit.
    assert fork_of(t, [*kept[:1], msg("a1", "assistant", "other")], inflight=None) == Fork(
        2, "regenerate"
    )
    assert (
        fork_of(t, [*kept[:1], msg("a1", "assistant", "other"), *whole[2:]], inflight=None) is None
    )
    assert await _reloaded(store) == ["u1", "a1", "u2", "a2"]


async def test_a_request_with_new_messages_appends_like_the_reference(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")])
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1", "assistant", "r1"), msg("u2", "user", "two")],
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    await _persist(t, [msg("u3", "user", "three")])
    assert await _reloaded(store) == ["u1", "a1", "u2", "a2", "u3"]


async def test_sync_without_truncation_only_updates_and_appends(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one"), msg("u2", "user", "two")])
    await _persist(t, [msg("u3", "user", "three")])
    assert await _reloaded(store) == ["u1", "u2", "u3"]
    await _persist(t, [msg("u2", "user", "two edited")])
    reloaded = await _transcript(store)
    assert reloaded.messages[1]["parts"] == [{"type": "text", "text": "two edited"}]


async def test_reply_to_an_earlier_message_is_spliced_after_it(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")])
    # A second send arrives while the first reply still streams and without its placeholder.
    await _persist(t, [msg("u1", "user", "one"), msg("u2", "user", "two")])
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    assert [m["id"] for m in t.messages] == ["u1", "a1", "u2", "a2"]
    assert await _reloaded(store) == ["u1", "a1", "u2", "a2"]


async def test_an_empty_placeholder_never_wipes_a_stored_reply(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")])
    await _reply(t, msg("a1", "assistant", "full reply"), anchor="u1")
    placeholder: dict[str, object] = {"id": "a1", "role": "assistant", "parts": []}
    await _persist(t, [msg("u1", "user", "one"), placeholder, msg("u2", "user", "two")])
    reloaded = await _transcript(store)
    assert reloaded.messages[1]["parts"] == [{"type": "text", "text": "full reply"}]


async def test_a_former_owner_is_fenced_and_nothing_applies(store: Store) -> None:
    old = await _transcript(store, epoch=1)
    await _persist(old, [msg("u1", "user", "one")])
    new = await _transcript(store, epoch=2)
    with pytest.raises(FencedError):
        await _reply(old, msg("a1", "assistant", "zombie"), anchor="u1")
    await _reply(new, msg("a2", "assistant", "owner"), anchor="u1")
    assert await _reloaded(store) == ["u1", "a2"]


async def test_trim_keeps_the_newest_and_deletes_the_rest(store: Store) -> None:
    t = await _transcript(store)
    await _persist(t, [msg("u1", "user", "one")])
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    # A regenerated reply leaves the first one off the path, in the tree.
    await _persist(t, [msg("u1", "user", "one")])
    await _reply(t, msg("a1b", "assistant", "r1 again"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1b", "assistant", "r1 again"), msg("u2", "user", "two")],
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
    await _persist(t, [msg("u1", "user", "one")])
    await _reply(t, msg("a1", "assistant", "r1"), anchor="u1")
    await _persist(
        t,
        [msg("u1", "user", "one"), msg("a1", "assistant", "r1"), msg("u2", "user", "two")],
    )
    await _reply(t, msg("a2", "assistant", "r2"), anchor="u2")
    async with store.transaction(t.conversation_id, t.epoch) as tx:
        await tx.create_branch("earlier", fork_message_id="a1")
    await t.apply(t.t.trim(2))
    assert await _reloaded(store) == ["u2", "a2"]
    kept = await store.branch_path(t.conversation_id, "earlier")
    assert kept is not None
    assert [m.message_id for m in kept] == ["u1", "a1"]
