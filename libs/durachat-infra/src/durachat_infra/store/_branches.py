"""Queries on branches and the message tree, shared by `Store` (reads) and
`FencedTransaction` (writes).

Every query is scoped to one conversation. Paths are walked with recursive CTEs that follow
`parent_id` one primary-key lookup at a time, so their cost follows the length of a path, not the
size of the conversation; children are found through the `(conversation_id, parent_id, seq)`
index.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy import (
    CTE,
    Integer,
    Row,
    Select,
    delete,
    false,
    literal,
    literal_column,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnElement

from durachat.protocol import MAIN_BRANCH, BranchRef
from durachat_infra.store._records import MAX_BRANCH_ID, BranchRecord, ShownOn, Siblings
from durachat_infra.store.errors import AmbiguousMessageError, UnknownBranchError
from durachat_infra.store.models import Branch, Message

AnyRow: TypeAlias = Row[*tuple[Any, ...]]


def branch_where(conversation_id: int, branch: BranchRef) -> list[ColumnElement[bool]]:
    """The conditions selecting one branch of a conversation by id or name."""
    if isinstance(branch, bool) or not isinstance(branch, int | str):
        raise TypeError(f"a branch is named by its id (int) or name (str), not {branch!r}")
    by: ColumnElement[bool]
    if isinstance(branch, str):
        by = Branch.name == branch
    elif 0 <= branch <= MAX_BRANCH_ID:
        by = Branch.id == branch
    else:
        by = false()  # no such key; PostgreSQL would reject the out-of-range number
    return [Branch.conversation_id == conversation_id, by]


def _records_query() -> Select[*tuple[Any, ...]]:
    leaf = aliased(Message)
    fork = aliased(Message)
    return (
        select(
            Branch.id,
            Branch.name,
            leaf.message_id.label("leaf_message_id"),
            Branch.parent_branch_id,
            fork.message_id.label("fork_message_id"),
            Branch.created_at,
            Branch.updated_at,
        )
        .outerjoin(leaf, leaf.id == Branch.leaf_id)
        .outerjoin(fork, fork.id == Branch.fork_message_id)
    )


def _record(row: AnyRow) -> BranchRecord:
    return BranchRecord(
        id=row.id,
        name=row.name,
        leaf_message_id=row.leaf_message_id,
        parent_branch_id=row.parent_branch_id,
        fork_message_id=row.fork_message_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def list_records(conn: AsyncConnection, conversation_id: int) -> list[BranchRecord]:
    """Every branch of the conversation, oldest first (`main` comes first)."""
    rows = await conn.execute(
        _records_query().where(Branch.conversation_id == conversation_id).order_by(Branch.id)
    )
    return [_record(row) for row in rows]


async def get_record(
    conn: AsyncConnection, conversation_id: int, branch: BranchRef
) -> BranchRecord | None:
    """One branch, or `None`."""
    row = (
        await conn.execute(_records_query().where(*branch_where(conversation_id, branch)))
    ).first()
    return None if row is None else _record(row)


async def resolve(conn: AsyncConnection, conversation_id: int, branch: BranchRef) -> AnyRow | None:
    """The branch's row (`id`, `name`, `leaf_id`, `parent_branch_id`), or `None`."""
    return (
        await conn.execute(
            select(Branch.id, Branch.name, Branch.leaf_id, Branch.parent_branch_id).where(
                *branch_where(conversation_id, branch)
            )
        )
    ).first()


def up_from(start: ColumnElement[Any], name: str) -> CTE:
    """A recursive CTE `(id, parent_id, depth)`: the row `start` (depth 0) and its ancestors."""
    up = (
        select(
            Message.id.label("id"),
            Message.parent_id.label("parent_id"),
            literal_column("0", Integer).label("depth"),
        )
        .where(Message.id == start)
        .cte(name, recursive=True)
    )
    parent = aliased(Message)
    return up.union_all(
        select(parent.id, parent.parent_id, up.c.depth + 1).where(parent.id == up.c.parent_id)
    )


async def path_ids(conn: AsyncConnection, leaf_pk: int | None) -> list[int]:
    """The keys of the rows from the root down to `leaf_pk` (`[]` for `None`)."""
    if leaf_pk is None:
        return []
    up = up_from(literal(leaf_pk), "path_ids")
    rows = (await conn.execute(select(up.c.id, up.c.depth))).all()
    return [row.id for row in sorted(rows, key=lambda row: row.depth, reverse=True)]


async def occurrence(
    conn: AsyncConnection, leaf_pk: int | None, message_id: str
) -> tuple[int, int | None] | None:
    """`(pk, parent pk)` of the message `message_id` on the path ending at `leaf_pk` (the one
    nearest the leaf if the id occurs twice), or `None` if it is not on that path."""
    if leaf_pk is None:
        return None
    up = up_from(literal(leaf_pk), "on_path")
    row = (
        await conn.execute(
            select(up.c.id, up.c.parent_id)
            .join(Message, Message.id == up.c.id)
            .where(Message.message_id == message_id)
            .order_by(up.c.depth)
            .limit(1)
        )
    ).first()
    return None if row is None else (row.id, row.parent_id)


async def find_siblings(
    conn: AsyncConnection, conversation_id: int, message_id: str, branch: BranchRef | None
) -> Siblings | None:
    """The siblings of a message and the branches that show them (`Store.siblings`).

    The message is the occurrence on `branch`'s path nearest its leaf; failing that (or with no
    branch), the only message with that id in the conversation. An id that occurs more than
    once is looked for on `main` when no branch is named.
    """
    viewer = None
    spot = None
    if branch is not None:
        viewer = await resolve(conn, conversation_id, branch)
        if viewer is None:
            raise UnknownBranchError(conversation_id, branch)
        spot = await occurrence(conn, viewer.leaf_id, message_id)
    if spot is None:
        rows = (
            await conn.execute(
                select(Message.id, Message.parent_id)
                .where(Message.conversation_id == conversation_id, Message.message_id == message_id)
                .limit(2)
            )
        ).all()
        if len(rows) == 1:
            spot = (rows[0].id, rows[0].parent_id)
        elif rows and branch is None:
            viewer = await resolve(conn, conversation_id, MAIN_BRANCH)
            spot = None if viewer is None else await occurrence(conn, viewer.leaf_id, message_id)
            if spot is None:
                raise AmbiguousMessageError(conversation_id, message_id)
    if spot is None:
        return None
    if viewer is None:
        viewer = await resolve(conn, conversation_id, MAIN_BRANCH)
    pk, parent_pk = spot
    parent = Message.parent_id.is_(None) if parent_pk is None else Message.parent_id == parent_pk
    children = (
        await conn.execute(
            select(Message.id, Message.message_id)
            .where(Message.conversation_id == conversation_id, parent)
            .order_by(Message.seq)
        )
    ).all()
    keys = [row.id for row in children]
    prefer = None if viewer is None else viewer.id
    at_parent = (
        Branch.fork_message_id.is_(None)
        if parent_pk is None
        else (Branch.fork_message_id == parent_pk)
    )
    forks = select(Branch.parent_branch_id).where(
        Branch.conversation_id == conversation_id,
        at_parent,
        Branch.parent_branch_id.is_not(None),
    )
    # Most alternatives are shown on a branch forked at their parent (an edit or a regenerate
    # keeps one there) or on the branch it was forked from: walk those first, and every
    # branch only for the siblings they miss.
    forked_here = at_parent | Branch.id.in_(forks.scalar_subquery())
    if prefer is not None:
        forked_here = forked_here | (Branch.id == prefer)
    near = list(
        (
            await conn.scalars(
                select(Branch.id).where(Branch.conversation_id == conversation_id, forked_here)
            )
        ).all()
    )
    shown = await _shown_on(conn, conversation_id, parent_pk, keys, Branch.id.in_(near))
    missing = [key for key in keys if not shown.get(key)]
    if missing:
        others = Branch.id.not_in(near)
        shown.update(await _shown_on(conn, conversation_id, parent_pk, missing, others))
    return Siblings(
        ids=tuple(row.message_id for row in children),
        index=keys.index(pk),
        shown_on=tuple(_pick(shown.get(key, []), prefer) for key in keys),
    )


async def _shown_on(
    conn: AsyncConnection,
    conversation_id: int,
    parent_pk: int | None,
    siblings: list[int],
    which: ColumnElement[bool],
) -> dict[int, list[tuple[int, str, Any]]]:
    """For each sibling (a child of `parent_pk`), the branches (among those matching `which`)
    whose path holds it: `(id, name, updated_at)`.

    Each branch's path is walked up from its leaf until it meets a sibling, or the path above
    the siblings' parent (which no sibling is below): only the part of the tree below the
    branches' meeting points with that path is read.
    """
    above = await path_ids(conn, parent_pk)
    up = (
        select(
            Branch.id.label("branch_id"),
            Message.id.label("id"),
            Message.parent_id.label("parent_id"),
        )
        .join(Message, Message.id == Branch.leaf_id)
        .where(Branch.conversation_id == conversation_id, which)
        .cte("shown_on", recursive=True)
    )
    parent = aliased(Message)
    up = up.union_all(
        select(up.c.branch_id, parent.id, parent.parent_id).where(
            parent.id == up.c.parent_id,
            up.c.id.not_in(siblings),
            up.c.parent_id.not_in(above),
        )
    )
    rows = await conn.execute(
        select(up.c.id, Branch.id, Branch.name, Branch.updated_at)
        .join(Branch, Branch.id == up.c.branch_id)
        .where(up.c.id.in_(siblings))
    )
    shown: dict[int, list[tuple[int, str, Any]]] = {}
    for row in rows:
        shown.setdefault(row[0], []).append((row[1], row[2], row[3]))
    return shown


def _pick(branches: list[tuple[int, str, Any]], prefer: int | None) -> ShownOn | None:
    """The branch to show a sibling on: `prefer` if it holds it, else the one updated last
    (of those found)."""
    if not branches:
        return None
    chosen = next((b for b in branches if b[0] == prefer), None)
    if chosen is None:
        chosen = max(branches, key=lambda b: (b[2], b[0]))
    return ShownOn(id=chosen[0], name=chosen[1])


def _reach(conversation_id: int) -> CTE:
    """A recursive CTE `(id, parent_id)`: every row on the path of some branch."""
    leaves = select(Branch.leaf_id).where(
        Branch.conversation_id == conversation_id, Branch.leaf_id.is_not(None)
    )
    reach = (
        select(Message.id.label("id"), Message.parent_id.label("parent_id"))
        .where(Message.id.in_(leaves))
        .cte("reach", recursive=True)
    )
    parent = aliased(Message)
    # UNION, not UNION ALL: branches share prefixes; a row reached once is not walked again.
    return reach.union(select(parent.id, parent.parent_id).where(parent.id == reach.c.parent_id))


async def prune_above(conn: AsyncConnection, conversation_id: int, pk: int) -> int:
    """Delete the part of the path from the root to row `pk` that no branch reaches, with
    everything that hangs below it; returns how many rows were deleted.

    The rows of the path that some branch reaches form a prefix of it (a branch reaching a row
    reaches its ancestors), so what goes is the subtree of the first row no branch reaches; no
    branch reaches anything in that subtree either. Rows off this path are not looked at.
    """
    up = up_from(literal(pk), "doomed_path")
    reach = _reach(conversation_id)
    top = await conn.scalar(
        select(up.c.id)
        .where(up.c.id.not_in(select(reach.c.id)))
        .order_by(up.c.depth.desc())
        .limit(1)
    )
    if top is None:
        return 0
    down = (
        select(Message.id.label("id"))
        .where(Message.id == literal(top))
        # Nested in the IN (...) subquery, so the statement starts with DELETE: Python's sqlite3
        # reports no row count for a statement that starts with WITH.
        .cte("below", recursive=True, nesting=True)
    )
    child = aliased(Message)
    down = down.union_all(
        select(child.id).where(
            child.conversation_id == conversation_id, child.parent_id == down.c.id
        )
    )
    result = await conn.execute(
        delete(Message).where(
            Message.conversation_id == conversation_id, Message.id.in_(select(down.c.id))
        )
    )
    return int(result.rowcount)
