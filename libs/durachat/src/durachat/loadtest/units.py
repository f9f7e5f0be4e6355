"""Durations and rates as people write them on a command line (`5m`, `2s`, `250ms`, `0.1%`)."""

from __future__ import annotations

import re
from typing import Final

_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`"5m"` → 300.0, `"1m30s"` → 90.0, `"250ms"` → 0.25, `"2"` → 2.0 (seconds).

    Raises:
        ValueError: not a duration.
    """
    text = text.strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 5m, 1h, 250ms)")
    return total


def parse_fraction(text: str) -> float:
    """`"0.1%"` → 0.001, `"0.02"` → 0.02.

    Raises:
        ValueError: not a rate between 0 and 1.
    """
    text = text.strip()
    value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"not a rate between 0 and 100%: {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """A short human form: `850 ms`, `12.3 s`, `5m00s`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"
