"""Recovery of interrupted turns on the shard: everything a new owner (or the owner whose model
stream stalled) does to continue a turn that did not finish.

* `stream`: what the interrupted turn left in the event log (`rebuild_stream`) and how the
  recovered stream joins onto it (`Splice`);
* `incidents`: the recovery budget of each incident, its SQL record and its events.

How it fits together is described in docs/recovery.md.
"""

from durachat_shard.recovery.incidents import Incident, Incidents
from durachat_shard.recovery.stream import PROGRESS_CHUNKS, RebuiltStream, Splice, rebuild_stream

__all__ = [
    "PROGRESS_CHUNKS",
    "Incident",
    "Incidents",
    "RebuiltStream",
    "Splice",
    "rebuild_stream",
]
