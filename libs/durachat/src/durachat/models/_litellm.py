"""The one module that imports litellm: offline configuration and a typed boundary around it.

Everything else in durachat reaches litellm through the names defined here, so the offline
settings below are always applied before litellm's first import.
"""

from __future__ import annotations

import os

# These must be in the environment before `import litellm`: litellm reads them while importing.
# - Without LITELLM_LOCAL_MODEL_COST_MAP, importing litellm downloads the model cost map from
#   GitHub (blocking import for seconds when offline, retrying in a background thread).
# - LITELLM_OFFLINE_MODE makes litellm use its bundled copies of everything else it would fetch
#   by itself (Hugging Face tokenizers for token counting, Anthropic beta-header config, ...).
#   Tiktoken needs no setting: litellm points TIKTOKEN_CACHE_DIR at its bundled encodings.
# - In its default "DEV" mode, importing litellm loads a `.env` file found by walking up from
#   litellm's install directory (so a repository's `.env` leaks into os.environ). durachat builds
#   its configuration explicitly, so it opts out.
# setdefault keeps an operator's explicit choice.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")

import functools
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol

import litellm
from litellm import exceptions as _exc
from litellm.llms.custom_llm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

from durachat.models.errors import ModelError

# litellm prints a "Give Feedback / Get Help" banner to stdout for every mapped error otherwise.
litellm.suppress_debug_info = True


__all__ = [
    "CompletionStream",
    "CustomLLM",
    "GenericStreamingChunk",
    "ModelResponse",
    "declare_free",
    "litellm",
    "open_stream",
    "provider_error",
    "register_provider",
    "reports_usage",
    "to_model_error",
    "unread_rest",
    "warm_up",
]


class CompletionStream(Protocol):
    """The part of litellm's `CustomStreamWrapper` that durachat uses.

    Each item is a litellm `ModelResponseStream` (`.choices[0].delta`, `.choices[0].finish_reason`).
    """

    def __anext__(self) -> Coroutine[Any, Any, Any]: ...

    async def aclose(self) -> None: ...


async def open_stream(
    model: str, messages: list[dict[str, Any]], **kwargs: Any
) -> CompletionStream:
    """Start a streaming chat completion through `litellm.acompletion`.

    Raises:
        Exception: whatever litellm raises; map it with `to_model_error`.
    """
    stream: CompletionStream = await litellm.acompletion(
        model=model, messages=messages, stream=True, **kwargs
    )
    return stream


async def warm_up(model: str) -> None:
    """Run one call for `model` through litellm's whole path without reaching the provider
    (`mock_response`) and without any litellm callback seeing it (`no-log`).

    litellm loads its tokenizer and imports much of itself on its first call: ~0.2-0.3 s of CPU
    that holds the GIL, so without this a process's first real calls wait for it
    (docs/benchmarks.md, "A shard's first model call").

    Raises:
        Exception: whatever litellm raises for a model it cannot resolve.
    """
    stream = await open_stream(
        model,
        [{"role": "user", "content": "warm-up"}],
        mock_response="ok",
        **{"no-log": True},
    )
    while True:
        try:
            await stream.__anext__()
        except StopAsyncIteration:
            return


def unread_rest(stream: CompletionStream) -> AsyncIterator[object] | None:
    """What is left of the provider's response once litellm has handed out the chunk with the
    finish reason, to be read without litellm's per-chunk and end-of-stream work; `None` while
    the reply is still coming, or when that work has a reader.

    After the finish reason litellm goes on for its own sake: it rebuilds the whole response
    from the chunks (in a worker thread), prices it, yields a usage-only chunk when usage was
    asked for and runs its success callbacks: ~60 % of litellm's CPU for a 40-chunk reply
    (docs/benchmarks.md, "The model call"). With no litellm callback registered nothing reads
    that work, so a caller that does not want the usage chunk reads the provider's remaining
    response (a usage chunk, the end of the HTTP stream) itself and closes the stream.
    """
    if not getattr(stream, "sent_last_chunk", False):
        return None
    if litellm.logging_callback_manager.get_all_callbacks():
        return None
    rest = getattr(stream, "completion_stream", None)
    return rest if isinstance(rest, AsyncIterator) else None


@functools.lru_cache(maxsize=256)
def reports_usage(model: str) -> bool:
    """Whether a stream of `model` may be asked for its token usage
    (`stream_options.include_usage`): the providers litellm says accept it, and durachat's
    own custom providers. Looked up once per model string."""
    if any(model.startswith(item["provider"] + "/") for item in litellm.custom_provider_map):
        return True
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        supported = litellm.get_supported_openai_params(model=name, custom_llm_provider=provider)
    except Exception:
        return False
    return supported is not None and "stream_options" in supported


def register_provider(provider: str, handler: CustomLLM) -> None:
    """Serve `provider/<model>` strings with `handler`; a no-op if `provider` is registered."""
    if any(item["provider"] == provider for item in litellm.custom_provider_map):
        return
    litellm.custom_provider_map.append({"provider": provider, "custom_handler": handler})


def declare_free(model: str, provider: str) -> None:
    """Record in litellm's cost map that `model` (served by custom `provider`) costs nothing.
    litellm prices every call when its stream ends; for a model missing from the map it
    searches the whole map first, ~1.4 ms of CPU per call (docs/benchmarks.md)."""
    if model in litellm.model_cost:
        return
    quiet = logging.getLogger("LiteLLM")
    level = quiet.level
    # litellm warns that the model is not one of its own; it is not meant to be.
    quiet.setLevel(logging.ERROR)
    try:
        litellm.register_model(
            {
                model: {
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": provider,
                    "mode": "chat",
                }
            }
        )
    finally:
        quiet.setLevel(level)


def provider_error(message: str, *, provider: str, model: str) -> Exception:
    """An error for a custom provider to raise: litellm treats it as a provider failure (500)."""
    error: Exception = _exc.APIError(
        status_code=500, message=message, llm_provider=provider, model=model
    )
    return error


_PUBLIC_MESSAGES: tuple[tuple[type[BaseException], str], ...] = (
    # Subclasses of BadRequestError come before it.
    (_exc.ContextWindowExceededError, "The conversation is too long for the model."),
    (_exc.ContentPolicyViolationError, "The model provider refused the request (content policy)."),
    (_exc.RateLimitError, "The model provider is rate limiting requests. Try again later."),
    (_exc.Timeout, "The model took too long to respond."),
    (_exc.AuthenticationError, "The model is not available (provider authentication failed)."),
    (_exc.PermissionDeniedError, "The model is not available (permission denied)."),
    (_exc.NotFoundError, "The model is not available (not found)."),
    (_exc.BadRequestError, "The model provider rejected the request."),
)
_DEFAULT_PUBLIC_MESSAGE = "The model failed to respond."


def to_model_error(error: Exception) -> ModelError:
    """Map an exception raised by litellm (or a provider behind it) to a `ModelError`.

    The detailed message is kept for logs; the public message depends only on the error's class,
    so it never carries provider output, URLs or credentials.
    """
    cause: BaseException = error
    # Mid-stream failures come wrapped for the Router's fallback logic; classify the real cause.
    if isinstance(error, _exc.MidStreamFallbackError) and error.original_exception is not None:
        cause = error.original_exception
    public = next(
        (text for kind, text in _PUBLIC_MESSAGES if isinstance(cause, kind)),
        _DEFAULT_PUBLIC_MESSAGE,
    )
    return ModelError(str(cause) or type(cause).__name__, public_message=public)
