"""The statements of a turn's writes and of a conversation's activation, built once.

Building a SQLAlchemy statement (coercing each clause, generating its cache key) costs two to
three times what executing it on SQLite does: ~270 µs against ~80 µs for the fence's UPDATE when
measured on a 2-core machine. A turn's two transactions run about a dozen statements, on the
hot path and, on SQLite, while the write lock is held (docs/benchmarks.md, "The write path").
The statements every turn runs, and those that find or create a conversation on its way to its
first chunk, are therefore built here, once, with bound parameters, and executed with a dict of
values (`params`); the rest of the store builds its statements where it uses them. Parameter
names carry a `b_` prefix: SQLAlchemy reserves column names for the values of INSERT and
UPDATE.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Insert, bindparam, func, insert, select, update
from sqlalchemy.engine import Dialect

from durachat_infra.store._engine import insert_new_for
from durachat_infra.store._records import OPEN_TURN_STATUSES
from durachat_infra.store.models import Branch, Conversation, Message, Tenant, Turn


def params(**values: Any) -> dict[str, Any]:
    """The parameters of a statement here, named as its columns are."""
    return {f"b_{name}": value for name, value in values.items()}


FENCE: Final = (
    update(Conversation)
    .where(Conversation.id == bindparam("b_cid"), Conversation.epoch == bindparam("b_epoch"))
    .values(updated_at=bindparam("b_now"))
)
"""Touch the conversation if it is still at `epoch` (one row matched) — the fence."""

COUNT_MESSAGES: Final = (
    select(func.count())
    .select_from(Message)
    .where(
        Message.conversation_id == bindparam("b_cid"),
        Message.id.in_(bindparam("b_pks", expanding=True)),
    )
)
"""How many of the keys `pks` are messages of the conversation."""

ALLOCATE_SEQ: Final = (
    update(Conversation)
    .where(Conversation.id == bindparam("b_cid"))
    .values(next_seq=Conversation.next_seq + bindparam("b_count"))
    .returning(Conversation.next_seq)
)
"""Reserve `count` sequence numbers; returns the new counter."""

INSERT_MESSAGE: Final = (
    insert(Message)
    .values(
        conversation_id=bindparam("b_cid"),
        parent_id=bindparam("b_parent"),
        seq=bindparam("b_seq"),
        message_id=bindparam("b_message_id"),
        role=bindparam("b_role"),
        body=bindparam("b_body"),
    )
    .returning(Message.id)
)

UPDATE_MESSAGE: Final = (
    update(Message)
    .where(Message.id == bindparam("b_pk"), Message.conversation_id == bindparam("b_cid"))
    .values(
        message_id=bindparam("b_message_id"), role=bindparam("b_role"), body=bindparam("b_body")
    )
)

MOVE_BRANCH_BY_NAME: Final = (
    update(Branch)
    .where(Branch.conversation_id == bindparam("b_cid"), Branch.name == bindparam("b_branch"))
    .values(leaf_id=bindparam("b_leaf"), updated_at=bindparam("b_now"))
)

MOVE_BRANCH_BY_ID: Final = (
    update(Branch)
    .where(Branch.conversation_id == bindparam("b_cid"), Branch.id == bindparam("b_branch"))
    .values(leaf_id=bindparam("b_leaf"), updated_at=bindparam("b_now"))
)

SAVE_REQUEST_CONTEXT: Final = (
    update(Conversation)
    .where(Conversation.id == bindparam("b_cid"))
    .values(last_body=bindparam("b_last_body"), last_client_tools=bindparam("b_last_client_tools"))
)

SETTLE_TURN: Final = (
    update(Turn)
    .where(Turn.conversation_id == bindparam("b_cid"), Turn.request_id == bindparam("b_request_id"))
    .values(
        status=bindparam("b_status"),
        message_id=bindparam("b_message_id"),
        updated_at=bindparam("b_now"),
    )
)
"""The common end of a turn: its status and its reply (`update_turn` with just those)."""

FIND_CONVERSATION: Final = select(Conversation.id, Conversation.epoch).where(
    Conversation.tenant_id == bindparam("b_tenant"),
    Conversation.agent == bindparam("b_agent"),
    Conversation.name == bindparam("b_name"),
)
"""The id and epoch of the conversation `(tenant, agent, name)`."""

TENANT_EXISTS: Final = select(Tenant.id).where(Tenant.id == bindparam("b_tenant"))

TURN_COLUMNS: Final = (
    Turn.request_id,
    Turn.kind,
    Turn.status,
    Turn.owner,
    Turn.epoch,
    Turn.message_id,
    Turn.request,
    Turn.stash,
    Turn.error,
    Turn.heartbeat_at,
    Turn.created_at,
)
"""What a `TurnRecord` is read from."""

RECENT_REQUEST_IDS: Final = (
    select(Turn.request_id)
    .where(Turn.conversation_id == bindparam("b_cid"))
    .order_by(Turn.id.desc())
    .limit(bindparam("b_limit"))
)
"""The request ids of the conversation's newest `limit` turns, newest first."""

OPEN_TURNS: Final = (
    select(*TURN_COLUMNS)
    .where(Turn.conversation_id == bindparam("b_cid"), Turn.status.in_(OPEN_TURN_STATUSES))
    .order_by(Turn.id)
)
"""The conversation's turns that have not ended, oldest first."""

REQUEST_CONTEXT: Final = select(Conversation.last_body, Conversation.last_client_tools).where(
    Conversation.id == bindparam("b_cid")
)

INSERT_BRANCH: Final = insert(Branch).values(
    conversation_id=bindparam("b_cid"), name=bindparam("b_branch")
)
"""A conversation's branch named `branch`, at no message yet."""


def _insert_new_per_dialect(
    table: Any, unique: list[str], returning: Any, **values: Any
) -> dict[str, Insert]:
    """`INSERT … ON CONFLICT (unique) DO NOTHING RETURNING returning` for each database the
    store runs on, by dialect name."""
    return {
        name: insert_new_for(name, table, unique, **values).returning(returning)
        for name in ("postgresql", "sqlite")
    }


_INSERT_CONVERSATION: Final = _insert_new_per_dialect(
    Conversation,
    ["tenant_id", "agent", "name"],
    Conversation.id,
    tenant_id=bindparam("b_tenant"),
    agent=bindparam("b_agent"),
    name=bindparam("b_name"),
    epoch=bindparam("b_epoch"),
)

_BEGIN_TURN: Final = _insert_new_per_dialect(
    Turn,
    ["conversation_id", "request_id"],
    Turn.id,
    conversation_id=bindparam("b_cid"),
    request_id=bindparam("b_request_id"),
    kind=bindparam("b_kind"),
    status="accepted",
    owner=bindparam("b_owner"),
    epoch=bindparam("b_epoch"),
    request=bindparam("b_request"),
)


def insert_conversation(dialect: Dialect) -> Insert:
    """`INSERT … ON CONFLICT DO NOTHING RETURNING id` of a conversation row, for `dialect`."""
    return _INSERT_CONVERSATION[dialect.name]


def begin_turn(dialect: Dialect) -> Insert:
    """`INSERT … ON CONFLICT DO NOTHING RETURNING id` of a turn row, for `dialect`."""
    return _BEGIN_TURN[dialect.name]
