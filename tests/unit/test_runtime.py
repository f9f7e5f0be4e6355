"""`settle_heap`: what start-up allocated is out of the collector's reach afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_settle_heap_freezes_start_up_objects_and_spaces_young_collections() -> None:
    # In a process of its own: freezing this test process's heap would outlive the test.
    script = textwrap.dedent(
        """
        import gc
        import litellm  # the bulk of a service's long-lived objects
        from durachat_infra.runtime import GC_GEN0_THRESHOLD, settle_heap
        assert gc.get_freeze_count() == 0
        settle_heap()
        assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()
        assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
        # A full collection now only walks what was allocated since.
        frozen = gc.get_freeze_count()
        tracked = len(gc.get_objects())
        assert tracked < frozen / 10, (tracked, frozen)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    # In a process of its own, started with a low soft limit.
    script = textwrap.dedent(
        """
        import resource
        from durachat_infra.runtime import raise_open_files_limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        now = raise_open_files_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == now
        assert now == hard or hard == resource.RLIM_INFINITY, (now, hard)
        assert now >= min(256, hard)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
