"""Process logging: one line per record on stderr, as JSON or text (docs/observability.md#logs).

Every process calls `configure_logging` once, first thing, with its settings:
`DURACHAT_LOG_LEVEL` sets the level, `DURACHAT_LOG_FORMAT` the format (`text` by default; the
container image, the compose file and the chart set `json`). A JSON line carries `time`,
`level`, `logger`, `process` (the gateway or shard id, or `jobs`), `message`, `exc_info` when
there is one, and `trace_id` / `span_id` when a span is current.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal

from opentelemetry import trace

LogFormat = Literal["json", "text"]

_ARQ_JOB_LINES = ("%6.2fs", "recording health")
"""The start of arq's messages about each job and its health record: DEBUG, not INFO, here."""


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line, with the current span's ids if a span is current."""
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "process": self._process,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`<time> <process> <LEVEL> <logger>: <message>`, with `trace=<id>` when a span is
    current."""

    def __init__(self, process: str) -> None:
        super().__init__(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as text."""
        text = super().format(record)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return f"{text} trace={context.trace_id:032x}"
        return text


class _ArqJobLines(logging.Filter):
    """Turns arq's per-job INFO lines (two a second with the orphan scan) into DEBUG ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not isinstance(record.msg, str):
            return True
        if not record.msg.startswith(_ARQ_JOB_LINES):
            return True
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            return False
        record.levelno = logging.DEBUG
        record.levelname = "DEBUG"
        return True


def configure_logging(process: str, level: str, log_format: str = "text") -> None:
    """Log every record at `level` or above to stderr, in `log_format` (`json` or `text`),
    naming the process `process`."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = (
        JsonFormatter(process) if log_format.strip().lower() == "json" else TextFormatter(process)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.strip().upper())
    arq = logging.getLogger("arq.worker")
    if not any(isinstance(f, _ArqJobLines) for f in arq.filters):
        arq.addFilter(_ArqJobLines())


def _iso(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
