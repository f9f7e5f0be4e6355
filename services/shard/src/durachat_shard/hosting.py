"""The conversations a shard holds: activation under a lease, renewal, eviction, hand-off."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx
from redis.asyncio import Redis

from durachat.agent import AgentRegistry
from durachat.messages import enforce_row_size_limit, sanitize_message
from durachat_infra.cluster import ClusterView, LeaseHeldError, Leases, wake_owner
from durachat_infra.eventlog import LogWriter
from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.store import ConversationKey, FencedError, Store
from durachat_infra.tasks import cancel_and_wait
from durachat_shard.actor import ConversationActor
from durachat_shard.emitter import Emitter
from durachat_shard.incidents import Incidents
from durachat_shard.transcript import Transcript

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


def routing_key(key: ConversationKey) -> str:
    """The string rendezvous hashing places (shared by gateways and shards)."""
    return conversation_tag(key.tenant, key.agent, key.name)


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
        redis: Redis,
        drain_timeout: float = 10.0,
        turn_heartbeat_interval: float = 2.0,
    ) -> None:
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
        self._held: dict[ConversationKey, _Held] = {}
        self._activating: dict[ConversationKey, asyncio.Future[_Held]] = {}
        self._task: asyncio.Task[None] | None = None
        self._draining = False

    def __len__(self) -> int:
        return len(self._held)

    async def start(self) -> None:
        """Start lease renewal, eviction and hand-off."""
        self._task = asyncio.create_task(self._maintain(), name="conversations-maintain")

    async def stop(self) -> None:
        """Release every conversation (the graceful drain, DESIGN §4): running turns get up to
        the drain timeout to finish; the rest are checkpointed, released, and their new owners
        are asked to continue them at once."""
        self._draining = True
        # Leases stay renewed (and idle conversations released) while running turns finish.
        deadline = time.monotonic() + self._drain_timeout
        while any(h.actor.busy for h in self._held.values()) and time.monotonic() < deadline:  # noqa: ASYNC110 - "busy" spans many actors and queues
            await asyncio.sleep(0.05)
        await cancel_and_wait(self._task)
        await cancel_and_wait(self._beat)
        handed: list[ConversationKey] = []
        for key, held in list(self._held.items()):
            if held.actor.busy and not held.actor.fenced:
                log.info("checkpointing %s for its next owner", key)
                await held.actor.checkpoint()
                handed.append(key)
        await asyncio.gather(
            *(self._release(key) for key in list(self._held)),
            *list(self._releasing),
            return_exceptions=True,
        )
        if handed:
            await self._hand_over(handed)

    async def _hand_over(self, keys: list[ConversationKey]) -> None:
        """Wake the new owners of checkpointed conversations (best effort: the jobs service
        finds any that are missed)."""
        await self._view.refresh()
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=1.0)) as http:
            woken = await asyncio.gather(
                *(wake_owner(self._view, key, http, exclude=self._shard_id) for key in keys)
            )
        log.info("handed over %d of %d conversations", sum(woken), len(keys))

    async def get(self, key: ConversationKey) -> ConversationActor:
        """The actor of `key`, activating it if needed.

        Raises `NotOwnerError` when another shard owns the conversation and
        `UnknownAgentError` when the agent is not served here.
        """
        if self._draining:
            # Gateways retry elsewhere once this shard has left the membership.
            raise NotOwnerError(None)
        held = self._held.get(key)
        if held is not None and not held.actor.fenced:
            return held.actor
        if held is not None:
            await self._release(key)
        owner = self._view.owner(routing_key(key))
        if owner is None or owner.id != self._shard_id:
            raise NotOwnerError(None if owner is None else owner.id)
        pending = self._activating.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._activating[key] = pending
            try:
                pending.set_result(await self._activate(key))
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # mark retrieved; callers get it below
            finally:
                del self._activating[key]
        return (await asyncio.shield(pending)).actor

    def on_log_fenced(self, keys: ConversationKeys) -> None:
        """The event log refused a write: another shard owns the conversation now."""
        for held in self._held.values():
            if held.keys == keys:
                held.actor.step_down()

    async def _activate(self, key: ConversationKey) -> _Held:
        agent_cls = self._agents.get(key.agent)
        if agent_cls is None:
            raise UnknownAgentError(key.agent)
        keys = ConversationKeys(self._prefix, routing_key(key))
        try:
            grant = await self._leases.acquire(keys)
        except LeaseHeldError as exc:
            # A live shard still holds it (it is finishing a turn, or draining): send the
            # gateway there. Gateways keep retrying until the holder lets go.
            raise NotOwnerError(exc.holder) from exc
        conversation = await self._store.get_or_create_conversation(key)
        epoch = await self._claim(keys, conversation.id, grant.epoch, fresh=grant.fresh)
        stored = await self._store.load_path(conversation.id)
        # Activation can outlast the lease when the database is slow; confirm it is still held
        # (renewing it), and if it had to be taken again, claim the new epoch and re-read.
        again = await self._leases.acquire(keys)
        if again.fresh:
            epoch = await self._claim(keys, conversation.id, again.epoch, fresh=True)
            stored = await self._store.load_path(conversation.id)
        agent = agent_cls(key.name, model=self._model)
        transcript = Transcript(
            [(m.pk, m.message) for m in stored],
            # Built-in sanitising, the agent's own, then row-size compaction.
            sanitize=lambda m: enforce_row_size_limit(
                agent.sanitize_message_for_persistence(sanitize_message(m))
            ),
        )
        recent = await self._store.recent_request_ids(conversation.id)
        last_body, last_client_tools = await self._store.load_request_context(conversation.id)
        agent.messages = transcript.messages
        actor = ConversationActor(
            conversation_id=conversation.id,
            key=key,
            epoch=epoch,
            shard_id=self._shard_id,
            agent=agent,
            transcript=transcript,
            store=self._store,
            emitter=Emitter(self._writer, keys, self._redis),
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
        agent.host = actor
        try:
            # Turns a former owner left unfinished are recovered before any new input.
            await actor.recover(await self._store.open_turns(conversation.id))
        except BaseException:
            await actor.stop()
            await self._leases.release(keys)
            raise
        actor.start()
        held = _Held(key, keys, actor)
        self._held[key] = held
        log.info("activated %s/%s/%s at epoch %d", key.tenant, key.agent, key.name, epoch)
        return held

    async def _claim(
        self, keys: ConversationKeys, conversation_id: int, epoch: int, *, fresh: bool
    ) -> int:
        """Raise the conversation's SQL epoch to this tenure's; returns the epoch in force."""
        try:
            await self._store.claim(conversation_id, epoch, fresh=fresh)
            return epoch
        except FencedError as exc:
            # The database has seen a newer epoch than Redis hands out: Redis lost its data.
            # Holding the lease, this shard is the rightful owner; move past the stored epoch.
            log.warning("epoch counter behind the database for %s; advancing it", keys.tag)
            try:
                advanced = await self._leases.advance_epoch(keys, exc.current_epoch + 1)
                await self._store.claim(conversation_id, advanced)
            except BaseException:
                await self._leases.release(keys)
                raise
            return advanced

    async def _release(self, key: ConversationKey) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        await held.actor.stop()
        await self._writer.flush()
        try:
            await self._leases.release(held.keys)
        except Exception:
            log.warning("could not release the lease of %s", key, exc_info=True)
        log.info("released %s/%s/%s", key.tenant, key.agent, key.name)

    async def _maintain(self) -> None:
        interval = max(self._lease_ttl / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                await self._maintain_once()
            except Exception:
                log.warning("conversation maintenance failed", exc_info=True)

    def _release_soon(self, key: ConversationKey) -> None:
        """Release a conversation in the background: stopping its actor can take a while,
        and the other conversations' leases must be renewed meanwhile."""
        if key not in self._held:
            return
        task = asyncio.create_task(self._release(key))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _heartbeat(self) -> None:
        try:
            await self._store.heartbeat_turns(self._shard_id)
        except Exception:
            log.warning("could not record the turn heartbeat", exc_info=True)

    async def _maintain_once(self) -> None:
        held = list(self._held.values())
        if not held:
            return
        renewed = await self._leases.renew_many([h.keys for h in held])
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
        for item, ok in zip(held, renewed, strict=True):
            actor = item.actor
            if not ok or actor.fenced:
                log.warning("lost the lease of %s", item.key)
                self._release_soon(item.key)
                continue
            if actor.busy:
                continue
            owner = self._view.owner(routing_key(item.key))
            moved = owner is not None and owner.id != self._shard_id
            if moved or now - actor.last_active > self._idle_evict_after:
                self._release_soon(item.key)
