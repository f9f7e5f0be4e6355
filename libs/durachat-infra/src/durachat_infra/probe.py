"""`python -m durachat_infra.probe URL`: exit 0 if `URL` answers 2xx, 1 otherwise.

The container image has no curl or wget; compose healthchecks run this instead (see
docs/deployment.md). It uses only the standard library, so it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Probe the URL; the exit status says whether it answered with a 2xx status."""
    parser = argparse.ArgumentParser(prog="python -m durachat_infra.probe")
    parser.add_argument("url", help="e.g. http://127.0.0.1:8080/readyz")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default: 3)")
    args = parser.parse_args(argv)
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        print(
            f"{args.url}: {exc.code} {exc.read()[:500].decode(errors='replace')}", file=sys.stderr
        )
        return 1
    except (OSError, ValueError) as exc:
        print(f"{args.url}: {exc}", file=sys.stderr)
        return 1
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
