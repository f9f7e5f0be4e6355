"""The bookkeeping every fenced transaction shares: the fence, the connection, and spoiling.

`FencedTransaction` is assembled from this core and the write groups built on it (tree writes in
`_transaction`, branch writes in `_branch_writes`, turn and ledger writes in `_record_writes`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from durachat_infra.store import _branches
from durachat_infra.store import _statements as statements
from durachat_infra.store._engine import translate_errors
from durachat_infra.store._records import BranchRecord
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import FencedError, StoreError
from durachat_infra.store.models import Conversation

logger = logging.getLogger(__name__)


class TransactionCore:
    """The state of one open transaction and the helpers its write methods share.

    Attributes:
        conversation_id: the conversation written to.
        epoch: the fencing epoch the transaction holds.
    """

    def __init__(self, conn: AsyncConnection, conversation_id: int, epoch: int) -> None:
        self._conn = conn
        self.conversation_id = conversation_id
        self.epoch = epoch
        self._closed = False
        self._failed = False
        self._inserted: set[int] = set()
        """Rows this transaction inserted (and has not deleted): known to be the conversation's
        messages without asking the database again."""

    @contextlib.asynccontextmanager
    async def _op(self, action: str) -> AsyncIterator[AsyncConnection]:
        if self._closed:
            raise StoreError(f"{action}: the transaction is over")
        if self._failed:
            raise StoreError(f"{action}: an earlier operation failed; the transaction rolls back")
        try:
            with translate_errors(action):
                yield self._conn
        except BaseException:
            self._failed = True
            raise

    def _finish(self) -> bool:
        """Close the transaction to further calls; tell whether an operation in it failed."""
        self._closed = True
        return self._failed

    async def _record(self, conn: AsyncConnection, branch_id: int) -> BranchRecord:
        record = await _branches.get_record(conn, self.conversation_id, branch_id)
        if record is None:
            raise StoreError(f"branch {branch_id} vanished in conversation {self.conversation_id}")
        return record

    async def _require_messages(self, conn: AsyncConnection, pks: list[int]) -> None:
        # A turn inserts its message and then moves the branch to it: no second look-up.
        unknown = [pk for pk in pks if pk not in self._inserted]
        if not unknown:
            return
        found = await conn.scalar(
            statements.COUNT_MESSAGES, statements.params(cid=self.conversation_id, pks=unknown)
        )
        if found != len(set(unknown)):
            raise StoreError(
                f"message(s) {sorted(set(pks))} not (all) in conversation {self.conversation_id}"
            )


async def fence(conn: AsyncConnection, conversation_id: int, epoch: int) -> None:
    """Check the fence and lock the conversation for the rest of the transaction on `conn`.

    Raises:
        FencedError: the stored epoch differs from `epoch`.
        StoreError: the conversation does not exist.
    """
    matched = await conn.execute(
        statements.FENCE, statements.params(cid=conversation_id, epoch=epoch, now=utcnow())
    )
    if matched.rowcount == 1:
        return
    current = await conn.scalar(
        select(Conversation.epoch).where(Conversation.id == conversation_id)
    )
    if current is None:
        raise StoreError(f"conversation {conversation_id} does not exist")
    logger.warning(
        "rejected a write to conversation %s under epoch %s (stored epoch %s)",
        conversation_id,
        epoch,
        current,
    )
    raise FencedError(conversation_id, epoch, current)
