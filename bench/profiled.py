"""`python -m bench.profiled`: run the module named by BENCH_PROFILE_MODULE under cProfile.

The bench starts cluster processes through this wrapper when `BENCH_PROFILE` names their role
(`BENCH_PROFILE=gateway,shard`); stats are dumped to BENCH_PROFILE_OUT when the process exits
(SIGTERM makes the gateway and the shard return from their main normally).
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    """Run the target module as `__main__` with the profiler on."""
    module = os.environ["BENCH_PROFILE_MODULE"]
    out = os.environ["BENCH_PROFILE_OUT"]
    sys.argv = [module, *sys.argv[1:]]

    def stop(signum: int, frame: FrameType | None) -> None:
        # uvicorn re-raises the SIGTERM it captured after its graceful shutdown; without a
        # handler that would kill the process before the stats are written.
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
