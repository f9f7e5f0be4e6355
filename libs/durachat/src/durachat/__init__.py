"""durachat: durable AI chat agents, served by a horizontally scaled cluster."""

from durachat.agent import Agent, AgentRegistry, Turn, kebab_case

__all__ = ["Agent", "AgentRegistry", "Turn", "kebab_case"]
