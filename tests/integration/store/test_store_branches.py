"""Branches: listing, paths by id or name, siblings, create / rename / delete, retention along a
branch, forking into a new conversation, and the migration that keeps old conversations on main."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from alembic import command
from sqlalchemy import func, inspect, select, text

from durachat_infra.store import (
    MAIN_BRANCH,
    AmbiguousMessageError,
    BranchExistsError,
    BranchRecord,
    Conversation,
    ConversationExistsError,
    ConversationKey,
    FencedError,
    MainBranchError,
    Siblings,
    Store,
    UnknownBranchError,
    UnknownConversationError,
    UnknownMessageError,
    UnknownTenantError,
    check_branch_name,
    migrate,
    parse_branch_ref,
)
from durachat_infra.store._engine import create_engine
from durachat_infra.store._migrate import alembic_config
from durachat_infra.store.models import Message
from durachat_infra.store.port import StorePort
from support.store_backends import StoreBackend

EPOCH = 1


def msg(message_id: str, role: str = "user", text: str | None = None) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text or message_id}]}


def role_of(message_id: str) -> str:
    return "assistant" if message_id.startswith("a") else "user"


@pytest.fixture
async def conv(store: StorePort) -> Conversation:
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "branches"))
    await store.claim(conv.id, EPOCH)
    return conv


async def chain(store: StorePort, conv: Conversation, parent: int | None, *ids: str) -> list[int]:
    """Insert messages `ids` as a chain below `parent`; returns their keys."""
    async with store.transaction(conv.id, EPOCH) as tx:
        return await tx.insert_chain(parent, [msg(i, role_of(i)) for i in ids])


async def point(store: StorePort, conv: Conversation, branch: str, leaf: int | None) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.set_leaf(branch, leaf)


async def path_of(store: StorePort, conv: Conversation, branch: int | str) -> list[str] | None:
    path = await store.branch_path(conv.id, branch)
    return None if path is None else [m.message_id for m in path]


async def all_message_ids(backend: StoreBackend, conv: Conversation) -> list[str]:
    return await backend.message_ids(conv.id)


async def alternatives(
    store: StorePort, conv: Conversation, message_id: str, ref: int | str | None = None
) -> tuple[tuple[str, ...], int] | None:
    """The siblings' ids and the index, without the branches that show them."""
    found = await store.siblings(conv.id, message_id, ref)
    return None if found is None else (found.ids, found.index)


async def branch(store: StorePort, conv: Conversation, ref: int | str) -> BranchRecord:
    found = await store.get_branch(conv.id, ref)
    assert found is not None
    return found


# Reading branches.


async def test_every_conversation_lists_its_main_branch(
    store: StorePort, conv: Conversation
) -> None:
    [main] = await store.list_branches(conv.id)

    assert main.name == MAIN_BRANCH
    assert isinstance(main.id, int)
    assert (main.leaf_message_id, main.parent_branch_id, main.fork_message_id) == (None, None, None)
    assert isinstance(main.created_at, datetime) and main.created_at.tzinfo is not None
    assert await store.get_branch(conv.id, main.id) == main
    assert await store.get_branch(conv.id, MAIN_BRANCH) == main
    assert await store.branch_path(conv.id, MAIN_BRANCH) == []
    assert await store.branch_path(conv.id, main.id) == []


async def test_unknown_branches_and_conversations_read_as_none(
    store: StorePort, conv: Conversation
) -> None:
    assert await store.get_branch(conv.id, "nope") is None
    assert await store.get_branch(conv.id, 987654) is None
    assert await store.get_branch(conv.id, 2**70) is None
    assert await store.get_branch(conv.id, -3) is None
    assert await store.branch_path(conv.id, "nope") is None
    assert await store.branch_path(conv.id, 987654) is None
    assert await store.list_branches(987654) == []
    with pytest.raises(UnknownBranchError):
        await store.siblings(conv.id, "u1", "nope")


async def test_a_branch_id_of_another_conversation_is_unknown_here(
    store: StorePort, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    [other_main] = await store.list_branches(other.id)

    assert await store.get_branch(conv.id, other_main.id) is None
    assert await store.branch_path(conv.id, other_main.id) is None


async def test_the_branch_list_reports_leaves_parents_and_fork_points(
    store: StorePort, conv: Conversation
) -> None:
    u1, a1, _u2, a2 = await chain(store, conv, None, "u1", "a1", "u2", "a2")
    await point(store, conv, MAIN_BRANCH, a2)
    main = await branch(store, conv, MAIN_BRANCH)
    async with store.transaction(conv.id, EPOCH) as tx:
        alt = await tx.create_branch("alt", from_branch=main.id, fork_message_id="a1")
    [u2b, a2b] = await chain(store, conv, a1, "u2b", "a2b")
    await point(store, conv, "alt", a2b)

    listed = await store.list_branches(conv.id)

    assert [b.name for b in listed] == [MAIN_BRANCH, "alt"]
    assert listed[0].leaf_message_id == "a2"
    assert listed[1] == BranchRecord(
        id=alt.id,
        name="alt",
        leaf_message_id="a2b",
        parent_branch_id=main.id,
        fork_message_id="a1",
        created_at=alt.created_at,
        updated_at=listed[1].updated_at,
    )
    assert listed[1].updated_at >= alt.updated_at
    assert await path_of(store, conv, "alt") == ["u1", "a1", "u2b", "a2b"]
    assert await path_of(store, conv, alt.id) == ["u1", "a1", "u2b", "a2b"]
    assert await path_of(store, conv, MAIN_BRANCH) == ["u1", "a1", "u2", "a2"]
    assert [m.pk for m in await store.branch_path(conv.id, "alt") or []] == [u1, a1, u2b, a2b]


async def test_moving_a_leaf_updates_the_branch_timestamp(
    store: StorePort, conv: Conversation
) -> None:
    before = await branch(store, conv, MAIN_BRANCH)
    [u1] = await chain(store, conv, None, "u1")
    await point(store, conv, MAIN_BRANCH, u1)

    after = await branch(store, conv, MAIN_BRANCH)

    assert after.created_at == before.created_at
    assert after.updated_at > before.updated_at
    assert after.leaf_message_id == "u1"


# Siblings.


async def test_siblings_are_the_children_of_the_parent_in_sequence_order(
    store: StorePort, conv: Conversation
) -> None:
    u1, _a1 = await chain(store, conv, None, "u1", "a1")
    [_a1b] = await chain(store, conv, u1, "a1b")
    [a1c, _u2] = await chain(store, conv, u1, "a1c", "u2")
    await point(store, conv, MAIN_BRANCH, a1c)

    assert await alternatives(store, conv, "a1c") == (("a1", "a1b", "a1c"), 2)
    assert await alternatives(store, conv, "a1c", MAIN_BRANCH) == (("a1", "a1b", "a1c"), 2)
    assert await alternatives(store, conv, "u1") == (("u1",), 0)
    # a1 is on no branch's path, but its id is unique in the conversation: found by id alone.
    assert await alternatives(store, conv, "a1") == (("a1", "a1b", "a1c"), 0)
    assert await alternatives(store, conv, "a1", MAIN_BRANCH) == (("a1", "a1b", "a1c"), 0)
    assert await alternatives(store, conv, "u2") == (("u2",), 0)
    assert await store.siblings(conv.id, "missing") is None
    with pytest.raises(UnknownBranchError):
        await store.siblings(conv.id, "a1", "nope")


async def test_siblings_of_roots_and_of_a_repeated_id_follow_the_branch(
    store: StorePort, conv: Conversation
) -> None:
    # An edit of the first message with the same id: two roots called u1.
    first = await chain(store, conv, None, "u1", "a1")
    second = await chain(store, conv, None, "u1", "a1x")
    await point(store, conv, MAIN_BRANCH, first[-1])
    await point(store, conv, "edit", second[-1])
    edit = await branch(store, conv, "edit")

    assert await alternatives(store, conv, "u1", MAIN_BRANCH) == (("u1", "u1"), 0)
    assert await alternatives(store, conv, "u1", "edit") == (("u1", "u1"), 1)
    assert await alternatives(store, conv, "u1", edit.id) == (("u1", "u1"), 1)
    assert await alternatives(store, conv, "a1x", "edit") == (("a1x",), 0)
    # Ambiguous without a branch: main decides while it holds one of them.
    assert await alternatives(store, conv, "u1") == (("u1", "u1"), 0)
    await point(store, conv, MAIN_BRANCH, None)
    with pytest.raises(AmbiguousMessageError):
        await store.siblings(conv.id, "u1")
    assert await alternatives(store, conv, "u1", "edit") == (("u1", "u1"), 1)


async def test_each_sibling_says_which_branch_shows_it(
    store: StorePort, conv: Conversation
) -> None:
    u1, a1, u2 = await chain(store, conv, None, "u1", "a1", "u2")
    [a1b] = await chain(store, conv, u1, "a1b")
    [_a1c] = await chain(store, conv, u1, "a1c")  # reached by no branch
    await point(store, conv, MAIN_BRANCH, a1b)
    await point(store, conv, "old", u2)
    await point(store, conv, "older", a1)
    main, old = await branch(store, conv, MAIN_BRANCH), await branch(store, conv, "old")
    older = await branch(store, conv, "older")

    def shown(found: Siblings | None) -> list[tuple[int, str] | None]:
        assert found is not None
        return [None if s is None else (s.id, s.name) for s in found.shown_on]

    # Seen from main: a1 is on `old` and `older`; the one updated last shows it.
    found = await store.siblings(conv.id, "a1b")
    assert shown(found) == [(older.id, "older"), (main.id, "main"), None]
    assert found is not None
    assert [s.ref if s else None for s in found.shown_on] == [str(older.id), "main", None]
    # Seen from `old`, its own path shows a1.
    assert shown(await store.siblings(conv.id, "a1", "old"))[0] == (old.id, "old")
    # Roots: every branch's path holds u1.
    assert shown(await store.siblings(conv.id, "u1")) == [(main.id, "main")]
    assert shown(await store.siblings(conv.id, "u1", "old")) == [(old.id, "old")]


async def test_siblings_do_not_see_other_conversations(
    store: StorePort, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    async with store.transaction(other.id, EPOCH) as tx:
        await tx.insert_chain(None, [msg("x1")])
    [u1] = await chain(store, conv, None, "u1")
    await point(store, conv, MAIN_BRANCH, u1)

    assert await alternatives(store, conv, "u1") == (("u1",), 0)


# Creating and renaming.


async def test_create_branch_forks_at_a_message_of_the_source_branch(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    pks = await chain(store, conv, None, "u1", "a1", "u2", "a2")
    await point(store, conv, MAIN_BRANCH, pks[-1])
    main = await branch(store, conv, MAIN_BRANCH)

    async with store.transaction(conv.id, EPOCH) as tx:
        at_a1 = await tx.create_branch("at-a1", fork_message_id="a1")
        at_leaf = await tx.create_branch("at-leaf")
        nested = await tx.create_branch("nested", from_branch="at-a1", fork_message_id="u1")

    assert (at_a1.leaf_message_id, at_a1.fork_message_id) == ("a1", "a1")
    assert at_a1.parent_branch_id == main.id
    assert (at_leaf.leaf_message_id, at_leaf.fork_message_id) == ("a2", "a2")
    assert (nested.parent_branch_id, nested.fork_message_id) == (at_a1.id, "u1")
    assert await path_of(store, conv, "at-a1") == ["u1", "a1"]
    assert await path_of(store, conv, "at-leaf") == ["u1", "a1", "u2", "a2"]
    assert await path_of(store, conv, "nested") == ["u1"]
    assert await path_of(store, conv, MAIN_BRANCH) == ["u1", "a1", "u2", "a2"]
    assert len(await all_message_ids(backend, conv)) == 4


async def test_create_branch_at_root_starts_empty_above_the_first_message(
    store: StorePort, conv: Conversation
) -> None:
    pks = await chain(store, conv, None, "u1", "a1")
    await point(store, conv, MAIN_BRANCH, pks[-1])
    main = await branch(store, conv, MAIN_BRANCH)

    async with store.transaction(conv.id, EPOCH) as tx:
        edit = await tx.create_branch("edit", fork_message_id="a1", at_root=True)
        [u1b] = await tx.insert_chain(None, [msg("u1", text="edited")])
        await tx.set_leaf(edit.id, u1b)

    assert (edit.leaf_message_id, edit.fork_message_id, edit.parent_branch_id) == (
        None,
        None,
        main.id,
    )
    assert await store.transcript(conv.key, "edit") == [msg("u1", text="edited")]
    assert await alternatives(store, conv, "u1", "edit") == (("u1", "u1"), 1)
    assert await path_of(store, conv, MAIN_BRANCH) == ["u1", "a1"]


async def test_create_branch_can_keep_the_leaf_and_record_an_earlier_fork_point(
    store: StorePort, conv: Conversation
) -> None:
    # What an edit or a regenerate does before it rewinds the branch: keep the path it replaces.
    pks = await chain(store, conv, None, "u1", "a1", "u2", "a2")
    await point(store, conv, MAIN_BRANCH, pks[-1])
    main = await branch(store, conv, MAIN_BRANCH)

    async with store.transaction(conv.id, EPOCH) as tx:
        kept = await tx.create_branch("kept", fork_message_id="a1", keep_leaf=True)
        whole = await tx.create_branch("whole", fork_message_id="a1", at_root=True, keep_leaf=True)
        await tx.set_leaf(MAIN_BRANCH, pks[1])

    assert (kept.leaf_message_id, kept.fork_message_id, kept.parent_branch_id) == (
        "a2",
        "a1",
        main.id,
    )
    assert (whole.leaf_message_id, whole.fork_message_id) == ("a2", None)
    assert await path_of(store, conv, "kept") == ["u1", "a1", "u2", "a2"]
    assert await path_of(store, conv, MAIN_BRANCH) == ["u1", "a1"]


async def test_create_branch_from_an_empty_branch_is_empty(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        created = await tx.create_branch("blank")

    assert created.leaf_message_id is None and created.fork_message_id is None
    assert await store.branch_path(conv.id, "blank") == []


async def test_create_branch_refuses_taken_names_unknown_sources_and_foreign_messages(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    u1, a1 = await chain(store, conv, None, "u1", "a1")
    await chain(store, conv, u1, "a1b")  # in the tree, off main's path
    await point(store, conv, MAIN_BRANCH, a1)
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.create_branch("alt")

    for name in ("alt", MAIN_BRANCH):
        with pytest.raises(BranchExistsError, match=name):
            async with store.transaction(conv.id, EPOCH) as tx:
                await tx.create_branch(name)
    with pytest.raises(UnknownBranchError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch("x", from_branch="nope")
    with pytest.raises(UnknownBranchError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch("x", from_branch=987654)
    with pytest.raises(UnknownMessageError, match="a1b"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch("x", fork_message_id="a1b")

    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH, "alt"]
    assert await all_message_ids(backend, conv) == ["u1", "a1", "a1b"]


@pytest.mark.parametrize(
    "bad", ["", "12", "0", " lead", "trail ", "tab\tname", "x" * 201, "new\nline"]
)
async def test_branch_names_are_validated(store: StorePort, conv: Conversation, bad: str) -> None:
    with pytest.raises(ValueError):
        check_branch_name(bad)
    with pytest.raises(ValueError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch(bad)
    assert len(await store.list_branches(conv.id)) == 1


def test_branch_references_read_digits_as_ids() -> None:
    assert parse_branch_ref("12") == 12
    assert parse_branch_ref("main") == "main"
    assert parse_branch_ref("v2") == "v2"
    assert parse_branch_ref("-1") == "-1"
    assert parse_branch_ref("9223372036854775807") == 2**63 - 1
    assert parse_branch_ref("9223372036854775808") == "9223372036854775808"
    assert parse_branch_ref("1" * 40) == "1" * 40
    check_branch_name("v2 draft")
    check_branch_name("ünïcode ✓")


async def test_branch_writes_are_fenced(store: StorePort, conv: Conversation) -> None:
    await store.claim(conv.id, EPOCH + 1)

    with pytest.raises(FencedError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch("late")

    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH]


async def test_rename_branch_by_id_or_name(store: StorePort, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        created = await tx.create_branch("draft")
    async with store.transaction(conv.id, EPOCH) as tx:
        renamed = await tx.rename_branch(created.id, "final")
    async with store.transaction(conv.id, EPOCH) as tx:
        again = await tx.rename_branch("final", "final")
        by_name = await tx.rename_branch("final", "final v2")

    assert (renamed.id, renamed.name) == (created.id, "final")
    assert renamed.updated_at >= created.updated_at
    assert again.name == "final"
    assert (by_name.id, by_name.name) == (created.id, "final v2")
    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH, "final v2"]


async def test_rename_branch_refuses_main_taken_names_and_unknown_branches(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.create_branch("one")
        await tx.create_branch("two")

    with pytest.raises(MainBranchError, match="renamed"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.rename_branch(MAIN_BRANCH, "trunk")
    for taken in ("two", MAIN_BRANCH):
        with pytest.raises(BranchExistsError):
            async with store.transaction(conv.id, EPOCH) as tx:
                await tx.rename_branch("one", taken)
    with pytest.raises(UnknownBranchError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.rename_branch("nope", "three")

    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH, "one", "two"]


# Deleting and retention.


async def test_delete_branch_keeps_the_messages_other_branches_reach(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    #   u1 - a1 - u2 - a2            main
    #          \- u2b - a2b - u3b    alt (forked at a1)
    #                    \- u3c      side (forked from alt at a2b)
    _u1, a1, _u2, a2 = await chain(store, conv, None, "u1", "a1", "u2", "a2")
    await point(store, conv, MAIN_BRANCH, a2)
    async with store.transaction(conv.id, EPOCH) as tx:
        alt = await tx.create_branch("alt", fork_message_id="a1")
    _u2b, a2b, u3b = await chain(store, conv, a1, "u2b", "a2b", "u3b")
    [u3c] = await chain(store, conv, a2b, "u3c")
    await point(store, conv, "alt", u3b)
    async with store.transaction(conv.id, EPOCH) as tx:
        side = await tx.create_branch("side", from_branch="alt", fork_message_id="a2b")
        await tx.set_leaf("side", u3c)

    async with store.transaction(conv.id, EPOCH) as tx:
        deleted = await tx.delete_branch(alt.id)

    # u3b was only on alt; u2b and a2b stay on side's path.
    assert deleted == 1
    assert await all_message_ids(backend, conv) == ["u1", "a1", "u2", "a2", "u2b", "a2b", "u3c"]
    assert await path_of(store, conv, "side") == ["u1", "a1", "u2b", "a2b", "u3c"]
    assert await path_of(store, conv, MAIN_BRANCH) == ["u1", "a1", "u2", "a2"]
    main = await branch(store, conv, MAIN_BRANCH)
    # side's parent was alt: it now descends from alt's parent.
    assert (await branch(store, conv, side.id)).parent_branch_id == main.id
    assert await store.get_branch(conv.id, alt.id) is None

    async with store.transaction(conv.id, EPOCH) as tx:
        deleted = await tx.delete_branch("side")

    assert deleted == 3
    assert await all_message_ids(backend, conv) == ["u1", "a1", "u2", "a2"]
    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH]


async def test_delete_branch_takes_the_alternatives_abandoned_on_it_but_no_others(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    #   u1 - a1  (regenerated away on main, reached by no branch)
    #     \- a1b                      main
    #     \- a1c - u2 - a2            alt
    #                \- a2x           (regenerated away on alt)
    u1, _a1 = await chain(store, conv, None, "u1", "a1")
    [a1b] = await chain(store, conv, u1, "a1b")
    await point(store, conv, MAIN_BRANCH, a1b)
    _a1c, u2, _a2 = await chain(store, conv, u1, "a1c", "u2", "a2x")
    [a2] = await chain(store, conv, u2, "a2")
    await point(store, conv, "alt", a2)

    async with store.transaction(conv.id, EPOCH) as tx:
        deleted = await tx.delete_branch("alt")

    assert deleted == 4
    assert await all_message_ids(backend, conv) == ["u1", "a1", "a1b"]
    assert await alternatives(store, conv, "a1b") == (("a1", "a1b"), 1)


async def test_deleting_a_branch_inside_another_deletes_no_message(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    pks = await chain(store, conv, None, "u1", "a1", "u2")
    await point(store, conv, MAIN_BRANCH, pks[-1])
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.create_branch("prefix", fork_message_id="a1")
        await tx.create_branch("blank", from_branch="prefix")
        await tx.set_leaf("blank", None)

    async with store.transaction(conv.id, EPOCH) as tx:
        assert await tx.delete_branch("prefix") == 0
        assert await tx.delete_branch("blank") == 0

    assert await all_message_ids(backend, conv) == ["u1", "a1", "u2"]


async def test_delete_branch_refuses_main_and_unknown_branches(
    store: StorePort, conv: Conversation
) -> None:
    [u1] = await chain(store, conv, None, "u1")
    await point(store, conv, MAIN_BRANCH, u1)
    main = await branch(store, conv, MAIN_BRANCH)

    for ref in (MAIN_BRANCH, main.id):
        with pytest.raises(MainBranchError, match="deleted"):
            async with store.transaction(conv.id, EPOCH) as tx:
                await tx.delete_branch(ref)
    with pytest.raises(UnknownBranchError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.delete_branch("nope")

    assert await path_of(store, conv, MAIN_BRANCH) == ["u1"]


async def test_a_failed_branch_operation_rolls_back_the_whole_transaction(
    store: StorePort, conv: Conversation
) -> None:
    with pytest.raises(BranchExistsError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.create_branch("fresh")
            await tx.create_branch("fresh")

    assert [b.name for b in await store.list_branches(conv.id)] == [MAIN_BRANCH]


async def test_trim_path_keeps_the_newest_messages_of_a_branch(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    #   m0 - m1 - m2 - m3 - m4 - m5     main
    #             \- x3 - x4            other (forked at m2)
    #        \- y2                      (abandoned below m1)
    pks = await chain(store, conv, None, *(f"m{i}" for i in range(6)))
    await point(store, conv, MAIN_BRANCH, pks[-1])
    x = await chain(store, conv, pks[2], "x3", "x4")
    await point(store, conv, "other", x[-1])
    await chain(store, conv, pks[1], "y2")

    async with store.transaction(conv.id, EPOCH) as tx:
        assert await tx.trim_path(MAIN_BRANCH, 6) == 0
        assert await tx.trim_path(MAIN_BRANCH, 2) == 1

    # main keeps m4, m5; m0..m2 stay as other's history, y2 stays where it was; m3 goes.
    assert await path_of(store, conv, MAIN_BRANCH) == ["m4", "m5"]
    assert await path_of(store, conv, "other") == ["m0", "m1", "m2", "x3", "x4"]
    assert await all_message_ids(backend, conv) == ["m0", "m1", "m2", "m4", "m5", "x3", "x4", "y2"]


async def test_trim_path_deletes_what_no_branch_reaches_with_what_hangs_below(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    pks = await chain(store, conv, None, *(f"m{i}" for i in range(6)))
    await point(store, conv, MAIN_BRANCH, pks[-1])
    await chain(store, conv, pks[1], "y2", "y3")  # abandoned alternatives in the cut part
    [z5] = await chain(store, conv, pks[4], "z5")  # an alternative in the kept part
    await point(store, conv, "late", z5)

    async with store.transaction(conv.id, EPOCH) as tx:
        deleted = await tx.trim_path(MAIN_BRANCH, 3)

    assert deleted == 5  # m0, m1, m2, y2, y3
    assert await path_of(store, conv, MAIN_BRANCH) == ["m3", "m4", "m5"]
    # A branch through the new root is cut with it.
    assert await path_of(store, conv, "late") == ["m3", "m4", "z5"]
    assert await all_message_ids(backend, conv) == ["m3", "m4", "m5", "z5"]
    with pytest.raises(ValueError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.trim_path(MAIN_BRANCH, 0)


# Forking into a new conversation.


async def test_fork_conversation_copies_a_branch_into_a_new_main(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    _u1, a1, _u2, a2 = await chain(store, conv, None, "u1", "a1", "u2", "a2")
    await point(store, conv, MAIN_BRANCH, a2)
    [u2b] = await chain(store, conv, a1, "u2b")
    await point(store, conv, "alt", u2b)
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_request_context({"model": "m"}, None)
    alt = await branch(store, conv, "alt")
    target = ConversationKey("default", "agent", "forked")

    forked = await store.fork_conversation(conv.key, alt.id, target)

    assert forked.key == target and forked.epoch == 0 and forked.id != conv.id
    assert await store.find_conversation(target) == forked
    path = await store.load_path(forked.id)
    assert [m.message_id for m in path] == ["u1", "a1", "u2b"]
    assert [m.message for m in path] == [msg("u1"), msg("a1", "assistant"), msg("u2b")]
    assert [m.seq for m in path] == [0, 1, 2]
    assert [m.parent_pk for m in path] == [None, path[0].pk, path[1].pk]
    assert await store.transcript(target) == [m.message for m in path]
    [main] = await store.list_branches(forked.id)
    assert (main.name, main.leaf_message_id, main.parent_branch_id) == (MAIN_BRANCH, "u2b", None)
    assert await store.load_request_context(forked.id) == (None, None)
    # The source is unchanged; the fork continues its own sequence.
    assert await path_of(store, conv, "alt") == ["u1", "a1", "u2b"]
    assert len(await all_message_ids(backend, conv)) == 5
    await store.claim(forked.id, EPOCH)
    async with store.transaction(forked.id, EPOCH) as tx:
        [a2b] = await tx.insert_chain(path[-1].pk, [msg("a2b", "assistant")])
        await tx.set_leaf(MAIN_BRANCH, a2b)
    assert [m.seq for m in await store.load_path(forked.id)] == [0, 1, 2, 3]


async def test_fork_conversation_of_main_by_name_and_of_an_empty_branch(
    store: StorePort, conv: Conversation
) -> None:
    pks = await chain(store, conv, None, "u1", "a1")
    await point(store, conv, MAIN_BRANCH, pks[-1])
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.create_branch("blank")
        await tx.set_leaf("blank", None)

    copy = await store.fork_conversation(
        conv.key, MAIN_BRANCH, ConversationKey("default", "b", "x")
    )
    empty = await store.fork_conversation(conv.key, "blank", ConversationKey("default", "b", "y"))

    assert await store.transcript(copy.key) == [msg("u1"), msg("a1", "assistant")]
    assert await store.load_path(empty.id) == []
    assert [b.name for b in await store.list_branches(empty.id)] == [MAIN_BRANCH]


async def test_fork_conversation_refuses_existing_targets_and_unknown_sources(
    store: StorePort, conv: Conversation
) -> None:
    [u1] = await chain(store, conv, None, "u1")
    await point(store, conv, MAIN_BRANCH, u1)
    existing = await store.get_or_create_conversation(ConversationKey("default", "agent", "taken"))

    with pytest.raises(ConversationExistsError):
        await store.fork_conversation(conv.key, MAIN_BRANCH, existing.key)
    with pytest.raises(ConversationExistsError):
        await store.fork_conversation(conv.key, MAIN_BRANCH, conv.key)
    with pytest.raises(UnknownConversationError):
        await store.fork_conversation(
            ConversationKey("default", "agent", "ghost"),
            MAIN_BRANCH,
            ConversationKey("default", "a", "n"),
        )
    with pytest.raises(UnknownBranchError):
        await store.fork_conversation(conv.key, "nope", ConversationKey("default", "a", "n"))
    with pytest.raises(UnknownTenantError):
        await store.fork_conversation(conv.key, MAIN_BRANCH, ConversationKey("acme", "a", "n"))

    assert await store.load_path(existing.id) == []
    assert await store.find_conversation(ConversationKey("default", "a", "n")) is None


# Migration.


async def test_migration_keeps_existing_conversations_on_main(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    await asyncio.to_thread(command.upgrade, config, "0003")
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as conn:
            # As 0003 left them: one conversation with main and an alternative, one whose main
            # row is missing.
            for cid, name in ((1, "kept"), (2, "orphan")):
                await conn.execute(
                    text(
                        "INSERT INTO conversations (id, tenant_id, agent, name, next_seq)"
                        " VALUES (:id, 'default', 'agent', :name, 3)"
                    ),
                    {"id": cid, "name": name},
                )
            rows = [
                (1, 1, "u1", None, 0),
                (2, 1, "a1", 1, 1),
                (3, 1, "a1b", 1, 2),
                (4, 2, "o1", None, 0),
                (5, 2, "o2", 4, 1),
            ]
            for pk, cid, mid, parent, seq in rows:
                await conn.execute(
                    text(
                        "INSERT INTO messages (id, conversation_id, message_id, parent_id, seq,"
                        " role, body) VALUES (:pk, :cid, :mid, :parent, :seq, 'user', :body)"
                    ),
                    {
                        "pk": pk,
                        "cid": cid,
                        "mid": mid,
                        "parent": parent,
                        "seq": seq,
                        "body": f'{{"id":"{mid}","role":"user","parts":[]}}',
                    },
                )
            await conn.execute(
                text(
                    "INSERT INTO branches (conversation_id, name, leaf_id) VALUES"
                    " (1, 'main', 3), (1, 'old', 2)"
                )
            )
    finally:
        await engine.dispose()

    await migrate(empty_database_url)

    async with Store.from_url(empty_database_url) as store:
        kept = await store.find_conversation(ConversationKey("default", "agent", "kept"))
        orphan = await store.find_conversation(ConversationKey("default", "agent", "orphan"))
        assert kept is not None and orphan is not None
        assert [m.message_id for m in await store.load_path(kept.id)] == ["u1", "a1b"]
        assert [b.name for b in await store.list_branches(kept.id)] == [MAIN_BRANCH, "old"]
        assert await path_of(store, kept, "old") == ["u1", "a1"]
        found = await store.siblings(kept.id, "a1b")
        assert found is not None and (found.ids, found.index) == (("a1", "a1b"), 1)
        [main] = await store.list_branches(orphan.id)
        assert (main.name, main.leaf_message_id) == (MAIN_BRANCH, "o2")
        assert await path_of(store, orphan, MAIN_BRANCH) == ["o1", "o2"]
        async with store.engine.connect() as conn:
            indexes = await conn.run_sync(lambda c: inspect(c).get_indexes("messages"))
            count = await conn.scalar(select(func.count()).select_from(Message))
        assert "ix_messages_conversation_id_parent_id_seq" in {i["name"] for i in indexes}
        assert count == 5


async def test_fork_conversation_copies_a_long_path_in_order(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    ids = [f"{'u' if i % 2 == 0 else 'a'}{i}" for i in range(600)]
    pks = await chain(store, conv, None, *ids[:400])
    await chain(store, conv, pks[199], "a199x")  # an alternative: not copied
    tail = await chain(store, conv, pks[-1], *ids[400:])
    await point(store, conv, MAIN_BRANCH, tail[-1])

    forked = await store.fork_conversation(
        conv.key, MAIN_BRANCH, ConversationKey("default", "agent", "long-fork")
    )

    path = await store.load_path(forked.id)
    assert [m.message_id for m in path] == ids
    assert [m.seq for m in path] == list(range(600))
    assert await all_message_ids(backend, forked) == ids
