"""One live conversation (on one branch) on its owner shard: `ConversationActor`.

The actor is made of parts with one job each, sharing an `ActorContext`:

* `conversation`: `ConversationActor`, its lifecycle (start, stop, checkpoint, step down) and
  its two loops (client frames, turns);
* `writes`: the write chain, fenced transactions run in the order they were queued;
* `admission`: what each client frame does (accept, concurrency strategies, repeats, clear,
  cancel), with `forks` (edits and regenerates answered on a new branch) and `tool_answers`
  (tool results and approvals);
* `queue`: which queued turn runs next, skipping, and the continuations tool answers schedule;
* `runner` and `pump`: one turn, from its stream's start to its terminal frame, written against
  the interfaces in `ports`;
* `host`: what the agent may call on its conversation (`AgentHost`);
* `state` and `context`: what the parts share.

Recovery of interrupted turns is `durachat_shard.recovery`.
"""

from durachat_shard.actor.conversation import ConversationActor

__all__ = ["ConversationActor"]
