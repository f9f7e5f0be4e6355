"""durachat: durable AI chat agents, served by a horizontally scaled cluster."""

from durachat.agent import Agent, AgentHost, AgentRegistry, Turn, TurnResult, kebab_case

__all__ = [
    "Agent",
    "AgentHost",
    "AgentRegistry",
    "Turn",
    "TurnResult",
    "kebab_case",
]
