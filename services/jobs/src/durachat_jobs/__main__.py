"""`python -m durachat_jobs`: run the jobs worker."""

from __future__ import annotations

import asyncio
import logging

from durachat_infra.settings import ClusterTiming, JobsSettings


def main() -> None:
    """Entry point."""
    settings = JobsSettings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s jobs %(levelname)s %(name)s: %(message)s"
    )
    from durachat_infra.runtime import settle_heap
    from durachat_infra.telemetry import configure_telemetry
    from durachat_jobs.supervise import stop_on_signals, supervise
    from durachat_jobs.worker import build_worker

    shutdown_telemetry = configure_telemetry("durachat-jobs")
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
