"""Example agents to copy: each module defines agents a shard can serve.

Serve them next to the demo agent (from the repository root)::

    DURACHAT_AGENTS=durachat.demo,examples.weather_agent make run

They run on the built-in offline scripted model, so they need no network and no API key.
See docs/agents.md.
"""
