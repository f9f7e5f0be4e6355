"""durachat's jobs port: enqueue background work by name, whatever runs it.

arq is the adapter today; callers only see `JobQueue`, so the runner can change without them.
"""

from durachat_infra.jobs.arq_adapter import ArqJobQueue, arq_redis_settings
from durachat_infra.jobs.port import JobQueue

__all__ = ["ArqJobQueue", "JobQueue", "arq_redis_settings"]
