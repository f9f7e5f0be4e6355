"""Rendezvous (highest-random-weight) hashing of conversations onto shards."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _weight(shard_id: str, key: str) -> int:
    digest = hashlib.blake2b(f"{shard_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner_of(key: str, shard_ids: Iterable[str]) -> str | None:
    """The shard that owns `key` among `shard_ids`, or None when there are none.

    Adding or removing a shard moves only the keys whose highest weight it has or had.
    """
    best: str | None = None
    best_weight = -1
    for shard_id in shard_ids:
        weight = _weight(shard_id, key)
        if weight > best_weight or (weight == best_weight and best is not None and shard_id < best):
            best, best_weight = shard_id, weight
    return best
