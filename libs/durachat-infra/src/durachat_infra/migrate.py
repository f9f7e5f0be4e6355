"""`durachat-migrate`: upgrade the database at `DATABASE_URL` to the newest schema and exit.

Deployments run it once before the processes start (the chart's pre-install/pre-upgrade hook,
the compose file's `migrate` service). Shards and the jobs worker also migrate when they start,
so it is an ordering convenience, not a requirement; concurrent runs are safe (see
`durachat_infra.store.migrate`).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from durachat_infra.settings import CommonSettings


def main() -> int:
    """Migrate, log the outcome, and return the exit status (0 on success)."""
    settings = CommonSettings()
    from durachat_infra.logs import configure_logging

    configure_logging("migrate", settings.log_level, settings.log_format)
    from durachat_infra.store import StoreError, migrate

    try:
        asyncio.run(migrate(settings.database_url))
    except (StoreError, ValueError) as exc:
        logging.getLogger("durachat_infra.migrate").error("migration failed: %s", exc)
        return 1
    logging.getLogger("durachat_infra.migrate").info("the database schema is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
