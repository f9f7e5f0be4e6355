"""`python -m bench.otlp_sink --port N`: a local OTLP/HTTP trace receiver for the traced target.

It stands in for a collector: it decodes every `ExportTraceServiceRequest` (so the export is
real, protobuf and all), counts the spans, and answers at once. `GET /stats` returns
`{"requests", "spans"}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_ANSWER = ExportTraceServiceResponse().SerializeToString()


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.spans = 0


def serve(port: int) -> None:
    """Serve until killed."""
    counts = _Counts()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            with counts.lock:
                counts.requests += 1
                counts.spans += spans
            self._answer(200, "application/x-protobuf", _ANSWER)

        def do_GET(self) -> None:
            with counts.lock:
                stats = {"requests": counts.requests, "spans": counts.spans}
            self._answer(200, "application/json", json.dumps(stats).encode())

        def _answer(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    serve(parser.parse_args().port)


if __name__ == "__main__":
    main()
