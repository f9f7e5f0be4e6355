"""`python -m durachat_gateway`: run a gateway process."""

from __future__ import annotations

import logging

import uvicorn

from durachat_infra.settings import GatewaySettings


def main() -> None:
    """Entry point."""
    settings = GatewaySettings()
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s {settings.gateway_id} %(levelname)s %(name)s: %(message)s",
    )
    from durachat_gateway.app import build_app
    from durachat_gateway.edges import bounded_http_protocol
    from durachat_infra.runtime import settle_heap
    from durachat_infra.telemetry import configure_telemetry

    shutdown_telemetry = configure_telemetry("durachat-gateway")
    app = build_app(settings)
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
            timeout_graceful_shutdown=5,
        )
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
