"""`python -m durachat_jobs`: run the jobs worker."""

from __future__ import annotations

import asyncio

from durachat_infra.settings import ClusterTiming, JobsSettings


def main() -> None:
    """Entry point."""
    settings = JobsSettings()
    from durachat_infra.logs import configure_logging

    configure_logging("jobs", settings.log_level, settings.log_format)
    from durachat_infra.runtime import settle_heap
    from durachat_infra.telemetry import configure_telemetry
    from durachat_jobs.supervise import stop_on_signals, supervise
    from durachat_jobs.worker import build_worker

    shutdown_telemetry = configure_telemetry("durachat-jobs", "jobs")
    if settings.metrics_port is not None and settings.health_port not in (
        None,
        settings.metrics_port,
    ):
        # The health listener has a port of its own: metrics get theirs as well.
        from durachat_infra.metrics_server import serve_metrics

        serve_metrics(settings.metrics_host or settings.health_host, settings.metrics_port)
    timing = ClusterTiming()

    async def run() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        settle_heap()
        print("jobs worker running", flush=True)
        await supervise(lambda: build_worker(settings, timing), stop=stop)

    try:
        asyncio.run(run())
    finally:
        shutdown_telemetry()


if __name__ == "__main__":
    main()
