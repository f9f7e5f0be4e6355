"""The `/metrics` listener a process opens on `DURACHAT_METRICS_PORT` for Prometheus.

prometheus_client's own server, on a thread of its own: it answers scrapes without waiting on
the process's event loop, and it needs no credentials (docs/observability.md#metrics). The
gateway's public `/metrics` route stays behind the admin key in auth mode.
"""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger(__name__)


def serve_metrics(host: str, port: int) -> int:
    """Serve the process's metrics on `http://host:port/metrics` (port 0 picks a free one);
    returns the port."""
    server, _thread = start_http_server(port, addr=host)
    bound = int(server.server_address[1])
    log.info("metrics on http://%s:%s/metrics", host, bound)
    return bound
