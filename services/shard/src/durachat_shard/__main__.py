"""`python -m durachat_shard`: run a shard process."""

from __future__ import annotations

import asyncio
import logging

from durachat_infra.settings import ShardSettings


def main() -> None:
    """Entry point."""
    settings = ShardSettings()
    from durachat_infra.logs import configure_logging

    configure_logging(settings.shard_id, settings.log_level, settings.log_format)
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
