"""The load generator: chat conversations over the agents chat protocol, run in worker processes.

Each worker process runs one uvloop event loop per command and drives its share of the
conversations with the lean client in `bench.client`. The same code drives durachat's gateway
and the baseline relay (both serve `/agents/<agent>/<name>`).

Commands (dicts sent over a pipe) and what they return:

Every command names its conversations (`names`) and where to connect: `host` and `port`, or
one port per name in `ports` (the conversations spread over several gateways).

* `converse`: connect `names`, run `warmup` synchronised rounds (not measured; the first one's
  messages spread over `ramp_s` seconds), then `rounds`
  measured rounds (`chain`: each conversation sends its next message as soon as its previous
  reply is done; otherwise rounds are synchronised across all conversations and workers).
* `sequential`: `count` new conversations one after another: connect, a first (cold) request,
  a second (warm) request, close.
* `idle`: open `per_name` idle connections to each of `names`, report "ready" to the parent,
  hold them until told to release.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import resource
import secrets
import time
import traceback
import uuid
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.client import WsConnection, connect

RESPONSE = "cf_agent_use_chat_response"
IDENTITY = "cf_agent_identity"
ERROR = "durachat_error"
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]

Command = dict[str, Any]


def prompt(words: int, seed: int) -> str:
    """A user message of `words` words (never one of the scripted model's magic words)."""
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(words))


@dataclass(slots=True)
class Request:
    """One chat request in flight and what was received for it."""

    id: str
    round: int
    expected: int
    sent_ns: int = 0
    first_delta_ns: int = 0
    last_ns: int = 0
    done_ns: int = 0
    deltas: int = 0
    next_seq: int = 0
    seq_errors: int = 0
    error_frames: int = 0
    outcome: str | None = None
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def record(self, timed_out: bool, closed: bool) -> dict[str, Any]:
        """What the parent gets back about this request."""
        errors: list[str] = []
        if timed_out:
            errors.append("timeout")
        if closed:
            errors.append("closed")
        if self.error_frames:
            errors.append("error_frame")
        if self.seq_errors:
            errors.append("seq")
        if self.done_ns and self.deltas != self.expected:
            errors.append("missing_deltas" if self.deltas < self.expected else "extra_deltas")
        if self.outcome not in (None, "completed"):
            errors.append(f"outcome_{self.outcome}")
        return {
            "round": self.round,
            "ttft_ms": (self.first_delta_ns - self.sent_ns) / 1e6 if self.first_delta_ns else None,
            "total_ms": (self.done_ns - self.sent_ns) / 1e6 if self.done_ns else None,
            "sent_ns": self.sent_ns,
            "done_ns": self.done_ns,
            "last_ns": self.last_ns,
            "deltas": self.deltas,
            "expected": self.expected,
            "errors": errors,
        }


class Samples:
    """Delivery latencies (µs, receive time - model stamp) per round, for one worker."""

    def __init__(self) -> None:
        self.latency_us: dict[int, array[int]] = {}
        self.unstamped = 0

    def add(self, round_index: int, micros: int) -> None:
        """Record one latency."""
        bucket = self.latency_us.get(round_index)
        if bucket is None:
            bucket = self.latency_us[round_index] = array("q")
        bucket.append(micros)


class Conversation:
    """One conversation over one WebSocket: sends requests, checks and times what comes back."""

    def __init__(self, name: str, samples: Samples) -> None:
        self.name = name
        self.samples = samples
        self.conn: WsConnection | None = None
        self.identity: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.history: list[dict[str, Any]] = []
        self.request: Request | None = None
        self.stray = 0
        self.other_errors = 0

    def on_text(self, data: bytes, now: int) -> None:
        """Handle one received frame (called from the transport's `data_received`)."""
        frame = json.loads(data)
        kind = frame.get("type")
        if kind == RESPONSE:
            request = self.request
            if request is None or frame.get("id") != request.id:
                self.stray += 1
                return
            request.last_ns = now
            seq = frame.get("seq")
            if seq is not None:
                if seq != request.next_seq:
                    request.seq_errors += 1
                if seq >= request.next_seq:
                    request.next_seq = seq + 1
                chunk = json.loads(frame["body"])
                chunk_type = chunk.get("type")
                if chunk_type == "text-delta":
                    if not request.deltas:
                        request.first_delta_ns = now
                    request.deltas += 1
                    request.text.append(chunk.get("delta", ""))
                    try:
                        stamp = chunk["providerMetadata"]["bench"]["t"]
                    except (KeyError, TypeError):
                        self.samples.unstamped += 1
                    else:
                        self.samples.add(request.round, (now - stamp) // 1000)
                elif chunk_type == "start":
                    request.message_id = chunk.get("messageId")
            elif frame.get("error"):
                request.error_frames += 1
                # A request the gateway refused (its shard was unavailable) ends with this one
                # frame, `done` and `error` both set (docs/protocol.md).
                if frame.get("done"):
                    request.done_ns = now
                    request.outcome = frame.get("outcome")
                    if not request.done.done():
                        request.done.set_result(None)
            elif frame.get("done"):
                request.done_ns = now
                request.outcome = frame.get("outcome")
                if not request.done.done():
                    request.done.set_result(None)
        elif kind == IDENTITY:
            if not self.identity.done():
                self.identity.set_result(now)
        elif kind == ERROR:
            self.other_errors += 1
            if self.request is not None:
                self.request.error_frames += 1

    async def open(
        self, host: str, port: int, agent: str, *, deflate: bool, query: str = ""
    ) -> dict[str, float]:
        """Connect (with `query` added to the URL); returns the handshake and identity times
        (ms from the connect call)."""
        start = time.time_ns()
        path = f"/agents/{agent}/{self.name}?_pk={uuid.uuid4()}" + (f"&{query}" if query else "")
        self.conn = await connect(host, port, path, self.on_text, deflate=deflate)
        opened = time.time_ns()
        identity_ns = await asyncio.wait_for(asyncio.shield(self.identity), 30.0)
        return {"open_ms": (opened - start) / 1e6, "identity_ms": (identity_ns - start) / 1e6}

    async def send(self, round_index: int, text: str, timeout: float) -> dict[str, Any]:
        """Send one user message and wait for the reply's terminal frame."""
        assert self.conn is not None
        user = {
            "id": secrets.token_hex(8),
            "role": "user",
            "parts": [{"type": "text", "text": text}],
        }
        self.history.append(user)
        request = Request(secrets.token_hex(4), round_index, expected=len(text.split()) + 1)
        body = json.dumps({"messages": self.history, "trigger": "submit-message"})
        frame = json.dumps(
            {
                "id": request.id,
                "init": {"method": "POST", "body": body},
                "type": "cf_agent_use_chat_request",
            }
        )
        self.request = request
        request.sent_ns = time.time_ns()
        self.conn.send_text(frame)
        closed = self.conn.closed
        await asyncio.wait({request.done, closed}, timeout=timeout, return_when="FIRST_COMPLETED")
        timed_out = not request.done.done() and not closed.done()
        self.history.append(
            {
                "id": request.message_id or f"assistant_{secrets.token_hex(6)}",
                "role": "assistant",
                "parts": [
                    {"type": "step-start"},
                    {"type": "text", "text": "".join(request.text), "state": "done"},
                ],
            }
        )
        return request.record(timed_out, closed.done() and not request.done.done())

    async def close(self) -> None:
        """Close the socket."""
        if self.conn is not None:
            await self.conn.close()


async def _bounded(
    limit: int, factories: list[Callable[[], Awaitable[Any]]]
) -> list[Any | BaseException]:
    gate = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await factory()

    return await asyncio.gather(*(one(f) for f in factories), return_exceptions=True)


def _connect_results(
    convs: list[Conversation], results: list[Any | BaseException]
) -> tuple[list[Conversation], dict[str, Any]]:
    ok: list[Conversation] = []
    open_ms: list[float] = []
    identity_ms: list[float] = []
    failures: list[str] = []
    for conv, result in zip(convs, results, strict=True):
        if isinstance(result, BaseException):
            failures.append(repr(result)[:200])
        else:
            ok.append(conv)
            open_ms.append(result["open_ms"])
            identity_ms.append(result["identity_ms"])
    return ok, {"open_ms": open_ms, "identity_ms": identity_ms, "failures": failures}


async def _after(delay: float, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """`work`, started `delay` seconds from now."""
    if delay > 0:
        await asyncio.sleep(delay)
    return await work


def _ports(command: Command) -> list[int]:
    """The port each of the command's conversations connects to: `ports` (one per name, to
    spread conversations over several gateways), else `port` for all."""
    ports: list[int] | None = command.get("ports")
    if ports is None:
        return [command["port"]] * len(command["names"])
    if len(ports) != len(command["names"]):
        raise ValueError(f"{len(ports)} ports for {len(command['names'])} conversations")
    return ports


class Worker:
    """Runs commands in one worker process."""

    def __init__(self, index: int, pipe: Connection, barrier: Barrier) -> None:
        self.index = index
        self.pipe = pipe
        self.barrier = barrier

    def mark(self, label: str) -> None:
        """Tell the parent a point in the run was reached (worker 0 speaks for all)."""
        if self.index == 0:
            self.pipe.send(("mark", label))

    async def sync(self, command: Command) -> None:
        """Wait for the other workers taking part in `command`."""
        if command.get("sync"):
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self.barrier.wait, 300.0)

    async def dispatch(self, command: Command) -> dict[str, Any]:
        """Run one command."""
        op = command["op"]
        if op == "converse":
            return await self.converse(command)
        if op == "sequential":
            return await self.sequential(command)
        if op == "idle":
            return await self.idle(command)
        raise ValueError(f"unknown command {op!r}")

    async def converse(self, command: Command) -> dict[str, Any]:
        host, agent = command["host"], command["agent"]
        query = command.get("query", "")
        deflate, timeout, words = command["deflate"], command["timeout"], command["words"]
        samples = Samples()
        convs = [Conversation(name, samples) for name in command["names"]]
        ports = _ports(command)
        results = await _bounded(
            command.get("connect_concurrency", 50),
            [
                lambda c=c, p=p: c.open(host, p, agent, deflate=deflate, query=query)  # type: ignore[misc]
                for c, p in zip(convs, ports, strict=True)
            ],
        )
        convs, connects = _connect_results(convs, results)
        requests: list[dict[str, Any]] = []
        await self.sync(command)
        ramp = float(command.get("ramp_s", 0.0))
        for w in range(command["warmup"]):
            round_index = -1 - w
            # The first message of each conversation (its activation on a shard) is spread
            # over `ramp_s` seconds: conversations arrive over time, not in one instant.
            step = ramp / len(convs) if w == 0 and convs else 0.0
            requests += await asyncio.gather(
                *(
                    _after(i * step, c.send(round_index, prompt(words, i + w), timeout))
                    for i, c in enumerate(convs)
                )
            )
            await self.sync(command)
        rounds = command["rounds"]
        self.mark("measure-start")
        start = end = time.time_ns()
        if command["chain"]:

            async def chain(i: int, conv: Conversation) -> list[dict[str, Any]]:
                return [
                    await conv.send(r, prompt(words, i + 7 * r), timeout) for r in range(rounds)
                ]

            for out in await asyncio.gather(*(chain(i, c) for i, c in enumerate(convs))):
                requests += out
            end = time.time_ns()
            await self.sync(command)
        else:
            for r in range(rounds):
                requests += await asyncio.gather(
                    *(c.send(r, prompt(words, i + 7 * r), timeout) for i, c in enumerate(convs))
                )
                end = time.time_ns()
                await self.sync(command)
        self.mark("measure-end")
        await asyncio.gather(*(c.close() for c in convs), return_exceptions=True)
        return {
            "connect": connects,
            "requests": requests,
            "window_ns": [start, end],
            "latency_us": {r: list(v) for r, v in samples.latency_us.items()},
            "unstamped": samples.unstamped,
            "stray_frames": sum(c.stray for c in convs),
            "other_errors": sum(c.other_errors for c in convs),
        }

    async def sequential(self, command: Command) -> dict[str, Any]:
        host, agent = command["host"], command["agent"]
        query = command.get("query", "")
        deflate, timeout, words = command["deflate"], command["timeout"], command["words"]
        samples = Samples()
        requests: list[dict[str, Any]] = []
        identity_ms: list[float] = []
        failures: list[str] = []
        stray = 0
        deadline = time.monotonic() + command.get("budget_s", 1e9)
        skipped = 0
        for i, (name, port) in enumerate(zip(command["names"], _ports(command), strict=True)):
            if time.monotonic() > deadline:
                skipped += 1
                continue
            conv = Conversation(name, samples)
            try:
                identity_ms.append(
                    (await conv.open(host, port, agent, deflate=deflate, query=query))[
                        "identity_ms"
                    ]
                )
            except Exception as exc:
                failures.append(repr(exc)[:200])
                await conv.close()
                continue
            for r in range(command["per_conversation"]):
                requests.append(await conv.send(r, prompt(words, i + r), timeout))
            stray += conv.stray
            await conv.close()
        return {
            "connect": {"identity_ms": identity_ms, "open_ms": [], "failures": failures},
            "requests": requests,
            "stray_frames": stray,
            "skipped_over_budget": skipped,
        }

    async def idle(self, command: Command) -> dict[str, Any]:
        host, port, agent = command["host"], command["port"], command["agent"]
        query = command.get("query", "")
        samples = Samples()
        convs = [
            Conversation(name, samples)
            for name in command["names"]
            for _ in range(command["per_name"])
        ]
        results = await _bounded(
            command.get("connect_concurrency", 100),
            [
                lambda c=c: c.open(host, port, agent, deflate=command["deflate"], query=query)  # type: ignore[misc]
                for c in convs
            ],
        )
        convs, connects = _connect_results(convs, results)
        self.pipe.send(("ready", {"open": len(convs), "failures": len(connects["failures"])}))
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(None, self.pipe.recv)
        assert message == "release", message
        dropped = sum(1 for c in convs if c.conn is not None and c.conn.closed.done())
        await _bounded(200, [c.close for c in convs])
        return {"connect": connects, "dropped_while_idle": dropped}


def worker_main(index: int, pipe: Connection, barrier: Barrier) -> None:
    """Entry point of a load-generator process."""
    import uvloop

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    worker = Worker(index, pipe, barrier)
    while True:
        try:
            command = pipe.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if command is None:
            return
        try:
            result = uvloop.run(worker.dispatch(command))
            pipe.send(("ok", result))
        except KeyboardInterrupt:
            return
        except BaseException:
            pipe.send(("error", traceback.format_exc()))


class WorkerError(RuntimeError):
    """A load-generator process failed or did not answer in time."""


class ClientPool:
    """The load-generator processes (spawned once, reused by every phase)."""

    def __init__(self, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.size = size
        self.barrier = ctx.Barrier(size)
        self.pipes: list[Connection] = []
        self.processes: list[mp.process.BaseProcess] = []
        for index in range(size):
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=worker_main, args=(index, child, self.barrier), name=f"bench-client-{index}"
            )
            process.start()
            child.close()
            self.pipes.append(parent)
            self.processes.append(process)

    def reset(self) -> None:
        """Make the barrier usable again after a failed command aborted it."""
        self.barrier.reset()

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers."""
        return [p.pid for p in self.processes if p.pid is not None]

    def _receive(
        self, index: int, deadline: float, on_mark: Callable[[str], None] | None = None
    ) -> tuple[str, Any]:
        pipe = self.pipes[index]
        while True:
            timeout = max(deadline - time.monotonic(), 0.1)
            if not pipe.poll(timeout):
                self.barrier.abort()
                raise WorkerError(f"load generator {index} did not answer in time")
            message: tuple[str, Any] = pipe.recv()
            if message[0] == "mark":
                if on_mark is not None:
                    on_mark(message[1])
                continue
            if message[0] == "error":
                self.barrier.abort()
                raise WorkerError(f"load generator {index} failed:\n{message[1]}")
            return message

    def run(
        self,
        commands: list[Command | None],
        timeout: float,
        on_mark: Callable[[str], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Run one command per worker (None: that worker sits out) and collect the results."""
        active = [i for i, c in enumerate(commands) if c is not None]
        for i in active:
            self.pipes[i].send(commands[i])
        deadline = time.monotonic() + timeout
        return [self._receive(i, deadline, on_mark)[1] for i in active]

    def run_idle(
        self, commands: list[Command], hold: Callable[[list[dict[str, Any]]], None], timeout: float
    ) -> list[dict[str, Any]]:
        """Open idle connections on every worker, call `hold` while they are open, then close."""
        for pipe, command in zip(self.pipes, commands, strict=True):
            pipe.send(command)
        deadline = time.monotonic() + timeout
        ready = [self._receive(i, deadline)[1] for i in range(self.size)]
        try:
            hold(ready)
        finally:
            for pipe in self.pipes:
                pipe.send("release")
        return [self._receive(i, deadline)[1] for i in range(self.size)]

    def close(self) -> None:
        """Stop the workers."""
        for pipe in self.pipes:
            with contextlib.suppress(OSError, ValueError):
                pipe.send(None)
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
