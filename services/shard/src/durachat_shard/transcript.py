"""A conversation's transcript on one branch: the in-memory path and its fenced persistence.

The transcript is the path from the root of the message tree to the branch's leaf. Changes
follow the reference's persistence rules (reconcile, sanitize, upsert) mapped onto the tree. A
chat request whose transcript leaves the path (a regenerate, an edit) is not applied as it
is: `fork_of` says where it leaves, the shard keeps the path below that point as a new branch
and rewinds this one there (`rewind`, `cut`), so nothing is deleted or overwritten.

Every change is made in memory at once and returned as a `Change`: the SQL operations that make
it durable, applied later in one fenced transaction. The owner applies changes in the order it
made them, so the database always follows the same history as memory, a little behind. That
keeps SQL off the path to a reply's first chunk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from durachat.messages import (
    reconcile_messages,
    resolve_tool_merge_id,
    sanitize_message,
    tool_call_ids,
)
from durachat.types import UIMessage
from durachat_infra.store import MAIN_BRANCH, BranchRef


class PathWriter(Protocol):
    """The SQL writes a `Change` is made of, inside one fenced transaction (what it needs of
    `FencedTransaction`)."""

    async def insert_chain(
        self, parent_pk: int | None, messages: Sequence[dict[str, Any]]
    ) -> list[int]: ...

    async def update_message(self, pk: int, message: dict[str, Any]) -> None: ...

    async def reparent(self, pk: int, parent_pk: int | None) -> None: ...

    async def set_leaf(self, branch: BranchRef, leaf_pk: int | None) -> None: ...

    async def trim_path(self, branch: BranchRef, keep: int) -> int: ...

    async def clear(self) -> None: ...


@dataclass(slots=True, eq=False)
class _Node:
    message: UIMessage
    encoded: str
    pk: int | None = None
    """Row id, known once the node's insert has been applied."""


@dataclass(slots=True)
class _Op:
    kind: Literal["update", "insert", "leaf", "reparent", "clear", "trim"]
    node: _Node | None = None
    parent: _Node | None = None
    nodes: list[_Node] = field(default_factory=list)
    keep: int = 0


def _encode(message: UIMessage) -> str:
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _pk(node: _Node | None) -> int | None:
    if node is None:
        return None
    assert node.pk is not None, "a change was applied out of order"
    return node.pk


@dataclass(slots=True)
class Change:
    """SQL operations that make one in-memory change durable (apply in order)."""

    branch: BranchRef
    ops: list[_Op] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ops)

    async def apply(self, tx: PathWriter) -> None:
        """Write the change inside a fenced transaction."""
        for op in self.ops:
            if op.kind == "update":
                assert op.node is not None
                await tx.update_message(_pk(op.node) or 0, op.node.message)
            elif op.kind == "insert":
                pks = await tx.insert_chain(_pk(op.parent), [n.message for n in op.nodes])
                for node, pk in zip(op.nodes, pks, strict=True):
                    node.pk = pk
            elif op.kind == "leaf":
                await tx.set_leaf(self.branch, _pk(op.node))
            elif op.kind == "reparent":
                assert op.node is not None
                await tx.reparent(_pk(op.node) or 0, _pk(op.parent))
            elif op.kind == "trim":
                await tx.trim_path(self.branch, op.keep)
            else:
                await tx.clear()


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A client's transcript reconciled with a branch's path (see `Transcript.reconcile`)."""

    merged: list[UIMessage]
    """The client's messages with the server's tool results and assistant ids merged in."""
    resolved: list[UIMessage]
    """The same, under the ids they are compared with the path by (tool calls merged)."""


@dataclass(frozen=True, slots=True)
class Fork:
    """Where a chat request's transcript leaves a branch's path."""

    at: int
    """How many messages of the path the new branch keeps: it forks below message `at - 1`
    (at the root for 0)."""
    kind: Literal["edit", "regenerate"]


class Transcript:
    """The messages of one branch, kept in memory; changes come back as `Change`s to apply."""

    def __init__(
        self,
        nodes: list[tuple[int, UIMessage]],
        *,
        branch: BranchRef = MAIN_BRANCH,
        sanitize: Callable[[UIMessage], UIMessage] = sanitize_message,
    ) -> None:
        self._branch = branch
        self._sanitize = sanitize
        self._nodes = [_Node(m, _encode(m), pk) for pk, m in nodes]

    @property
    def messages(self) -> list[UIMessage]:
        """The visible transcript."""
        return [n.message for n in self._nodes]

    def index_of(self, message_id: str) -> int | None:
        """Position of a message on the path."""
        for i in range(len(self._nodes) - 1, -1, -1):
            if self._nodes[i].message.get("id") == message_id:
                return i
        return None

    def reconcile(self, incoming: list[UIMessage]) -> Reconciled:
        """A client's transcript reconciled with this path (what `fork_of` and `persist` read)."""
        merged = reconcile_messages(incoming, self.messages)
        resolved: list[UIMessage] = []
        for message in merged:
            # Only assistant messages with tool calls can adopt another message's id.
            if message.get("role") != "assistant" or not tool_call_ids(message):
                resolved.append(message)
                continue
            message_id = resolve_tool_merge_id(message, self.messages)
            resolved.append(
                message if message_id == message.get("id") else {**message, "id": message_id}
            )
        return Reconciled(merged, resolved)

    def fork_of(self, incoming: Reconciled, *, inflight: UIMessage | None) -> Fork | None:
        """Where a chat request's transcript leaves this path, if it does (else None).

        `inflight` is the reply streaming now (not on the path yet; clients already show it).
        The request forks when its transcript

        * stops short of the path: a regenerate, or any truncation (`regenerate`);
        * changes the content of a user message on it (an edit that keeps the message id,
          what the AI SDK's `sendMessage({text, messageId})` sends), or continues, after at
          least one message in common, with a user message where the path has another user
          message (an edit with a new id) (`edit`).

        Anything else is the reference's append: updates of known messages, new ones after
        the leaf. That includes a list whose first message is already new (a client that sends
        only its new message) and a list that goes on with a user message where the path has
        an assistant reply (a send that crossed a reply still streaming).
        """
        path = self.messages
        if inflight is not None:
            # A continuation streams into the last message; a new reply goes after it.
            extends = bool(path) and path[-1].get("id") == inflight.get("id")
            path = [*path[:-1], inflight] if extends else [*path, inflight]
        resolved = incoming.resolved
        for at, message in enumerate(resolved):
            if at == len(path):
                return None
            known = path[at]
            if message.get("id") != known.get("id"):
                edited = at > 0 and message.get("role") == known.get("role") == "user"
                return Fork(at, "edit") if edited else None
            if message.get("role") == "user" and self._changed(message, known):
                return Fork(at, "edit")
        if resolved and len(resolved) < len(path):
            return Fork(len(resolved), "regenerate")
        return None

    def persist(self, incoming: list[UIMessage] | Reconciled) -> tuple[list[UIMessage], Change]:
        """Reconcile a client's transcript into this one (unless it is already); returns the
        reconciled incoming list.

        Messages on the path are updated, new ones appended after the leaf, as the reference
        does; nothing ever leaves the path (a transcript that would fork is `fork_of`'s).
        """
        change = Change(self._branch)
        reconciled = incoming if isinstance(incoming, Reconciled) else self.reconcile(incoming)
        merged, resolved = reconciled.merged, reconciled.resolved
        common = 0
        while (
            common < len(resolved)
            and common < len(self._nodes)
            and resolved[common].get("id") == self._nodes[common].message.get("id")
        ):
            common += 1
        # Bodies of messages the lists agree on.
        for i in range(common):
            if not _is_stale_placeholder(resolved[i], self._nodes[i].message):
                self._update(change, i, resolved[i])
        fresh: list[UIMessage] = []
        for message in resolved[common:]:
            index = self.index_of(str(message.get("id")))
            if index is None:
                fresh.append(message)
            elif not _is_stale_placeholder(message, self._nodes[index].message):
                self._update(change, index, message)
        if fresh:
            self._append(change, fresh)
            change.ops.append(_Op("leaf", node=self._leaf))
        return merged, change

    def _changed(self, incoming: UIMessage, stored: UIMessage) -> bool:
        """Whether a client's copy of a stored message has other content (compared as stored:
        sanitized)."""
        if incoming.get("parts") == stored.get("parts"):
            return False
        return self._sanitize(incoming).get("parts") != stored.get("parts")

    def put_reply(self, message: UIMessage, *, anchor: str | None) -> Change:
        """Add an assistant reply: update it in place if it is on the path already, else insert
        it right after `anchor` (the message it answers), splicing it into the path."""
        change = Change(self._branch)
        index = self.index_of(str(message["id"]))
        if index is not None:
            self._update(change, index, message)
            return change
        at = self.index_of(anchor) if anchor is not None else None
        if at is None or at == len(self._nodes) - 1:
            self._append(change, [message])
            change.ops.append(_Op("leaf", node=self._leaf))
            return change
        stored = self._sanitize(message)
        node = _Node(stored, _encode(stored))
        change.ops.append(_Op("insert", parent=self._nodes[at], nodes=[node]))
        change.ops.append(_Op("reparent", node=self._nodes[at + 1], parent=node))
        self._nodes.insert(at + 1, node)
        return change

    def replace_tail(self, count: int, message: UIMessage) -> Change:
        """Put `message` in place of the last `count` messages of the path (they stay in the
        tree, off the path)."""
        change = Change(self._branch)
        del self._nodes[len(self._nodes) - count :]
        self._append(change, [message])
        change.ops.append(_Op("leaf", node=self._leaf))
        return change

    def rewind(self, at: int) -> Change:
        """The change that moves the branch's leaf back to message `at - 1` (empties it for
        0); memory is left as it is until `cut`, so a failed write changes nothing. The
        messages below stay in the tree (the shard keeps them as a branch first)."""
        return Change(self._branch, [_Op("leaf", node=self._nodes[at - 1] if at else None)])

    def cut(self, at: int) -> None:
        """Drop the messages from `at` on from the path in memory, once `rewind`'s change
        is durable."""
        del self._nodes[at:]

    def trim(self, keep: int) -> Change:
        """Keep only the newest `keep` messages of the path; older ones are deleted, with
        anything only they lead to, unless another branch still reaches them."""
        change = Change(self._branch)
        if keep <= 0 or len(self._nodes) <= keep:
            return change
        del self._nodes[: len(self._nodes) - keep]
        change.ops.append(_Op("trim", keep=keep))
        return change

    @property
    def branch(self) -> BranchRef:
        """The branch this transcript is the path of (`main`, or a branch id)."""
        return self._branch

    def clear(self) -> Change:
        """On `main`, remove every message of the conversation (and every other branch); on
        another branch, empty that branch only."""
        self._nodes.clear()
        if self._branch == MAIN_BRANCH:
            return Change(self._branch, [_Op("clear")])
        return Change(self._branch, [_Op("leaf", node=None)])

    @property
    def _leaf(self) -> _Node | None:
        return self._nodes[-1] if self._nodes else None

    def _update(self, change: Change, index: int, message: UIMessage) -> None:
        node = self._nodes[index]
        # Clients send the whole transcript with every request, mostly exactly as stored; a
        # plain comparison spares sanitising and encoding every message every time.
        if message == node.message:
            return
        stored = self._sanitize(message)
        encoded = _encode(stored)
        if encoded == node.encoded:
            return
        node.message, node.encoded = stored, encoded
        change.ops.append(_Op("update", node=node))

    def _append(self, change: Change, messages: list[UIMessage]) -> None:
        nodes = [_Node(s, _encode(s)) for s in (self._sanitize(m) for m in messages)]
        change.ops.append(_Op("insert", parent=self._leaf, nodes=nodes))
        self._nodes.extend(nodes)


def _is_stale_placeholder(incoming: UIMessage, stored: UIMessage) -> bool:
    """A client's still-empty copy of an assistant reply the server has already filled in
    (a send made while that reply streamed). It must not wipe the stored reply."""
    return (
        incoming.get("role") == "assistant"
        and not incoming.get("parts")
        and bool(stored.get("parts"))
    )
