"""durachat_infra.logs: JSON and text lines, the current span's ids, arq's per-job lines."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace

from durachat_infra.logs import JsonFormatter, TextFormatter, configure_logging
from support.telemetry import in_memory_provider


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    arq = logging.getLogger("arq.worker")
    filters = list(arq.filters)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        arq.filters[:] = filters


def _record(
    message: str = "hello %s", *args: object, level: int = logging.INFO
) -> logging.LogRecord:
    return logging.LogRecord("durachat_shard.x", level, __file__, 1, message, args, None)


def test_a_json_line() -> None:
    line = json.loads(JsonFormatter("shard-1").format(_record("hello %s", "there")))
    assert line["message"] == "hello there"
    assert (line["level"], line["logger"], line["process"]) == (
        "INFO",
        "durachat_shard.x",
        "shard-1",
    )
    assert line["time"].endswith("Z")
    assert "trace_id" not in line


def test_a_json_line_carries_the_current_span() -> None:
    provider, _ = in_memory_provider()
    with provider.get_tracer("t").start_as_current_span("turn") as span:
        line = json.loads(JsonFormatter("shard-1").format(_record()))
        text = TextFormatter("shard-1").format(_record())
    context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert text.endswith(f"trace={context.trace_id:032x}")
    assert " shard-1 INFO durachat_shard.x: " in text
    provider.shutdown()


def test_an_exception_is_kept_on_its_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = json.loads(JsonFormatter("gw-1").format(record))
    assert "ValueError: boom" in line["exc_info"]
    assert not trace.get_current_span().get_span_context().is_valid


@pytest.mark.usefixtures("restored_logging")
def test_arq_job_lines_are_debug(caplog: pytest.LogCaptureFixture) -> None:
    configure_logging("jobs", "INFO", "json")
    logging.getLogger().addHandler(caplog.handler)  # configure_logging replaced it
    arq = logging.getLogger("arq.worker")
    with caplog.at_level(logging.INFO):
        logging.getLogger().setLevel(logging.INFO)
        arq.info("%6.2fs → %s(%s)%s", 0.01, "cron:recover_orphans", "", "")
        arq.info("Starting worker for %d functions: %s", 5, "x")
    assert [r.getMessage() for r in caplog.records] == ["Starting worker for 5 functions: x"]
    caplog.clear()
    logging.getLogger().setLevel(logging.DEBUG)
    with caplog.at_level(logging.DEBUG):
        arq.info("%6.2fs ← %s ● %s", 0.01, "cron:recover_orphans", 0)
    assert [r.levelname for r in caplog.records] == ["DEBUG"]


@pytest.mark.usefixtures("restored_logging")
def test_the_format_switch() -> None:
    configure_logging("gw-1", "warning", "json")
    root = logging.getLogger()
    assert root.level == logging.WARNING
    assert isinstance(root.handlers[0].formatter, JsonFormatter)
    configure_logging("gw-1", "INFO", "text")
    assert isinstance(root.handlers[0].formatter, TextFormatter)
    assert len(root.handlers) == 1
