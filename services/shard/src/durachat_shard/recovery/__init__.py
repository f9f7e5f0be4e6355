"""Recovery of interrupted turns on the shard: everything a new owner (or the owner whose model
stream stalled) does to continue a turn that did not finish.

* `stream`: what the interrupted turn left in the event log (`rebuild_stream`) and how the
  recovered stream joins onto it (`Splice`);
* `incidents`: the recovery budget of each incident, its SQL record and its events;
* `turns`: the interrupted turn as its record tells it, and the plan of the turn continuing it;
* `plan`: what happens to an interrupted turn (`RecoveryPlanner`).

How it fits together is described in docs/recovery.md.
"""

from durachat_shard.recovery.incidents import Incident, Incidents, IncidentWriter
from durachat_shard.recovery.plan import RecoveryPlanner
from durachat_shard.recovery.stream import PROGRESS_CHUNKS, RebuiltStream, Splice, rebuild_stream
from durachat_shard.recovery.turns import Interrupted, Recovered, turn_snapshot

__all__ = [
    "PROGRESS_CHUNKS",
    "Incident",
    "IncidentWriter",
    "Incidents",
    "Interrupted",
    "RebuiltStream",
    "Recovered",
    "RecoveryPlanner",
    "Splice",
    "rebuild_stream",
    "turn_snapshot",
]
