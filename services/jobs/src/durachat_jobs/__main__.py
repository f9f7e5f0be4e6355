"""`python -m durachat_jobs`: run the jobs worker."""

from __future__ import annotations

import logging

from durachat_infra.settings import ClusterTiming, JobsSettings


def main() -> None:
    """Entry point."""
    settings = JobsSettings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s jobs %(levelname)s %(name)s: %(message)s"
    )
    from durachat_jobs.worker import build_worker

    worker = build_worker(settings, ClusterTiming())
    print("jobs worker running", flush=True)
    worker.run()


if __name__ == "__main__":
    main()
