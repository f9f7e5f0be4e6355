"""durachat: durable AI chat agents, served by a horizontally scaled cluster."""

from durachat.agent import Agent, AgentHost, AgentRegistry, Turn, TurnResult, kebab_case
from durachat.recovery import ChatRecovery, ExhaustedContext, RecoveryContext, RecoveryOptions

__all__ = [
    "Agent",
    "AgentHost",
    "AgentRegistry",
    "ChatRecovery",
    "ExhaustedContext",
    "RecoveryContext",
    "RecoveryOptions",
    "Turn",
    "TurnResult",
    "kebab_case",
]
