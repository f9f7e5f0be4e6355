"""`python -m durachat_shard`: run a shard process."""

from __future__ import annotations

import asyncio
import logging

from durachat_infra.settings import ShardSettings


def main() -> None:
    """Entry point."""
    settings = ShardSettings()
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s {settings.shard_id} %(levelname)s %(name)s: %(message)s",
    )
    # litellm logs every completion at INFO through handlers of its own.
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
    from durachat_shard.server import serve

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
