"""A small OTLP/HTTP trace receiver for tests: processes export their spans to it
(`OTEL_EXPORTER_OTLP_ENDPOINT`), and it decodes each `ExportTraceServiceRequest` with
`opentelemetry-proto`, keeping every span with its service and instance."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in hex)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    instance: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    """(trace id, span id) of each link."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver:
    """Collects the spans POSTed to `/v1/traces` (protobuf, optionally gzipped)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver._take(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL to give `OTEL_EXPORTER_OTLP_ENDPOINT`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def snapshot(self) -> list[ReceivedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self.spans)

    def _take(self, request: ExportTraceServiceRequest) -> None:
        received: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            service=str(resource.get("service.name", "")),
                            instance=str(resource.get("service.instance.id", "")),
                            attributes=_attributes(span.attributes),
                            events=[(e.name, _attributes(e.attributes)) for e in span.events],
                            links=[
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ],
                        )
                    )
        with self._lock:
            self.spans.extend(received)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A running receiver, stopped afterwards."""
    receiver = OtlpReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
