"""Tests for durachat.tools.tool: `tool()`, `Tool`, input validation and approval checks."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from durachat.tools import Tool, ToolContext, ToolDecorator, ToolInputError, tool


class City(BaseModel):
    city: str
    days: int = 1


def test_decorator_names_the_tool_after_the_function() -> None:
    @tool(description="Weather", input=City)
    def get_weather(args: City) -> str:
        return args.city

    assert isinstance(get_weather, Tool)
    assert get_weather.name == "get_weather"
    assert get_weather.description == "Weather"
    assert get_weather.input_model is City
    assert not get_weather.is_client
    assert get_weather.execute is not None


def test_decorator_with_explicit_name() -> None:
    @tool("weather", description="Weather", input=City, needs_approval=True)
    def get_weather(args: City) -> str:
        return args.city

    assert isinstance(get_weather, Tool)
    assert get_weather.name == "weather"
    assert get_weather.needs_approval is True
    assert not get_weather.is_client


def test_unnamed_without_execute_is_a_decorator() -> None:
    assert isinstance(tool(description="d", input=City), ToolDecorator)


def test_function_form_defaults_name_to_execute() -> None:
    def lookup(args: City) -> str:
        return args.city

    made = tool(description="d", input=City, execute=lookup)
    assert made.name == "lookup"
    assert made.execute is lookup


def test_named_without_execute_is_a_client_tool() -> None:
    picker = tool("pick_city", description="Ask the user", input=City)
    assert picker.is_client
    assert picker.execute is None
    assert repr(picker) == "Tool('pick_city', client)"


def test_tool_with_execute_cannot_be_decorated_again() -> None:
    made = tool("t", description="d", input=City, execute=lambda args: args)
    with pytest.raises(TypeError, match="already has an execute"):
        made(lambda args: args)


@pytest.mark.parametrize("name", ["has space", "", "x" * 65])
def test_invalid_name_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        tool(name, description="d", input=City)


def test_blocking_requires_a_sync_function() -> None:
    async def fetch(args: City) -> str:
        return args.city

    with pytest.raises(ValueError, match="blocking"):
        tool(description="d", input=City, execute=fetch, blocking=True)


def test_execute_with_too_many_required_parameters_is_rejected() -> None:
    def bad(args: City, context: ToolContext, extra: int) -> None:
        return None

    with pytest.raises(TypeError, match="requires 3 positional"):
        tool(description="d", input=City, execute=bad)


def test_exactly_one_input_definition() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Tool("t", description="d")
    with pytest.raises(ValueError, match="exactly one"):
        Tool("t", description="d", input_model=City, parameters={"type": "object"})


def test_validate_input_from_dict_json_and_model() -> None:
    made = tool("t", description="d", input=City)
    assert made.validate_input({"city": "Oslo"}) == City(city="Oslo")
    assert made.validate_input('{"city": "Oslo", "days": 2}') == City(city="Oslo", days=2)
    given = City(city="Rome")
    assert made.validate_input(given) is given


def test_validate_input_error_names_every_field() -> None:
    made = tool("weather", description="d", input=City)
    with pytest.raises(ToolInputError) as caught:
        made.validate_input({"days": "many"})
    assert str(caught.value) == (
        "Invalid input for tool weather: city: Field required; "
        "days: Input should be a valid integer, unable to parse string as an integer"
    )


def test_validate_input_of_non_object() -> None:
    made = tool("weather", description="d", input=City)
    with pytest.raises(ToolInputError, match=r"^Invalid input for tool weather: Input should be"):
        made.validate_input([1, 2])


def test_schema_only_tool_validates_to_a_dict() -> None:
    made = Tool("t", description="d", parameters={"type": "object"})
    assert made.validate_input({"a": 1}) == {"a": 1}
    assert made.validate_input('{"a": 1}') == {"a": 1}
    for bad in ("[1]", "not json", 3, None):
        with pytest.raises(ToolInputError, match="expected a JSON object"):
            made.validate_input(bad)


@pytest.mark.parametrize("flag", [True, False])
async def test_requires_approval_bool(flag: bool) -> None:
    made = tool("t", description="d", input=City, needs_approval=flag)
    assert await made.requires_approval({"city": "Oslo"}) is flag
    # A bool needs no valid input.
    assert await made.requires_approval({"bogus": 1}) is flag


async def test_requires_approval_sync_callable_gets_the_model() -> None:
    seen: list[object] = []

    def far_away(args: City) -> bool:
        seen.append(args)
        return args.city != "Oslo"

    made = tool("t", description="d", input=City, needs_approval=far_away)
    assert await made.requires_approval({"city": "Oslo"}) is False
    assert await made.requires_approval({"city": "Lima"}) is True
    assert seen == [City(city="Oslo"), City(city="Lima")]


async def test_requires_approval_async_callable() -> None:
    async def long_trip(args: City) -> bool:
        return args.days > 3

    made = tool("t", description="d", input=City, needs_approval=long_trip)
    assert await made.requires_approval({"city": "Oslo", "days": 5}) is True
    assert await made.requires_approval({"city": "Oslo"}) is False


async def test_requires_approval_callable_with_invalid_input_is_false() -> None:
    def always(args: City) -> bool:
        raise AssertionError("must not be called with invalid input")

    made = tool("t", description="d", input=City, needs_approval=always)
    assert await made.requires_approval({"days": 1}) is False


async def test_requires_approval_check_errors_propagate() -> None:
    def broken(args: City) -> bool:
        raise RuntimeError("policy service down")

    made = tool("t", description="d", input=City, needs_approval=broken)
    with pytest.raises(RuntimeError, match="policy service down"):
        await made.requires_approval({"city": "Oslo"})


def test_named_decorator_keeps_the_definition() -> None:
    def check(args: City) -> bool:
        return True

    client_form = tool("weather", description="d", input=City, needs_approval=check)

    @client_form
    def weather(args: City) -> str:
        return args.city

    assert client_form.is_client
    assert weather.name == "weather"
    assert weather.needs_approval is check
    assert weather.json_schema() == client_form.json_schema()
