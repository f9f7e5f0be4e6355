"""Tests for durachat.tools.schema: input schemas shaped for function calling."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from durachat.tools import clean_json_schema, function_parameters, is_valid_tool_name, tool


class Address(BaseModel):
    """A postal address."""

    street: str
    title: str = Field(default="home", description="A property that happens to be called title")


class Order(BaseModel):
    """Place an order."""

    item: str = Field(description="What to order")
    quantity: int = 1
    ship_to: Address | None = None
    extras: list[Address] = []
    counts: dict[str, int] = {}
    meta: dict[str, Any] = {"title": "kept"}


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    x: int


def test_model_schema_drops_titles_and_closes_objects() -> None:
    assert function_parameters(Order) == {
        "$defs": {
            "Address": {
                "description": "A postal address.",
                "properties": {
                    "street": {"type": "string"},
                    "title": {
                        "default": "home",
                        "description": "A property that happens to be called title",
                        "type": "string",
                    },
                },
                "required": ["street"],
                "type": "object",
                "additionalProperties": False,
            }
        },
        "description": "Place an order.",
        "properties": {
            "item": {"description": "What to order", "type": "string"},
            "quantity": {"default": 1, "type": "integer"},
            "ship_to": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
            "extras": {"default": [], "items": {"$ref": "#/$defs/Address"}, "type": "array"},
            "counts": {
                "additionalProperties": {"type": "integer"},
                "default": {},
                "type": "object",
            },
            "meta": {"additionalProperties": True, "default": {"title": "kept"}, "type": "object"},
        },
        "required": ["item"],
        "type": "object",
        "additionalProperties": False,
    }


def test_explicit_additional_properties_is_kept() -> None:
    assert function_parameters(Open)["additionalProperties"] is True


def test_clean_keeps_title_as_data_and_does_not_modify_input() -> None:
    schema = {
        "title": "Root",
        "type": "object",
        "properties": {"title": {"title": "Title", "type": "string", "enum": ["title"]}},
        "examples": [{"title": "x"}],
        "allOf": [{"title": "A", "type": "object", "properties": {}}],
        "items": [{"title": "T"}],
        "not": True,
    }
    original = {**schema}
    cleaned = clean_json_schema(schema)
    assert cleaned == {
        "type": "object",
        "properties": {"title": {"type": "string", "enum": ["title"]}},
        "examples": [{"title": "x"}],
        "allOf": [{"type": "object", "properties": {}, "additionalProperties": False}],
        "items": [{}],
        "not": True,
        "additionalProperties": False,
    }
    assert schema == original
    cleaned["examples"][0]["title"] = "changed"
    assert schema["examples"] == [{"title": "x"}]


def test_free_form_object_stays_open() -> None:
    assert clean_json_schema({"type": "object"}) == {"type": "object"}


def test_to_openai_shape() -> None:
    spec = tool("place_order", description="Order something", input=Order).to_openai()
    assert spec == {
        "type": "function",
        "function": {
            "name": "place_order",
            "description": "Order something",
            "parameters": function_parameters(Order),
        },
    }


def test_json_schema_returns_a_fresh_copy() -> None:
    t = tool("place_order", description="d", input=Order)
    t.json_schema()["properties"].clear()
    assert "item" in t.json_schema()["properties"]


@pytest.mark.parametrize("name", ["a", "get_weather", "A-b_9", "x" * 64])
def test_valid_tool_names(name: str) -> None:
    assert is_valid_tool_name(name)


@pytest.mark.parametrize("name", ["", "x" * 65, "has space", "dot.name", "héllo", None, 3])
def test_invalid_tool_names(name: object) -> None:
    assert not is_valid_tool_name(name)
