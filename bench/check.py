"""`python -m bench.check`: re-run the load phase and compare it with the recorded figures.

The load phase (200 streaming conversations) runs against durachat and the bare relay in the
same run, and the verdict is read from ratios against the relay, so a busy or slow machine
moves both sides alike. It fails (exit 1) when, against `bench/reference.json` (the figures
docs/benchmarks.md publishes):

* any request timed out or ended in an error (the reference has none), or
* chunks/s relative to the relay fell below `min_fraction` of the recorded ratio, or
* delivery p99 relative to the relay grew past `max_growth` times the recorded ratio.

`--if-changed` skips the run (exit 0) when nothing under `services/` or `libs/` changed since
the commit the reference was measured at, which is how `.ci/run` calls it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(__file__).resolve().parent / "reference.json"
WATCHED = ("services", "libs")


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The load phase's figures as ratios of durachat to the relay, plus durachat's errors."""
    ours = results["durachat"]["load"]
    relay = results["baseline"]["load"]
    return {
        "chunks_per_s_ratio": ours["chunks_per_s"] / relay["chunks_per_s"],
        "delivery_p99_ratio": ours["latency_ms"]["p99"] / relay["latency_ms"]["p99"],
        "errors": float(ours["errors"]["requests_with_errors"]),
    }


def verdict(measured: dict[str, float], reference: dict[str, Any]) -> list[str]:
    """What regressed (empty when nothing did)."""
    recorded = reference["ratios"]
    problems: list[str] = []
    if measured["errors"] > 0:
        problems.append(f"{measured['errors']:.0f} requests failed or timed out (recorded: 0)")
    floor = recorded["chunks_per_s_ratio"] * reference["min_fraction"]
    if measured["chunks_per_s_ratio"] < floor:
        problems.append(
            f"chunks/s is {measured['chunks_per_s_ratio']:.3f}x the relay's, below "
            f"{floor:.3f}x ({reference['min_fraction']:.0%} of the recorded "
            f"{recorded['chunks_per_s_ratio']:.3f}x)"
        )
    ceiling = recorded["delivery_p99_ratio"] * reference["max_growth"]
    if measured["delivery_p99_ratio"] > ceiling:
        problems.append(
            f"delivery p99 is {measured['delivery_p99_ratio']:.1f}x the relay's, above "
            f"{ceiling:.1f}x ({reference['max_growth']}x the recorded "
            f"{recorded['delivery_p99_ratio']:.1f}x)"
        )
    return problems


def changed_since(commit: str) -> bool:
    """Whether anything under `services/` or `libs/` differs from `commit` (True when the
    commit is unknown here)."""
    done = subprocess.run(
        ["git", "diff", "--quiet", commit, "HEAD", "--", *WATCHED],
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
    )
    return done.returncode != 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.check", description=__doc__)
    parser.add_argument("--if-changed", action="store_true", help="skip when code is unchanged")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    args = parser.parse_args(argv)
    reference = json.loads(args.reference.read_text())
    if args.if_changed and not changed_since(reference["commit"]):
        print(f"bench check: services/ and libs/ unchanged since {reference['commit'][:10]}")
        return 0
    with tempfile.TemporaryDirectory(prefix="durachat-bench-check-") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench",
                "--targets",
                "durachat,baseline",
                "--idle-connections",
                "100",
                "--results-dir",
                out,
            ],
            cwd=REPO_ROOT,
            check=True,
        )
        results = json.loads((Path(out) / "latest.json").read_text())["results"]
    measured = ratios(results)
    recorded = reference["ratios"]
    print(
        "bench check (durachat / relay, same run): "
        f"chunks/s {measured['chunks_per_s_ratio']:.3f}x (recorded "
        f"{recorded['chunks_per_s_ratio']:.3f}x), delivery p99 "
        f"{measured['delivery_p99_ratio']:.1f}x (recorded {recorded['delivery_p99_ratio']:.1f}x), "
        f"failed requests {measured['errors']:.0f}"
    )
    problems = verdict(measured, reference)
    for problem in problems:
        print(f"bench check: REGRESSION: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
