"""`durachat-admin`: operator commands on a durachat database.

* `durachat-admin repair [--database-url URL]`: quarantine and rewrite every stored JSON
  document that cannot be read safely (`durachat_infra.store.repair`), and print what was
  repaired. Safe to run while the cluster serves: a rewritten message is what the store already
  hands out for it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from durachat_infra.store import Store, migrate
from durachat_infra.store.repair import Repaired, repair_rows


async def repair(store: Store) -> list[Repaired]:
    """Run the repair in one write transaction of `store`."""
    return await store._run_write("repair", lambda conn: conn.run_sync(repair_rows))


async def _repair(url: str) -> int:
    await migrate(url)
    async with Store.from_url(url) as store:
        repaired = await repair(store)
    for item in repaired:
        print(
            f"quarantined {item.table}.{item.column} row {item.row_id}"
            f" (conversation {item.conversation_id}): {item.reason}"
        )
    print(f"repaired {len(repaired)} stored documents")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run an operator command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="durachat-admin", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    repair_cmd = commands.add_parser("repair", help="quarantine stored JSON that cannot be read")
    repair_cmd.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="the database (default: DATABASE_URL)",
    )
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("no database: pass --database-url or set DATABASE_URL")
    return asyncio.run(_repair(args.database_url))


if __name__ == "__main__":
    sys.exit(main())
