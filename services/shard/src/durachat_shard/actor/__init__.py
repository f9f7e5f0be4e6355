"""One live conversation (on one branch) on its owner shard: `ConversationActor`."""

from durachat_shard.actor.conversation import ConversationActor

__all__ = ["ConversationActor"]
