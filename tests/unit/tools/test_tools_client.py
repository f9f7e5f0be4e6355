"""Tests for durachat.tools.client_tools_from_schemas (docs/agents.md#dynamic-client-tools)."""

from __future__ import annotations

import pytest

from durachat.tools import DEFAULT_CLIENT_TOOL_PARAMETERS, client_tools_from_schemas

WEATHER_SCHEMA = {
    "type": "object",
    "title": "Kept verbatim",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def test_schema_becomes_an_execute_less_tool_with_the_given_schema() -> None:
    (made,) = client_tools_from_schemas(
        [{"name": "get_location", "description": "Where the user is", "parameters": WEATHER_SCHEMA}]
    )
    assert made.is_client
    assert made.input_model is None
    assert made.json_schema() == WEATHER_SCHEMA
    assert made.to_openai() == {
        "type": "function",
        "function": {
            "name": "get_location",
            "description": "Where the user is",
            "parameters": WEATHER_SCHEMA,
        },
    }


def test_schema_is_copied() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    (made,) = client_tools_from_schemas([{"name": "t", "parameters": schema}])
    schema["properties"].clear()  # type: ignore[attr-defined]
    assert made.json_schema()["properties"] == {"a": {"type": "string"}}


def test_missing_description_and_parameters_get_defaults() -> None:
    (made,) = client_tools_from_schemas([{"name": "ping", "description": None}])
    assert made.description == ""
    assert (
        made.json_schema() == DEFAULT_CLIENT_TOOL_PARAMETERS == {"type": "object", "properties": {}}
    )


@pytest.mark.parametrize("given", [None, []])
def test_no_schemas_no_tools(given: list[object] | None) -> None:
    skipped: list[str] = []
    assert client_tools_from_schemas(given, skipped=skipped) == []
    assert skipped == []


def test_invalid_entries_are_skipped_with_reasons() -> None:
    skipped: list[str] = []
    made = client_tools_from_schemas(
        [
            "not a dict",
            {"description": "no name"},
            {"name": "bad name"},
            {"name": "ok_1"},
            {"name": "described", "description": 42},
            {"name": "array_input", "parameters": {"type": "array"}},
            {"name": "untyped", "parameters": {"properties": {}}},
            {"name": "not_schema", "parameters": "string"},
            {"name": "ok_2", "parameters": {"type": "object"}},
        ],
        skipped=skipped,
    )
    assert [t.name for t in made] == ["ok_1", "ok_2"]
    assert skipped == [
        "clientTools[0]: not an object",
        "clientTools[1]: name None is not a valid function name (^[A-Za-z0-9_-]{1,64}$)",
        "clientTools[2]: name 'bad name' is not a valid function name (^[A-Za-z0-9_-]{1,64}$)",
        "clientTools[4]: 'described': description must be a string",
        'clientTools[5]: \'array_input\': parameters must be a JSON schema with "type": "object"',
        'clientTools[6]: \'untyped\': parameters must be a JSON schema with "type": "object"',
        'clientTools[7]: \'not_schema\': parameters must be a JSON schema with "type": "object"',
    ]


def test_invalid_entries_are_skipped_without_a_collector() -> None:
    assert [t.name for t in client_tools_from_schemas([1, {"name": "ok"}])] == ["ok"]


def test_duplicate_name_later_definition_wins() -> None:
    skipped: list[str] = []
    made = client_tools_from_schemas(
        [
            {"name": "dup", "description": "first"},
            {"name": "other"},
            {"name": "dup", "description": "second"},
        ],
        skipped=skipped,
    )
    assert [(t.name, t.description) for t in made] == [("dup", "second"), ("other", "")]
    assert skipped == [
        "clientTools[0]: 'dup' is replaced by clientTools[2], which has the same name"
    ]
