"""The no-framework baseline: a bare Redis Streams relay between two processes.

* `python -m bench.baseline producer --redis URL --prefix P`: reads chat requests from the
  stream `P:requests` and, for each, XADDs the same frames durachat's bench agent produces
  (`start`, `start-step`, `text-start`, one stamped `text-delta` per word at the scripted model's
  20 ms pacing, `text-end`, `finish-step`, `finish`, then the terminal frame) to the
  conversation's stream `P:log:<name>`. Appends are batched into one pipelined round trip per
  event-loop tick, like durachat's log writer.
* `python -m bench.baseline relay --redis URL --prefix P --port N`: a minimal Starlette
  WebSocket server on uvicorn (same server settings as the gateway: uvloop, httptools,
  permessage-deflate). A connection to `/agents/<agent>/<name>` gets the identity frame and
  then every entry of `P:log:<name>`, forwarded verbatim; its chat requests are XADDed to
  `P:requests`. One blocking XREAD covers every followed stream plus a wake stream.

Nothing here persists transcripts, leases conversations, or checks anything: it is the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import signal
import time
from typing import Any

RESPONSE = "cf_agent_use_chat_response"
ECHO_INTERVAL = 0.020


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def script(text: str) -> list[str]:
    """The scripted model's echo deltas for `text` (`echo: `, `w1 `, ..., `wN`)."""
    pieces = f"echo: {text.strip()}".split(" ")
    deltas = [piece + " " for piece in pieces[:-1]]
    if pieces[-1]:
        deltas.append(pieces[-1])
    return deltas


# ---------------------------------------------------------------------------------------------
# producer


class Batcher:
    """Queues XADDs and writes them with one pipelined round trip per batch."""

    def __init__(self, redis: Any, maxlen: int = 10_000) -> None:
        self.redis = redis
        self.maxlen = maxlen
        self.queue: list[tuple[str, str]] = []
        self.flusher: asyncio.Task[None] | None = None

    def add(self, key: str, frame: str) -> None:
        self.queue.append((key, frame))
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        await asyncio.sleep(0)
        while self.queue:
            batch, self.queue = self.queue, []
            pipe = self.redis.pipeline(transaction=False)
            for key, frame in batch:
                pipe.xadd(key, {"f": frame}, maxlen=self.maxlen, approximate=True)
            await pipe.execute()


async def play(
    batcher: Batcher,
    key: str,
    request_id: str,
    text: str,
    message_ids: Any,
    *,
    interval: float = ECHO_INTERVAL,
) -> None:
    """Produce one reply's frames at the scripted model's pacing (`interval` between deltas)."""
    seq = 0

    def chunk(body: dict[str, Any]) -> None:
        nonlocal seq
        frame = {
            "body": _dumps(body),
            "done": False,
            "id": request_id,
            "type": RESPONSE,
            "seq": seq,
        }
        seq += 1
        batcher.add(key, _dumps(frame))

    chunk(
        {
            "type": "start",
            "messageId": f"assistant_{int(time.time() * 1000)}_{secrets.token_hex(4)}",
        }
    )
    chunk({"type": "start-step"})
    block = secrets.token_hex(6)
    chunk({"type": "text-start", "id": block})
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, delta in enumerate(script(text)):
        if i:
            await asyncio.sleep(max(0.0, start + i * interval - loop.time()))
        chunk(
            {
                "type": "text-delta",
                "id": block,
                "delta": delta,
                "providerMetadata": {"bench": {"t": time.time_ns()}},
            }
        )
    chunk({"type": "text-end", "id": block})
    chunk({"type": "finish-step"})
    chunk({"type": "finish", "messageMetadata": {"finishReason": "stop"}})
    batcher.add(
        key,
        _dumps(
            {
                "body": "",
                "done": True,
                "id": request_id,
                "type": RESPONSE,
                "messageIds": message_ids,
            }
        ),
    )


async def producer(redis_url: str, prefix: str, interval: float = ECHO_INTERVAL) -> None:
    """Serve requests from `prefix:requests` until cancelled, `interval` seconds between deltas."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url, decode_responses=True)
    batcher = Batcher(redis)
    last = "0-0"
    tasks: set[asyncio.Task[None]] = set()
    try:
        while True:
            result = await redis.xread({f"{prefix}:requests": last}, block=5000, count=1000)
            for _, rows in result or []:
                for entry_id, fields in rows:
                    last = entry_id
                    task = asyncio.create_task(
                        play(
                            batcher,
                            f"{prefix}:log:{fields['c']}",
                            fields["r"],
                            fields["t"],
                            json.loads(fields["m"]),
                            interval=interval,
                        )
                    )
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
    finally:
        await redis.aclose()


# ---------------------------------------------------------------------------------------------
# relay


class Subscriber:
    """One WebSocket: a queue drained by a writer task."""

    def __init__(self, websocket: Any) -> None:
        self.websocket = websocket
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.writer = asyncio.create_task(self.write())

    async def write(self) -> None:
        with contextlib.suppress(Exception):
            while (text := await self.queue.get()) is not None:
                await self.websocket.send_text(text)


class Relay:
    """Follows many streams with one blocking XREAD and fans entries out to subscribers."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        from redis.asyncio import Redis

        self.prefix = prefix
        self.redis = Redis.from_url(redis_url, decode_responses=True)
        self.blocking = Redis.from_url(
            redis_url, decode_responses=True, single_connection_client=True
        )
        self.wake_key = f"{prefix}:wake:{secrets.token_hex(4)}"
        self.follows: dict[str, str] = {}
        self.subscribers: dict[str, set[Subscriber]] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.wake_id = await self.redis.xadd(self.wake_key, {"w": "1"}, maxlen=16)
        self.task = asyncio.create_task(self.loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.blocking.aclose()
        await self.redis.aclose()

    async def subscribe(self, key: str, sub: Subscriber) -> None:
        subs = self.subscribers.get(key)
        if subs is None:
            subs = self.subscribers[key] = set()
            last = await self.redis.xrevrange(key, count=1)
            self.follows[key] = last[0][0] if last else "0-0"
            await self.redis.xadd(self.wake_key, {"w": "1"}, maxlen=16)
        subs.add(sub)

    def unsubscribe(self, key: str, sub: Subscriber) -> None:
        subs = self.subscribers.get(key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[key]
                self.follows.pop(key, None)

    async def loop(self) -> None:
        while True:
            streams = {self.wake_key: self.wake_id, **self.follows}
            result = await self.blocking.xread(streams, block=5000, count=1000)
            for key, rows in result or []:
                if key == self.wake_key:
                    self.wake_id = rows[-1][0]
                    continue
                if key not in self.follows:
                    continue
                self.follows[key] = rows[-1][0]
                for sub in self.subscribers.get(key, ()):
                    put = sub.queue.put_nowait
                    for _, fields in rows:
                        put(fields["f"])


def relay_app(redis_url: str, prefix: str) -> Any:
    """The relay's Starlette application."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    relay = Relay(redis_url, prefix)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()

    async def healthz(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    async def chat(websocket: WebSocket) -> None:
        agent = websocket.path_params["agent"]
        name = websocket.path_params["name"]
        await websocket.accept()
        sub = Subscriber(websocket)
        key = f"{prefix}:log:{name}"
        await relay.subscribe(key, sub)
        sub.queue.put_nowait(_dumps({"type": "cf_agent_identity", "name": name, "agent": agent}))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                frame = json.loads(message.get("text") or "{}")
                if frame.get("type") != "cf_agent_use_chat_request":
                    continue
                messages = json.loads(frame["init"]["body"])["messages"]
                user = next(m for m in reversed(messages) if m.get("role") == "user")
                text = "\n".join(p["text"] for p in user["parts"] if p.get("type") == "text")
                await relay.redis.xadd(
                    f"{prefix}:requests",
                    {"c": name, "r": frame["id"], "t": text, "m": _dumps([user["id"]])},
                )
        finally:
            relay.unsubscribe(key, sub)
            sub.queue.put_nowait(None)
            with contextlib.suppress(Exception):
                await sub.writer

    return Starlette(
        routes=[Route("/healthz", healthz), WebSocketRoute("/agents/{agent}/{name}", chat)],
        lifespan=lifespan,
    )


def main() -> None:
    """Entry point: `producer` or `relay`."""
    parser = argparse.ArgumentParser(prog="python -m bench.baseline")
    parser.add_argument("role", choices=["producer", "relay"])
    parser.add_argument("--redis", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--delta-interval", type=float, default=ECHO_INTERVAL, help="seconds between deltas"
    )
    args = parser.parse_args()
    if args.role == "producer":
        import uvloop

        # Stop cleanly on SIGTERM so a profiled producer gets to write its stats.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            uvloop.run(producer(args.redis, args.prefix, args.delta_interval))
    else:
        import uvicorn

        uvicorn.run(
            relay_app(args.redis, args.prefix),
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            access_log=False,
            ws_per_message_deflate=True,
            timeout_graceful_shutdown=5,
        )


if __name__ == "__main__":
    main()
