"""`python -m durachat_gateway`: run a gateway process."""

from __future__ import annotations

import logging

import uvicorn

from durachat_infra.settings import GatewaySettings


def main() -> None:
    """Entry point."""
    settings = GatewaySettings()
    from durachat_infra.logs import configure_logging

    configure_logging(settings.gateway_id, settings.log_level, settings.log_format)
    from durachat_gateway.app import build_app
    from durachat_gateway.edges import bounded_http_protocol
    from durachat_gateway.ws_protocol import LeanWebSocketProtocol
    from durachat_infra.metrics_server import serve_metrics
    from durachat_infra.runtime import raise_open_files_limit, settle_heap
    from durachat_infra.telemetry import configure_telemetry

    shutdown_telemetry = configure_telemetry("durachat-gateway", settings.gateway_id)
    if settings.metrics_port is not None:
        serve_metrics(settings.metrics_host or settings.host, settings.metrics_port)
    app = build_app(settings)
    # One descriptor per client socket (docs/benchmarks.md#idle-sockets).
    raise_open_files_limit()
    settle_heap()
    print(
        f"gateway {settings.gateway_id} listening on http://{settings.host}:{settings.port}",
        flush=True,
    )
    if not settings.admin_key:
        logging.getLogger("durachat_gateway").warning(
            "open mode: DURACHAT_ADMIN_KEY is not set, so no route asks for credentials and every "
            "request acts as tenant %r",
            settings.tenant,
        )
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            ws_per_message_deflate=settings.ws_compression,
            # Oversized request heads are answered 431 at once (docs/security.md#bad-input).
            http=bounded_http_protocol(settings.max_header_bytes),
            h11_max_incomplete_event_size=settings.max_header_bytes,
            # Less memory per idle socket (docs/benchmarks.md#idle-sockets).
            ws=LeanWebSocketProtocol,
            timeout_graceful_shutdown=5,
        )
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
