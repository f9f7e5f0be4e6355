"""Tool definitions: `Tool` and the `tool()` helper.

A tool is a name, a description, an input schema and optionally a server-side `execute`
function; the same model as the AI SDK's `tool()`. Without `execute` the tool is a *client
tool*: the model may call it, but the call is resolved by the browser (`cf_agent_tool_result`).

Two forms::

    weather = tool(
        "get_weather", description="Current weather", input=WeatherInput, execute=get_weather
    )

    @tool(description="Current weather", input=WeatherInput)
    async def get_weather(args: WeatherInput) -> Weather: ...

`execute` may be a plain function, a coroutine function or an async generator function (see
`durachat.tools.run.run_tool`). It takes the validated input model, and optionally a second
positional `ToolContext`.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, overload

from pydantic import BaseModel, ValidationError

from durachat.tools.schema import function_parameters, is_valid_tool_name
from durachat.types import JSONDict, UIMessage

__all__ = [
    "ApprovalCheck",
    "Tool",
    "ToolContext",
    "ToolDecorator",
    "ToolInputError",
    "tool",
]

ApprovalCheck: TypeAlias = Callable[[Any], bool | Awaitable[bool]]
"""`needs_approval` as a function of the validated input (a model instance, or the input dict
for a schema-only tool), sync or async."""


class ToolInputError(ValueError):
    """A tool call's input does not satisfy the tool's input schema."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What an `execute` function taking a second parameter receives."""

    tool_call_id: str
    tool_name: str
    abort: asyncio.Event | None = None
    """Set when the turn is cancelled; long-running tools should stop when it is."""
    messages: Sequence[UIMessage] = ()
    """The conversation the call belongs to."""


class Tool:
    """A tool the model can call.

    Build one with `tool()` (server or client tool from a pydantic model) or
    `client_tools_from_schemas()` (client tools from request JSON schemas). Treat it as
    immutable.

    Attributes:
        name: The function name the model calls (`^[A-Za-z0-9_-]{1,64}$`).
        description: What the tool does, for the model.
        input_model: The pydantic model the input is validated with; None for a tool defined
            by a JSON schema only (whose input is passed on as a dict).
        execute: The server-side implementation; None for a client tool.
        needs_approval: Whether a call waits for the user's approval before it runs.
        blocking: Run a sync `execute` in a worker thread (`asyncio.to_thread`).
    """

    __slots__ = (
        "_arity",
        "_parameters",
        "blocking",
        "description",
        "execute",
        "input_model",
        "name",
        "needs_approval",
    )

    def __init__(
        self,
        name: str,
        *,
        description: str,
        input_model: type[BaseModel] | None = None,
        parameters: JSONDict | None = None,
        execute: Callable[..., Any] | None = None,
        needs_approval: bool | ApprovalCheck = False,
        blocking: bool = False,
    ) -> None:
        """Define a tool; prefer `tool()`, which also works as a decorator.

        Args:
            name: The function name.
            description: What the tool does.
            input_model: The input model; exactly one of `input_model` and `parameters`.
            parameters: The input JSON schema, used verbatim (client tools).
            execute: The server-side implementation, if any.
            needs_approval: A bool or an `ApprovalCheck`.
            blocking: Run a sync `execute` in a worker thread.

        Raises:
            ValueError: Invalid name, both or neither of `input_model` / `parameters`, or
                `blocking` with an async `execute`.
            TypeError: `execute` takes more than two required positional parameters.
        """
        if not is_valid_tool_name(name):
            raise ValueError(f"invalid tool name {name!r}: must match ^[A-Za-z0-9_-]{{1,64}}$")
        if input_model is not None and parameters is not None:
            raise ValueError("give exactly one of input_model and parameters")
        if blocking and execute is not None and _is_async(execute):
            raise ValueError(f"tool {name!r}: blocking=True applies only to a sync execute")
        self.name = name
        self.description = description
        self.input_model = input_model
        self.execute = execute
        self.needs_approval = needs_approval
        self.blocking = blocking
        if input_model is not None:
            self._parameters = function_parameters(input_model)
        elif parameters is not None:
            self._parameters = copy.deepcopy(parameters)
        else:
            raise ValueError("give exactly one of input_model and parameters")
        self._arity = _positional_arity(name, execute) if execute is not None else 0

    def __repr__(self) -> str:
        kind = "client" if self.is_client else "server"
        return f"Tool({self.name!r}, {kind})"

    def __call__(self, execute: Callable[..., Any]) -> Tool:
        """Attach `execute` to this execute-less tool (the named decorator form).

        Returns:
            A new tool with the same definition and `execute`.

        Raises:
            TypeError: This tool already has an `execute`.
        """
        if self.execute is not None:
            raise TypeError(f"tool {self.name!r} already has an execute function")
        return Tool(
            self.name,
            description=self.description,
            input_model=self.input_model,
            parameters=None if self.input_model is not None else self._parameters,
            execute=execute,
            needs_approval=self.needs_approval,
            blocking=self.blocking,
        )

    @property
    def is_client(self) -> bool:
        """True when the tool has no server `execute` (the client resolves its calls)."""
        return self.execute is None

    def json_schema(self) -> JSONDict:
        """Return the input JSON schema (a new copy), as sent to the model."""
        schema: JSONDict = copy.deepcopy(self._parameters)
        return schema

    def to_openai(self) -> JSONDict:
        """Return the tool as an OpenAI / litellm tool definition.

        Returns:
            `{"type": "function", "function": {"name", "description", "parameters"}}`.
        """
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.json_schema(),
            },
        }

    def validate_input(self, raw_input: object) -> Any:
        """Validate a tool call's input.

        Args:
            raw_input: The input the model produced: a dict, a JSON string, or an instance of
                the input model.

        Returns:
            An `input_model` instance, or for a schema-only tool the input dict itself.

        Raises:
            ToolInputError: The input does not validate; the message names each failing field.
        """
        model = self.input_model
        if model is None:
            value = raw_input
            if isinstance(value, str | bytes):
                try:
                    value = json.loads(value)
                except ValueError:
                    value = None
            if not isinstance(value, dict):
                raise ToolInputError(f"Invalid input for tool {self.name}: expected a JSON object")
            return value
        if isinstance(raw_input, model):
            return raw_input
        try:
            if isinstance(raw_input, str | bytes):
                return model.model_validate_json(raw_input)
            return model.model_validate(raw_input)
        except ValidationError as exc:
            raise ToolInputError(_validation_message(self.name, exc)) from exc

    async def requires_approval(self, raw_input: object) -> bool:
        """Tell whether a call with this input must wait for the user's approval.

        A bool `needs_approval` is returned as is. A check is called with the validated input;
        an input that does not validate needs no approval (running the call reports the
        validation error, which is more useful than asking about a call that cannot run).

        Args:
            raw_input: The call's input, as for `validate_input`.

        Raises:
            Exception: Whatever the approval check raises.
        """
        check = self.needs_approval
        if isinstance(check, bool):
            return check
        try:
            value = self.validate_input(raw_input)
        except ToolInputError:
            return False
        decision = check(value)
        if inspect.isawaitable(decision):
            decision = await decision
        return bool(decision)

    def call_execute(self, value: Any, context: ToolContext) -> Any:
        """Call `execute` with the arguments its signature asks for (no input, the input, or
        the input and `context`) and return what it returns, unawaited.

        Raises:
            TypeError: The tool has no `execute`.
        """
        if self.execute is None:
            raise TypeError(f"tool {self.name!r} has no execute function")
        args = (value, context)[: self._arity]
        return self.execute(*args)


class ToolDecorator:
    """What `tool()` returns without a name or `execute`: decorating a function makes the tool,
    named after the function."""

    __slots__ = ("_blocking", "_description", "_input", "_needs_approval")

    def __init__(
        self,
        *,
        description: str,
        input: type[BaseModel],
        needs_approval: bool | ApprovalCheck,
        blocking: bool,
    ) -> None:
        self._description = description
        self._input = input
        self._needs_approval = needs_approval
        self._blocking = blocking

    def __call__(self, execute: Callable[..., Any]) -> Tool:
        """Make the tool, named `execute.__name__`."""
        return Tool(
            _function_name(execute),
            description=self._description,
            input_model=self._input,
            execute=execute,
            needs_approval=self._needs_approval,
            blocking=self._blocking,
        )


@overload
def tool(
    name: str,
    *,
    description: str,
    input: type[BaseModel],
    execute: Callable[..., Any] | None = None,
    needs_approval: bool | ApprovalCheck = False,
    blocking: bool = False,
) -> Tool: ...


@overload
def tool(
    name: None = None,
    *,
    description: str,
    input: type[BaseModel],
    execute: Callable[..., Any],
    needs_approval: bool | ApprovalCheck = False,
    blocking: bool = False,
) -> Tool: ...


@overload
def tool(
    name: None = None,
    *,
    description: str,
    input: type[BaseModel],
    execute: None = None,
    needs_approval: bool | ApprovalCheck = False,
    blocking: bool = False,
) -> ToolDecorator: ...


def tool(
    name: str | None = None,
    *,
    description: str,
    input: type[BaseModel],
    execute: Callable[..., Any] | None = None,
    needs_approval: bool | ApprovalCheck = False,
    blocking: bool = False,
) -> Tool | ToolDecorator:
    """Define a tool, like the AI SDK's `tool()`.

    Args:
        name: The function name the model calls; defaults to `execute.__name__`.
        description: What the tool does, for the model.
        input: The pydantic model of the input; its JSON schema is sent to the model and every
            call's input is validated with it.
        execute: The server-side implementation: `f()`, `f(input)` or `f(input, context)`;
            sync, async, or an async generator streaming preliminary results. Omit it for a
            client tool, or to use the result as a decorator.
        needs_approval: True, or a sync/async check of the validated input, to make each call
            wait for the user's approval before it runs.
        blocking: Run a sync `execute` in a worker thread so it cannot stall the event loop.

    Returns:
        A `Tool` when `name` or `execute` is given. A named execute-less `Tool` is a client
        tool, and can still decorate a function to give it `execute`. Without either, a
        `ToolDecorator`.

    Raises:
        ValueError: Invalid tool name, no name and an `execute` without `__name__`, or
            `blocking` with an async `execute`.
        TypeError: `execute` takes more than two required positional parameters.
    """
    if name is None:
        if execute is None:
            return ToolDecorator(
                description=description,
                input=input,
                needs_approval=needs_approval,
                blocking=blocking,
            )
        name = _function_name(execute)
    return Tool(
        name,
        description=description,
        input_model=input,
        execute=execute,
        needs_approval=needs_approval,
        blocking=blocking,
    )


def _function_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise ValueError(f"{fn!r} has no __name__; give the tool a name")
    return name


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _positional_arity(name: str, fn: Callable[..., Any]) -> int:
    """How many of (input, context) `fn` takes: its required positional parameters."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have no signature
        return 1
    required = 0
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return 2
        if (
            parameter.kind
            in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            and parameter.default is inspect.Parameter.empty
        ):
            required += 1
    if required > 2:
        raise TypeError(
            f"tool {name!r}: execute must take (), (input) or (input, context); "
            f"it requires {required} positional arguments"
        )
    return required


def _validation_message(name: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        location = ".".join(str(item) for item in error["loc"])
        problems.append(f"{location}: {error['msg']}" if location else error["msg"])
    return f"Invalid input for tool {name}: " + "; ".join(problems)
