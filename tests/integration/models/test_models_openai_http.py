"""`stream_ui_chunks` against a local OpenAI-compatible streaming server, over real HTTP and SSE.

litellm's own `openai/` provider does the request and the SSE parsing; the server replays
scripted `chat.completion.chunk` events chosen by the last user message.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from durachat.models import ModelError, stream_ui_chunks, to_chat_messages
from durachat.types import UIChunk
from support.litellm_calls import count_builds

# litellm builds some pydantic schemas lazily on its first call; pydantic then warns about
# `ReadOnly` TypedDict items (litellm's own ignore filter does not survive pytest's reset).
pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

MODEL = "openai/test-model"


def delta_event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def tool_delta(
    index: int, *, call_id: str | None = None, name: str | None = None, args: str = ""
) -> Any:
    call: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if call_id is not None:
        call["id"] = call_id
        call["type"] = "function"
        call["function"]["name"] = name
    return delta_event({"tool_calls": [call]})


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "text": [
        delta_event({"role": "assistant", "content": ""}),
        delta_event({"content": "Hello"}),
        delta_event({"content": ", world"}),
        delta_event({}, "stop"),
    ],
    "reasoning": [
        delta_event({"role": "assistant", "reasoning_content": "Let me "}),
        delta_event({"reasoning_content": "think."}),
        delta_event({"content": "42"}),
        delta_event({}, "length"),
    ],
    "tools": [
        delta_event({"role": "assistant", "content": None}),
        tool_delta(0, call_id="call_w", name="get_weather"),
        tool_delta(0, args='{"ci'),
        tool_delta(1, call_id="call_t", name="get_time"),
        tool_delta(0, args='ty": "Paris"}'),
        tool_delta(1, args='{"tz": '),
        tool_delta(1, args='"CET"}'),
        delta_event({}, "tool_calls"),
    ],
    "stall": [delta_event({"role": "assistant", "content": "waiting"})],
    # What OpenAI sends when asked for usage: the finish, then a chunk with no choices.
    "usage": [
        delta_event({"role": "assistant", "content": "Hi"}),
        delta_event({}, "stop"),
        {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "test-model",
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    ],
}


class FakeOpenAI:
    """The app, the requests it received, and the server that runs it on a loopback port."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.waiting_for_headers = threading.Event()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.completions)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=2
            )
        )

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        last_user = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        scenario = str(last_user["content"])
        if scenario == "no-headers":
            # A provider that accepts the request but does not answer; ends when the client leaves
            # (with the body read, the next ASGI message is the disconnect).
            self.waiting_for_headers.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(request.receive(), timeout=30)
            return Response(status_code=503)
        if scenario == "rate-limited":
            return JSONResponse(
                {"error": {"message": "slow down", "type": "rate_limit", "code": "rate_limit"}},
                status_code=429,
            )
        return StreamingResponse(self.events(scenario), media_type="text/event-stream")

    async def events(self, scenario: str) -> AsyncIterator[str]:
        for event in SCENARIOS[scenario]:
            yield f"data: {json.dumps(event)}\n\n"
        if scenario == "stall":
            # A model that stops sending mid-reply; only the client's abort ends this request.
            await asyncio.sleep(30)
        yield "data: [DONE]\n\n"

    def start(self) -> threading.Thread:
        thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        return thread


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    thread = server.start()
    yield server
    server.server.should_exit = True
    thread.join(timeout=10)
    server.sock.close()


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Refuse (and record) any connection that is not to a loopback address."""
    refused: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:
            refused.append(address)
            raise OSError("network blocked by test")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield refused
    assert refused == []


def run(fake: FakeOpenAI, scenario: str, **kwargs: Any) -> AsyncIterator[UIChunk]:
    return stream_ui_chunks(
        MODEL,
        [{"role": "user", "content": scenario}],
        api_base=fake.api_base,
        api_key="sk-test-dummy",
        max_retries=0,
        **kwargs,
    )


def normalized(chunks: list[UIChunk]) -> list[UIChunk]:
    names: dict[str, str] = {}
    return [
        {**c, "id": names.setdefault(c["id"], f"p{len(names)}")} if "id" in c else c for c in chunks
    ]


async def test_text_deltas(fake_openai: FakeOpenAI) -> None:
    chunks = [c async for c in run(fake_openai, "text")]
    assert normalized(chunks) == [
        {"type": "start-step"},
        {"type": "text-start", "id": "p0"},
        {"type": "text-delta", "id": "p0", "delta": "Hello"},
        {"type": "text-delta", "id": "p0", "delta": ", world"},
        {"type": "text-end", "id": "p0"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]
    assert fake_openai.requests[-1]["stream"] is True
    assert fake_openai.requests[-1]["model"] == "test-model"


async def test_reasoning_content(fake_openai: FakeOpenAI) -> None:
    chunks = [c async for c in run(fake_openai, "reasoning")]
    assert normalized(chunks) == [
        {"type": "start-step"},
        {"type": "reasoning-start", "id": "p0"},
        {"type": "reasoning-delta", "id": "p0", "delta": "Let me "},
        {"type": "reasoning-delta", "id": "p0", "delta": "think."},
        {"type": "reasoning-end", "id": "p0"},
        {"type": "text-start", "id": "p1"},
        {"type": "text-delta", "id": "p1", "delta": "42"},
        {"type": "text-end", "id": "p1"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "length"},
    ]


async def test_parallel_tool_calls_and_converted_history(fake_openai: FakeOpenAI) -> None:
    history: list[dict[str, Any]] = [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Weather?"}]},
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-get_weather",
                    "toolCallId": "call_old",
                    "state": "output-available",
                    "input": {"city": "Rome"},
                    "output": {"temp": 21},
                },
                {"type": "step-start"},
                {"type": "text", "text": "Rome is 21."},
            ],
        },
        {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "tools"}]},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": {arg: {"type": "string"}}},
            },
        }
        for name, arg in (("get_weather", "city"), ("get_time", "tz"))
    ]
    chunks = [
        c
        async for c in stream_ui_chunks(
            MODEL,
            to_chat_messages(history, system="Be brief."),
            tools=tools,
            api_base=fake_openai.api_base,
            api_key="sk-test-dummy",
            max_retries=0,
        )
    ]
    assert chunks == [
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "call_w", "toolName": "get_weather"},
        {"type": "tool-input-delta", "toolCallId": "call_w", "inputTextDelta": '{"ci'},
        {"type": "tool-input-start", "toolCallId": "call_t", "toolName": "get_time"},
        {"type": "tool-input-delta", "toolCallId": "call_w", "inputTextDelta": 'ty": "Paris"}'},
        {"type": "tool-input-delta", "toolCallId": "call_t", "inputTextDelta": '{"tz": '},
        {"type": "tool-input-delta", "toolCallId": "call_t", "inputTextDelta": '"CET"}'},
        {
            "type": "tool-input-available",
            "toolCallId": "call_w",
            "toolName": "get_weather",
            "input": {"city": "Paris"},
        },
        {
            "type": "tool-input-available",
            "toolCallId": "call_t",
            "toolName": "get_time",
            "input": {"tz": "CET"},
        },
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "tool-calls"},
    ]
    sent = fake_openai.requests[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "get_time"]
    messages = sent["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[0]["content"] == "Be brief."
    call = messages[2]["tool_calls"][0]
    assert call["id"] == "call_old"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Rome"}
    assert messages[3]["tool_call_id"] == "call_old"
    assert json.loads(messages[3]["content"]) == {"temp": 21}
    assert messages[4]["content"] == "Rome is 21."


async def test_http_error_is_a_model_error(fake_openai: FakeOpenAI) -> None:
    with pytest.raises(ModelError) as raised:
        async for _ in run(fake_openai, "rate-limited"):
            pass
    assert raised.value.public_message == (
        "The model provider is rate limiting requests. Try again later."
    )
    assert "sk-test-dummy" not in raised.value.public_message


async def test_abort_interrupts_a_stalled_http_stream(fake_openai: FakeOpenAI) -> None:
    abort = asyncio.Event()
    chunks: list[UIChunk] = []
    first_text = asyncio.Event()

    async def consume() -> None:
        async for chunk in run(fake_openai, "stall", abort=abort):
            chunks.append(chunk)
            if chunk["type"] == "text-delta":
                first_text.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(10):
        await first_text.wait()
    abort.set()
    done, _ = await asyncio.wait({task}, timeout=10)
    if task not in done:
        task.cancel()
        pytest.fail("abort did not end the stream")
    task.result()
    assert [c["type"] for c in chunks] == ["start-step", "text-start", "text-delta"]


async def test_abort_interrupts_a_request_waiting_for_headers(fake_openai: FakeOpenAI) -> None:
    abort = asyncio.Event()
    chunks: list[UIChunk] = []

    async def consume() -> None:
        async for chunk in run(fake_openai, "no-headers", abort=abort):
            chunks.append(chunk)

    task = asyncio.create_task(consume())
    assert await asyncio.to_thread(fake_openai.waiting_for_headers.wait, 10)
    abort.set()
    done, _ = await asyncio.wait({task}, timeout=10)
    if task not in done:
        task.cancel()
        pytest.fail("abort did not end the request")
    task.result()
    assert chunks == []


async def test_the_rest_after_the_finish_is_read_without_litellm_rebuilding_the_reply(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The usage chunk after the finish reason is read (the HTTP response to its end), but
    litellm's end-of-stream rebuild of the whole reply does not run (docs/benchmarks.md, "The
    model call")."""
    builds = count_builds(monkeypatch)
    chunks = [c async for c in run(fake_openai, "usage")]
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["Hi"]
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert fake_openai.requests[-1]["stream_options"] == {"include_usage": True}
    assert builds == []
