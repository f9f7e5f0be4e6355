"""The built-in scripted model: deterministic, offline, served through litellm as a provider.

Call it through litellm like any other model, with the model string `durachat/scripted`, after
`register_scripted_model()`. Its reply depends only on the text of the last user message
(stripped), checked in this order:

* `client-tool:`: a call of the tool `getLocation` with `{}`;
* `approve:<name>`: a call of the tool `processPayment` with
  `{"amount": 42, "recipient": "<name>"}`;
* `tool:<city>`: a call of the tool `getWeather` with `{"city": "<city>"}` (tool calls end the
  step with finish reason `tool_calls`);
* exactly `sure` (any case): one delta, `Sure`;
* contains `slow`: 50 deltas `s00 ` ... `s49 `, `SLOW_INTERVAL` apart;
* contains `error`: the delta `partial `, then a provider error (HTTP 500 to litellm);
* has the word `stall` (whitespace-separated; `install` does not count): the same 50 deltas
  as `slow`, `SLOW_INTERVAL` apart, but without a prefill (below) it goes silent after
  `STALL_AFTER` (10) deltas, `s00 ` ... `s09 `: it sends nothing more, not even a finish,
  and waits until the call is cancelled or the stream closed (for exercising stall
  watchdogs);
* anything else: `echo: <text>` split after each space (`echo: `, `hello `, `world`),
  `ECHO_INTERVAL` apart.

`slow`, `error` and `stall` are matched case-sensitively, in that order, so a text containing
`slow` or `error` means what it did before `stall` existed.

When the conversation ends with tool results (the step after a tool call), the reply is
`tool result: <JSON>`: the JSON of the one output, or an array of them; `tool denied` when the
call was refused.

Assistant prefill (crash recovery). When the last message is an assistant message with
non-empty text and no `tool_calls` (a partial reply being continued, as providers with assistant
prefill treat a trailing assistant message), the model emits only what is missing from the reply
it would have given to the conversation without that message (by the rules above: the last user
text, or the tool-result reply). The prefill text is the message's `content`: a string, or a
list whose `text` parts are concatenated (as `to_chat_messages` concatenates an assistant
message's text parts). If it is a prefix of the full text, only the remainder is streamed, with
the script's delta boundaries (a prefix ending inside a delta makes the rest of that delta the
first one emitted) and the same pacing (the k-th remaining delta is due at
`start + k * interval`); `stall` does not stall then but streams to the end. If it is the whole
text, nothing is emitted (an empty completion, finish reason `stop`). If it is not a prefix
(some other partial text), the whole script is emitted again, without stalling. `error` still
fails after its remainder. A trailing assistant message with `tool_calls`, or one whose text is
empty, is not a prefill: the reply is the normal one.

Deltas are scheduled against the event loop's monotonic clock from the start of the stream (delta
*i* is due at `start + i * interval`), so event-loop jitter does not accumulate. The non-streaming
call returns the whole text (the remainder, after a prefill) after the time the last delta would
have been due; for an unrecovered `stall` it never returns (until cancelled).

Delays are `interval * scale`. The scale comes from the `delay_scale` keyword of the litellm call
(`litellm.acompletion(..., delay_scale=0.01)`; litellm hands unknown keywords to custom providers
as `optional_params`), else from the environment variable `DURACHAT_SCRIPTED_DELAY_SCALE`, else
1.0. A scale of 0 removes the delays (each delta still yields to the event loop once).

Usage is deterministic: prompt tokens are the whitespace-separated words of all message texts
(the prefill included), completion tokens the number of deltas emitted (plus tool calls).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from durachat.models._litellm import (
    CustomLLM,
    GenericStreamingChunk,
    ModelResponse,
    declare_free,
    provider_error,
    register_provider,
)

__all__ = [
    "DELAY_SCALE_ENV",
    "ECHO_INTERVAL",
    "PROVIDER",
    "SCRIPTED_MODEL",
    "SLOW_INTERVAL",
    "STALL_AFTER",
    "ScriptedLLM",
    "register_scripted_model",
]

PROVIDER: Final = "durachat"
SCRIPTED_MODEL: Final = f"{PROVIDER}/scripted"
ECHO_INTERVAL: Final = 0.020
"""Seconds between echo deltas at scale 1."""
SLOW_INTERVAL: Final = 0.100
"""Seconds between `slow` deltas at scale 1."""
SLOW_DELTAS: Final = 50
STALL_AFTER: Final = 10
"""Deltas a `stall` reply sends before it goes silent (when not continuing a prefill)."""
DELAY_SCALE_ENV: Final = "DURACHAT_SCRIPTED_DELAY_SCALE"
ERROR_MESSAGE: Final = "scripted model failure"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the scripted model makes."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Script:
    """What the scripted model replies to one request."""

    deltas: tuple[str, ...]
    interval: float
    fails: bool = False
    calls: tuple[ToolCall, ...] = ()
    stall_after: int | None = None
    """Go silent for good after this many deltas (the `stall` directive)."""

    def continuing(self, prefill: str) -> Script:
        """What is left to send when the reply so far is `prefill` (see the module docstring)."""
        if not "".join(self.deltas).startswith(prefill):
            # Some other partial text: send the whole reply again, without stalling.
            return Script(self.deltas, self.interval, self.fails, self.calls)
        done = 0  # length of the deltas before delta i
        for i, delta in enumerate(self.deltas):
            if done + len(delta) > len(prefill):  # the prefill ends before this delta's end
                remaining = (delta[len(prefill) - done :], *self.deltas[i + 1 :])
                return Script(remaining, self.interval, self.fails, self.calls)
            done += len(delta)
        return Script((), self.interval, self.fails, self.calls)  # the prefill is the whole text


TOOL_DIRECTIVE: Final = "tool:"
CLIENT_TOOL_DIRECTIVE: Final = "client-tool:"
APPROVE_DIRECTIVE: Final = "approve:"
DENIED_RESULT: Final = "Tool execution denied."
_COUNTED: Final = tuple(f"s{i:02d} " for i in range(SLOW_DELTAS))
"""The deltas of `slow` and `stall`."""


def script_for(text: str) -> Script:
    """The reply to a last user message whose text is `text` (delays at scale 1)."""
    text = text.strip()
    if text.startswith(CLIENT_TOOL_DIRECTIVE):
        return Script((), 0.0, calls=(ToolCall("getLocation", {}),))
    if text.startswith(APPROVE_DIRECTIVE):
        name = text[len(APPROVE_DIRECTIVE) :].strip()
        call = ToolCall("processPayment", {"amount": 42, "recipient": name})
        return Script((), 0.0, calls=(call,))
    if text.startswith(TOOL_DIRECTIVE):
        city = text[len(TOOL_DIRECTIVE) :].strip()
        return Script((), 0.0, calls=(ToolCall("getWeather", {"city": city}),))
    if text.lower() == "sure":
        return Script(("Sure",), 0.0)
    if "slow" in text:
        return Script(_COUNTED, SLOW_INTERVAL)
    if "error" in text:
        return Script(("partial ",), 0.0, fails=True)
    if "stall" in text.split():
        return Script(_COUNTED, SLOW_INTERVAL, stall_after=STALL_AFTER)
    pieces = f"echo: {text}".split(" ")
    deltas = [piece + " " for piece in pieces[:-1]]
    if pieces[-1]:
        deltas.append(pieces[-1])
    return Script(tuple(deltas), ECHO_INTERVAL)


def _content_text(content: Any, separator: str = "\n") -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return separator.join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def _tool_results(messages: list[dict[str, Any]]) -> list[Any] | None:
    """Outputs of the tool results that end the conversation, if it ends with some."""
    outputs: list[Any] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        content = _content_text(message.get("content"))
        try:
            outputs.append(json.loads(content))
        except ValueError:
            outputs.append(content)
    if not outputs:
        return None
    outputs.reverse()
    return outputs


def _prefill(messages: list[dict[str, Any]]) -> str | None:
    """The text of a trailing assistant message being continued, if the conversation has one."""
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    # An assistant message's text parts are one text, as `to_chat_messages` concatenates them.
    return _content_text(last.get("content"), separator="") or None


def script_for_messages(messages: list[dict[str, Any]]) -> Script:
    """The reply to a whole conversation: a tool-result step, or by the last user text.

    A trailing assistant text (a prefill) is continued: see the module docstring.
    """
    prefill = _prefill(messages)
    if prefill is None:
        return _reply_script(messages)
    return _reply_script(messages[:-1]).continuing(prefill)


def _reply_script(messages: list[dict[str, Any]]) -> Script:
    outputs = _tool_results(messages)
    if outputs is not None:
        if all(isinstance(o, str) and o.startswith(DENIED_RESULT) for o in outputs):
            return Script(("tool denied",), 0.0)
        shown = outputs[0] if len(outputs) == 1 else outputs
        return Script(("tool result: " + json.dumps(shown, separators=(",", ":")),), 0.0)
    return script_for(_last_user_text(messages))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(_content_text(message.get("content")).split()) for message in messages)


def _delay_scale(optional_params: Mapping[str, Any]) -> float:
    raw = optional_params.get("delay_scale")
    if raw is None:
        raw = os.environ.get(DELAY_SCALE_ENV, "1.0")
    try:
        scale = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"scripted model: delay scale must be a number, got {raw!r}") from None
    if not scale >= 0.0:  # also rejects NaN
        raise ValueError(f"scripted model: delay scale must be >= 0, got {raw!r}")
    return scale


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    # sleep(0) when already due, so a zero-delay stream still lets other tasks run.
    await asyncio.sleep(max(0.0, deadline - loop.time()))


async def _stall(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until cancelled: a future nobody resolves (cancelling it leaves nothing behind)."""
    await loop.create_future()


class ScriptedLLM(CustomLLM):
    """litellm custom provider that plays a `Script` (see the module docstring)."""

    # litellm calls the handler with keyword arguments only (model, messages, optional_params,
    # model_response, logging_obj, ...); this model needs three of them.

    def astreaming(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        # The base class declares a coroutine, but litellm uses the return value directly as the
        # async iterator of chunks, so this must return the generator without awaiting.
        messages: list[dict[str, Any]] = kwargs["messages"]
        script = script_for_messages(messages)
        scale = _delay_scale(kwargs.get("optional_params") or {})
        return self._play(script, scale, _prompt_tokens(messages), str(kwargs.get("model", "")))

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """Return the whole scripted text (or remainder) once its last delta would have been due.

        An unrecovered `stall` never returns: it waits, like the stream, until cancelled.
        """
        messages: list[dict[str, Any]] = kwargs["messages"]
        script = script_for_messages(messages)
        scale = _delay_scale(kwargs.get("optional_params") or {})
        model = str(kwargs.get("model", ""))
        loop = asyncio.get_running_loop()
        start = loop.time()
        if script.stall_after is not None and script.stall_after < len(script.deltas):
            await _sleep_until(loop, start + (script.stall_after - 1) * script.interval * scale)
            await _stall(loop)
        await _sleep_until(loop, start + (len(script.deltas) - 1) * script.interval * scale)
        if script.fails:
            raise provider_error(ERROR_MESSAGE, provider=PROVIDER, model=model)
        prompt_tokens = _prompt_tokens(messages)
        completion_tokens = len(script.deltas)
        return ModelResponse(
            model=model,
            choices=[
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "".join(script.deltas)},
                }
            ],
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        )

    @staticmethod
    async def _play(
        script: Script, scale: float, prompt_tokens: int, model: str
    ) -> AsyncIterator[GenericStreamingChunk]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        interval = script.interval * scale
        for i, delta in enumerate(script.deltas):
            if i == script.stall_after:
                await _stall(loop)
            if i:
                await _sleep_until(loop, start + i * interval)
            yield {
                "text": delta,
                "tool_use": None,
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }
        if script.fails:
            raise provider_error(ERROR_MESSAGE, provider=PROVIDER, model=model)
        for index, call in enumerate(script.calls):
            yield {
                "text": "",
                "tool_use": {
                    "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    "index": index,
                },
                "is_finished": False,
                "finish_reason": "",
                "usage": None,
                "index": 0,
            }
        completion_tokens = len(script.deltas) + len(script.calls)
        yield {
            "text": "",
            "tool_use": None,
            "is_finished": True,
            "finish_reason": "tool_calls" if script.calls else "stop",
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "index": 0,
        }


_HANDLER: Final = ScriptedLLM()


def register_scripted_model() -> None:
    """Make `SCRIPTED_MODEL` (`durachat/scripted`) callable through litellm.

    Idempotent; `stream_ui_chunks` calls it for `durachat/...` models, so only direct
    `litellm` callers need it.
    """
    register_provider(PROVIDER, _HANDLER)
    declare_free(SCRIPTED_MODEL, PROVIDER)
