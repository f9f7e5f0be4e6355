"""The conversations a shard holds: activation under a lease, renewal, eviction, hand-off."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx
from redis.exceptions import RedisError

from durachat import limits
from durachat.agent import AgentRegistry
from durachat.messages import enforce_row_size_limit, sanitize_message
from durachat.observability import EventType, emit
from durachat.types import UIMessage
from durachat_infra.cluster import ClusterView, LeaseHeldError, Leases, wake_owner
from durachat_infra.eventlog import LogWriter
from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import (
    MAIN_BRANCH,
    BranchRef,
    ConversationKey,
    FencedError,
    Store,
    StoredMessage,
    UnknownBranchError,
)
from durachat_infra.tasks import cancel_and_wait
from durachat_shard import metrics
from durachat_shard.actor import ConversationActor
from durachat_shard.emitter import Emitter
from durachat_shard.recovery import Incidents
from durachat_shard.transcript import Transcript
from durachat_shard.usage import MeteredEmitter, TokenMeter

log = logging.getLogger(__name__)


class NotOwnerError(Exception):
    """This shard is not the conversation's owner; `owner` is who is (None if unknown)."""

    def __init__(self, owner: str | None) -> None:
        super().__init__(f"not the owner (owner: {owner})")
        self.owner = owner


class UnknownAgentError(Exception):
    """No agent is registered under the requested name."""


@dataclass(slots=True)
class _Held:
    key: ConversationKey
    keys: ConversationKeys
    actor: ConversationActor
    branch: str = MAIN_BRANCH


Slot = tuple[ConversationKey, str]
"""A conversation and one of its branches (`main` or a branch id): one actor each. All the
branches of a conversation share its lease and epoch."""


def routing_key(key: ConversationKey) -> str:
    """The string rendezvous hashing places (shared by gateways and shards)."""
    return conversation_tag(key.tenant, key.agent, key.name)


def _within_bound(message: UIMessage) -> UIMessage:
    pruned: UIMessage = limits.prune(message, max_depth=limits.MAX_MESSAGE_DEPTH)[0]
    return pruned


def _report_quarantined(key: ConversationKey, stored: list[StoredMessage]) -> None:
    """Log and publish the messages of a loaded path that were quarantined."""
    bad = [m for m in stored if m.quarantined is not None]
    if not bad:
        return
    for message in bad:
        log.warning(
            "conversation %s/%s/%s: message %s loaded quarantined: %s",
            key.tenant,
            key.agent,
            key.name,
            message.message_id,
            message.quarantined,
        )
    emit(
        EventType.TRANSCRIPT_REPAIRED,
        agent=key.agent,
        name=key.name,
        tenant=key.tenant,
        payload={
            "reason": "quarantined",
            "messageIds": [m.message_id for m in bad],
            "details": [m.quarantined for m in bad],
        },
    )


class Conversations:
    """Activates conversations on demand and keeps them while this shard owns them."""

    def __init__(
        self,
        *,
        shard_id: str,
        key_prefix: str,
        agents: AgentRegistry,
        model: str | None,
        store: Store,
        writer: LogWriter,
        leases: Leases,
        view: ClusterView,
        lease_ttl: float,
        idle_evict_after: float,
        redis: RedisClient,
        drain_timeout: float = 10.0,
        turn_heartbeat_interval: float = 2.0,
        meter: TokenMeter | None = None,
        internal_auth: httpx.Auth | None = None,
    ) -> None:
        self._meter = meter
        self._internal_auth = internal_auth
        self._shard_id = shard_id
        self._redis = redis
        self._drain_timeout = drain_timeout
        self._heartbeat_interval = turn_heartbeat_interval
        self._last_heartbeat = 0.0
        self._beat: asyncio.Task[None] | None = None
        self._releasing: set[asyncio.Task[None]] = set()
        self._prefix = key_prefix
        self._agents = agents
        self._model = model
        self._store = store
        self._writer = writer
        self._leases = leases
        self._view = view
        self._lease_ttl = lease_ttl
        self._idle_evict_after = idle_evict_after
        self._held: dict[Slot, _Held] = {}
        self._activating: dict[Slot, asyncio.Future[_Held]] = {}
        self._leased_while_activating: dict[Slot, ConversationKeys] = {}
        """Leases granted to activations still in progress: renewed with the held ones."""
        self._task: asyncio.Task[None] | None = None
        self._draining = False

    def __len__(self) -> int:
        return len(self._held)

    async def start(self) -> None:
        """Start lease renewal, eviction and hand-off."""
        self._task = asyncio.create_task(self._maintain(), name="conversations-maintain")

    async def stop(self) -> None:
        """Release every conversation (the graceful drain, docs/recovery.md#graceful-drain):
        running turns get up to the drain timeout to finish; the rest are checkpointed,
        released, and their new owners are asked to continue them at once."""
        self._draining = True
        # Leases stay renewed (and idle conversations released) while running turns finish.
        deadline = time.monotonic() + self._drain_timeout
        while any(h.actor.busy for h in self._held.values()) and time.monotonic() < deadline:  # noqa: ASYNC110 - "busy" spans many actors and queues
            await asyncio.sleep(0.05)
        await cancel_and_wait(self._task)
        await cancel_and_wait(self._beat)
        handed: list[ConversationKey] = []
        for slot, held in list(self._held.items()):
            if held.actor.busy and not held.actor.fenced:
                log.info("checkpointing %s for its next owner", slot)
                await held.actor.checkpoint()
                if held.key not in handed:
                    handed.append(held.key)
        await asyncio.gather(
            *(self._release(slot) for slot in list(self._held)),
            *list(self._releasing),
            return_exceptions=True,
        )
        if handed:
            await self._hand_over(handed)

    async def _hand_over(self, keys: list[ConversationKey]) -> None:
        """Wake the new owners of checkpointed conversations (best effort: the jobs service
        finds any that are missed)."""
        await self._view.refresh()
        timeout = httpx.Timeout(5.0, connect=1.0)
        async with httpx.AsyncClient(timeout=timeout, auth=self._internal_auth) as http:
            woken = await asyncio.gather(
                *(wake_owner(self._view, key, http, exclude=self._shard_id) for key in keys)
            )
        log.info("handed over %d of %d conversations", sum(woken), len(keys))

    async def get(self, key: ConversationKey, branch: str = MAIN_BRANCH) -> ConversationActor:
        """The actor of `key` on `branch` (`main` or a branch id), activating it if needed.

        Raises `NotOwnerError` when another shard owns the conversation,
        `UnknownAgentError` when the agent is not served here, and `UnknownBranchError` when
        the conversation has no such branch.
        """
        if self._draining:
            # Gateways retry elsewhere once this shard has left the membership.
            raise NotOwnerError(None)
        slot = (key, branch)
        held = self._held.get(slot)
        if held is not None and not held.actor.fenced:
            return held.actor
        if held is not None:
            await self._release(slot)
        owner = self._view.owner(routing_key(key))
        if owner is None or owner.id != self._shard_id:
            raise NotOwnerError(None if owner is None else owner.id)
        pending = self._activating.get(slot)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._activating[slot] = pending
            try:
                pending.set_result(await self._activate(key, branch))
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # mark retrieved; callers get it below
            finally:
                del self._activating[slot]
                self._leased_while_activating.pop(slot, None)
        return (await asyncio.shield(pending)).actor

    async def recover(self, key: ConversationKey) -> None:
        """Activate the conversation on every branch that has an unfinished turn (main always),
        which recovers those turns."""
        actor = await self.get(key)
        branches = {
            str((turn.request or {}).get("branch") or MAIN_BRANCH)
            for turn in await self._store.open_turns(actor.conversation_id)
        }
        for branch in sorted(branches - {MAIN_BRANCH}):
            try:
                await self.get(key, branch)
            except UnknownBranchError:
                log.warning("open turns of %s on branch %s, which is gone", key, branch)

    async def stop_branch(self, key: ConversationKey, branch: str) -> None:
        """Stop the actor of `key` on `branch` (a branch being deleted), if there is one: its
        running turn ends as aborted, its partial reply stored."""
        await self._release((key, branch))

    def _drop_branches(self, key: ConversationKey) -> None:
        """Release the actors of `key` on branches other than main (main was cleared: every
        other branch is gone)."""
        for slot, held in list(self._held.items()):
            if held.key == key and held.branch != MAIN_BRANCH:
                self._release_soon(slot)

    async def reclaim(self, keys: ConversationKeys) -> bool:
        """Take back the lease of a conversation with a turn running or queued here, or frames
        still to append, lost without anyone taking it over (Redis restarted without it, or
        lost its data): the turn goes on and its frames reach clients rather than ending
        unseen (docs/operations.md#failure-modes). Idle conversations are let go instead, and
        re-activated on their next frame."""
        actors = [h.actor for h in self._held.values() if h.keys == keys]
        if self._draining or not actors or any(a.fenced for a in actors):
            return False
        if not any(a.busy for a in actors) and not self._writer.pending(keys):
            return False
        if not await self._leases.reclaim(keys, actors[0].epoch):
            return False
        metrics.LEASES_RECLAIMED.inc()
        log.warning("took back the lease of %s (lost without a new owner)", keys.tag)
        return True

    def on_log_fenced(self, keys: ConversationKeys) -> None:
        """The event log refused a write: another shard owns the conversation now."""
        for held in self._held.values():
            if held.keys == keys:
                held.actor.step_down()

    async def _activate(self, key: ConversationKey, branch: str) -> _Held:
        agent_cls = self._agents.get(key.agent)
        if agent_cls is None:
            raise UnknownAgentError(key.agent)
        keys = ConversationKeys(self._prefix, routing_key(key))
        asked = time.monotonic()
        try:
            grant = await self._leases.acquire(keys)
        except LeaseHeldError as exc:
            # A live shard still holds it (it is finishing a turn, or draining): send the
            # gateway there. Gateways keep retrying until the holder lets go.
            raise NotOwnerError(exc.holder) from exc
        if grant.fresh:
            metrics.LEASES_TAKEN.inc()
        self._leased_while_activating[(key, branch)] = keys
        try:
            # A conversation created here is claimed in the same write (one transaction fewer
            # on the way to a new conversation's first chunk).
            conversation = await self._store.get_or_create_conversation(
                key, epoch=grant.epoch if grant.fresh else 0
            )
            if conversation.created and grant.fresh:
                epoch = grant.epoch
            else:
                epoch = await self._claim(keys, conversation.id, grant.epoch, fresh=grant.fresh)
            ref: BranchRef = MAIN_BRANCH if branch == MAIN_BRANCH else int(branch)
            # A conversation this call created holds nothing yet: no reads on the way to the
            # first chunk of a new conversation (docs/benchmarks.md).
            empty = conversation.created and branch == MAIN_BRANCH
            stored = [] if empty else await self._load(conversation.id, ref)
            # Activation can outlast the lease when the database is slow; unless it took less
            # than a renewal interval (then the lease lives at least as long as a renewed one
            # would, until the next renewal of held leases), confirm it is still held
            # (renewing it), and if it had to be taken again, claim the new epoch, re-read.
            if time.monotonic() - asked >= self._renew_interval:
                again = await self._leases.acquire(keys)
                if again.fresh:
                    metrics.LEASES_TAKEN.inc()
                    epoch = await self._claim(keys, conversation.id, again.epoch, fresh=True)
                    empty = False
                    stored = await self._load(conversation.id, ref)
        except UnknownBranchError:
            await self._release_lease_unless_held(key, keys)
            raise
        agent = agent_cls(key.name, model=self._model)
        _report_quarantined(key, stored)
        transcript = Transcript(
            [(m.pk, m.message) for m in stored],
            branch=ref,
            # Nothing nested past the bound is stored (it could not be read back), then
            # built-in sanitising, the agent's own, and row-size compaction.
            sanitize=lambda m: enforce_row_size_limit(
                agent.sanitize_message_for_persistence(
                    sanitize_message(limits.prune(m, max_depth=limits.MAX_MESSAGE_DEPTH)[0])
                )
            ),
        )
        recent = [] if empty else await self._store.recent_request_ids(conversation.id)
        last_body, last_client_tools = (
            (None, None) if empty else await self._store.load_request_context(conversation.id)
        )
        actor = ConversationActor(
            conversation_id=conversation.id,
            key=key,
            epoch=epoch,
            shard_id=self._shard_id,
            agent=agent,
            transcript=transcript,
            store=self._store,
            emitter=self._emitter(keys, key.tenant, branch, agent.model),
            recent_requests=recent,
            last_body=last_body,
            last_client_tools=last_client_tools,
            incidents=Incidents(
                store=self._store,
                conversation_id=conversation.id,
                tenant=key.tenant,
                agent=key.agent,
                name=key.name,
                config=agent.chat_recovery,
                redis=self._redis,
                key_prefix=self._prefix,
            ),
        )
        agent.host = actor.host
        if branch == MAIN_BRANCH:
            actor.on_cleared = lambda: self._drop_branches(key)
        try:
            # Turns a former owner left unfinished are recovered before any new input.
            open_turns = [] if empty else await self._store.open_turns(conversation.id)
            await actor.recover(
                [
                    t
                    for t in open_turns
                    if str((t.request or {}).get("branch") or MAIN_BRANCH) == branch
                ]
            )
        except BaseException:
            await actor.stop()
            await self._release_lease_unless_held(key, keys)
            raise
        actor.start()
        held = _Held(key, keys, actor, branch)
        self._held[(key, branch)] = held
        log.info(
            "activated %s/%s/%s%s at epoch %d",
            key.tenant,
            key.agent,
            key.name,
            "" if branch == MAIN_BRANCH else f" (branch {branch})",
            epoch,
        )
        return held

    def _emitter(self, keys: ConversationKeys, tenant: str, branch: str, model: str) -> Emitter:
        """The emitter of an actor; its replies count against the tenant's tokens."""
        if self._meter is None:
            return Emitter(self._writer, keys, self._redis, branch=branch)
        return MeteredEmitter(
            self._writer,
            keys,
            self._redis,
            branch=branch,
            meter=self._meter,
            tenant=tenant,
            model=model,
        )

    async def _load(self, conversation_id: int, ref: BranchRef) -> list[StoredMessage]:
        # A message the store could not hand out as stored comes quarantined (what could be
        # kept of it) rather than failing the load: no stored row makes a conversation
        # unloadable (docs/operations.md#stored-data-that-cannot-be-read).
        if ref == MAIN_BRANCH:
            return await self._store.load_path(conversation_id)
        path = await self._store.branch_path(conversation_id, ref)
        if path is None:
            raise UnknownBranchError(conversation_id, ref)
        return path

    async def _release_lease_unless_held(
        self, key: ConversationKey, keys: ConversationKeys
    ) -> None:
        """Release the conversation's lease, unless an actor of another branch still uses it."""
        if any(h.key == key for h in self._held.values()):
            return
        await self._leases.release(keys)

    async def _claim(
        self, keys: ConversationKeys, conversation_id: int, epoch: int, *, fresh: bool
    ) -> int:
        """Raise the conversation's SQL epoch to this tenure's; returns the epoch in force."""
        try:
            await self._store.claim(conversation_id, epoch, fresh=fresh)
            return epoch
        except FencedError as exc:
            # The database has seen a newer epoch than Redis hands out: RedisClient lost its data.
            # Holding the lease, this shard is the rightful owner; move past the stored epoch.
            log.warning("epoch counter behind the database for %s; advancing it", keys.tag)
            try:
                advanced = await self._leases.advance_epoch(keys, exc.current_epoch + 1)
                await self._store.claim(conversation_id, advanced)
            except BaseException:
                await self._leases.release(keys)
                raise
            return advanced

    async def _release(self, slot: Slot) -> None:
        held = self._held.pop(slot, None)
        if held is None:
            return
        await held.actor.stop()
        await self._writer.flush()
        try:
            await self._release_lease_unless_held(held.key, held.keys)
        except Exception:
            log.warning("could not release the lease of %s", held.key, exc_info=True)
        log.info("released %s/%s/%s", held.key.tenant, held.key.agent, held.key.name)

    @property
    def _renew_interval(self) -> float:
        """Seconds between two renewals of the held leases."""
        return max(self._lease_ttl / 3, 0.05)

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(self._renew_interval)
            try:
                await self._maintain_once()
            except Exception:
                log.warning("conversation maintenance failed", exc_info=True)

    def _release_soon(self, slot: Slot) -> None:
        """Release a conversation's actor in the background: stopping it can take a while,
        and the other conversations' leases must be renewed meanwhile."""
        if slot not in self._held:
            return
        task = asyncio.create_task(self._release(slot))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _heartbeat(self) -> None:
        try:
            await self._store.heartbeat_turns(self._shard_id)
        except Exception:
            log.warning("could not record the turn heartbeat", exc_info=True)

    async def _maintain_once(self) -> None:
        held = list(self._held.values())
        # A burst of activations can queue on the database past a lease's life: their leases
        # are renewed too, so they do not lapse and get taken again under a new epoch (which
        # means one more claim and a second read of the path). One that is lost anyway is
        # caught by the activation's own check before its actor starts.
        activating = list(self._leased_while_activating.values())
        if not held and not activating:
            return
        renewed = await self._leases.renew_many([h.keys for h in held] + activating)
        renewed = renewed[: len(held)]
        now = time.monotonic()
        beating = self._beat is not None and not self._beat.done()
        if (
            not beating
            and now - self._last_heartbeat >= self._heartbeat_interval
            and any(h.actor.busy for h in held)
        ):
            # Open turns say their owner is alive; the jobs service recovers stale ones. In a
            # task of its own: a slow database must never hold up lease renewal.
            self._last_heartbeat = now
            self._beat = asyncio.create_task(self._heartbeat())
        for item, renewed_ok in zip(held, renewed, strict=True):
            actor = item.actor
            ok = renewed_ok
            if not ok and not actor.fenced:
                try:
                    ok = await self.reclaim(item.keys)
                except RedisError:
                    ok = False
            if not ok or actor.fenced:
                metrics.LEASES_LOST.inc()
                log.warning("lost the lease of %s", item.key)
                self._release_soon((item.key, item.branch))
                continue
            if actor.busy:
                continue
            owner = self._view.owner(routing_key(item.key))
            moved = owner is not None and owner.id != self._shard_id
            if moved or now - actor.last_active > self._idle_evict_after:
                self._release_soon((item.key, item.branch))
