"""The litellm adapter: UI messages in, UI message stream chunks out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from durachat.models._chat_messages import to_chat_messages
from durachat.models._litellm import (
    CompletionStream,
    open_stream,
    reports_usage,
    to_model_error,
    unread_rest,
)
from durachat.models._litellm import warm_up as _warm_up
from durachat.models._ui_chunks import UIChunkConverter
from durachat.models.scripted import PROVIDER as _SCRIPTED_PROVIDER
from durachat.models.scripted import register_scripted_model
from durachat.observability.genai import ModelCallSpan
from durachat.types import JSONDict, UIChunk

__all__ = ["stream_ui_chunks", "to_chat_messages", "warm_up"]

_T = TypeVar("_T")

WARM_UP_TIMEOUT = 10.0
"""Seconds `warm_up` may take before a starting process gives up on it and goes on."""

log = logging.getLogger(__name__)


class _AbortedError(Exception):
    """The abort event was set while waiting for the model."""


class _AbortGuard:
    """Interrupts a wait on the model when an abort event is set.

    One watcher task per stream (not per chunk): when the event is set while the consuming task
    is suspended in `wait`, the watcher cancels that task and `wait` turns the cancellation into
    `_AbortedError`, the way `asyncio.timeout` does. Between waits the event is polled instead,
    so the consumer's own awaits are never cancelled.
    """

    __slots__ = ("_event", "_fired", "_task", "_watcher")

    def __init__(self, event: asyncio.Event) -> None:
        self._event = event
        self._task: asyncio.Task[Any] | None = None
        self._fired = False
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        await self._event.wait()
        if self._task is not None:
            self._fired = True
            self._task.cancel()

    async def wait(self, awaitable: Coroutine[Any, Any, _T]) -> _T:
        if self._event.is_set():
            awaitable.close()
            raise _AbortedError
        # Re-read on every wait: a consumer may drive the generator from different tasks.
        task = self._task = asyncio.current_task()
        if task is None:  # pragma: no cover - only reachable outside a task
            return await awaitable
        cancelling = task.cancelling()
        try:
            result = await awaitable
        except asyncio.CancelledError:
            # Swallow only our own cancellation, never one requested by someone else.
            if self._fired and task.uncancel() <= cancelling:
                raise _AbortedError from None
            raise
        except Exception:
            if self._fired:  # the library turned our cancellation into an error
                task.uncancel()
                raise _AbortedError from None
            raise
        finally:
            self._task = None
        if self._fired:  # the cancellation was swallowed below us
            task.uncancel()
            raise _AbortedError
        return result

    def close(self) -> None:
        self._watcher.cancel()


async def _drain(rest: AsyncIterator[object]) -> None:
    """Read the provider's response to its end once the reply is complete; a failure there
    (a connection lost after the finish reason) no longer concerns the reply."""
    try:
        async for _ in rest:
            pass
    except Exception:
        log.debug("the model's stream failed after its finish reason", exc_info=True)


async def warm_up(model: str, *, timeout: float = WARM_UP_TIMEOUT) -> bool:
    """Prepare the model layer for calls to `model`, so the first real ones do not pay
    litellm's start-up; no provider is called and no litellm callback sees it. Returns whether
    it worked: a model litellm cannot resolve, or a warm-up that outlasts `timeout` seconds, is
    only logged here (its real calls fail as they would have)."""
    if model.startswith(_SCRIPTED_PROVIDER + "/"):
        register_scripted_model()
    try:
        async with asyncio.timeout(timeout):
            await _warm_up(model)
    except Exception as exc:
        log.warning("could not warm up the model layer for %s: %s", model, exc)
        return False
    return True


async def stream_ui_chunks(
    model: str,
    messages: list[JSONDict],
    *,
    tools: list[JSONDict] | None = None,
    abort: asyncio.Event | None = None,
    **kwargs: Any,
) -> AsyncIterator[UIChunk]:
    """Stream one model step as UI message stream chunks.

    Calls `litellm.acompletion(model=model, messages=messages, stream=True, tools=tools,
    **kwargs)` and converts the deltas: `start-step`, then text / reasoning blocks
    (`text-start`, `text-delta`..., `text-end`), tool calls (`tool-input-start`,
    `tool-input-delta`..., and once the stream ends `tool-input-available`, or
    `tool-input-error` when the arguments are not a JSON object), then `finish-step` and
    `finish` with the mapped `finishReason`. It never emits `start`: the caller owns the
    message id. Providers that accept it are asked for the call's token usage
    (`stream_options={"include_usage": True}`, unless `stream_options` is given), which the
    call's span reports (docs/observability.md#traces).

    Models `durachat/...` (the scripted model) are registered with litellm on first use.

    Args:
        model: litellm model string, e.g. `openai/gpt-4o` or `durachat/scripted`.
        messages: OpenAI chat messages (see `to_chat_messages`).
        tools: OpenAI tool definitions, passed through.
        abort: When set, the stream stops at once: the model call is interrupted and closed and
            no further chunks (no `finish`) are produced.
        **kwargs: Passed to `litellm.acompletion` (api_base, api_key, temperature, ...).

    Yields:
        UI message stream chunks (new dicts, safe to keep).

    Raises:
        ModelError: The model call failed (before or during the stream); chained to the cause.
    """
    if abort is not None and abort.is_set():
        return
    if model.startswith(_SCRIPTED_PROVIDER + "/"):
        register_scripted_model()
    if tools is not None:
        kwargs["tools"] = tools
    if "stream_options" not in kwargs and reports_usage(model):
        # The usage the model call's span reports (gen_ai.usage.*), in a last chunk that
        # carries no choices.
        kwargs["stream_options"] = {"include_usage": True}
    guard = _AbortGuard(abort) if abort is not None else None
    stream: CompletionStream | None = None
    # The call's span (docs/observability.md#traces); per chunk only `recording` is tested.
    call = ModelCallSpan(model, tools=len(tools or ()))
    recording = call.recording
    converter = UIChunkConverter()
    failure: BaseException | None = None
    try:
        try:
            opening = open_stream(model, messages, **kwargs)
            stream = await (opening if guard is None else guard.wait(opening))
        except _AbortedError:
            return
        except Exception as exc:
            failure = to_model_error(exc)
            raise failure from exc
        yield {"type": "start-step"}
        out: list[UIChunk] = []
        next_chunk = stream.__anext__
        while True:
            try:
                chunk = await (next_chunk() if guard is None else guard.wait(next_chunk()))
            except StopAsyncIteration:
                break
            except _AbortedError:
                return
            except Exception as exc:
                failure = to_model_error(exc)
                raise failure from exc
            if recording:
                call.chunk(chunk)
            converter.feed(chunk, out)
            if out:
                for ui_chunk in out:
                    yield ui_chunk
                out.clear()
            if abort is not None and abort.is_set():
                return
            # The usage chunk that may follow is only for the span (docs/benchmarks.md,
            # "The model call"); `finally` closes the stream.
            rest = None if recording else unread_rest(stream)
            if rest is not None:
                drain = _drain(rest)
                try:
                    await (drain if guard is None else guard.wait(drain))
                except _AbortedError:
                    return
                break
        finish_reason = converter.finish(out)
        for ui_chunk in out:
            yield ui_chunk
        yield {"type": "finish-step"}
        yield {"type": "finish", "finishReason": finish_reason}
    finally:
        call.end(finish_reason=converter.finish_reason, error=failure)
        if guard is not None:
            guard.close()
        if stream is not None:
            await stream.aclose()
