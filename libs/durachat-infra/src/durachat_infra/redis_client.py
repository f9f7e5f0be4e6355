"""Connecting to Redis: one server (`REDIS_URL`) or a Redis Cluster (`REDIS_CLUSTER_NODES`).

Every process gets its Redis client here. The rest of the code works with either kind through
`RedisClient`: on a cluster every command, script and pipeline names keys of one slot at a time
(docs/operations.md#redis-cluster), and the few places that must act per slot ask `is_cluster`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, cast
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

RedisClient: TypeAlias = Redis | RedisCluster
"""A client of one Redis server or of a Redis Cluster."""


def parse_nodes(nodes: str) -> list[tuple[str, int]]:
    """`host:port,host:port,…` (seed nodes of a Redis Cluster) as (host, port) pairs."""
    found: list[tuple[str, int]] = []
    for item in (part.strip() for part in nodes.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"not a host:port Redis Cluster node: {item!r}")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise ValueError("REDIS_CLUSTER_NODES names no node")
    return found


def connect_redis(url: str, cluster_nodes: str | None = None, **options: Any) -> RedisClient:
    """A client of the Redis Cluster seeded by `cluster_nodes` when it is set, else of the
    server at `url` (`options` go to the client; `decode_responses` is always on). On a
    cluster, the password and TLS of `url` (`rediss://:secret@…`) apply to every node."""
    if not cluster_nodes:
        client: Redis = Redis.from_url(url, decode_responses=True, **options)
        return client
    parts = urlsplit(url)
    options.pop("single_connection_client", None)
    cluster: RedisCluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in parse_nodes(cluster_nodes)],
        decode_responses=True,
        username=parts.username or None,
        password=parts.password or None,
        ssl=parts.scheme == "rediss",
        **options,
    )
    return cluster


def is_cluster(client: RedisClient) -> bool:
    """Whether `client` talks to a Redis Cluster."""
    return isinstance(client, RedisCluster)


async def node_of(client: RedisClient, key: str) -> tuple[str, int] | None:
    """The (host, port) of the master serving `key` on a cluster; None for a single server."""
    if not isinstance(client, RedisCluster):
        return None
    await client.initialize()
    node = client.get_node_from_key(key)
    return (node.host, int(node.port))


def register_script(client: RedisClient, source: str) -> AsyncScript:
    """A Lua script callable on `client` (loaded where it is missing, on first use)."""
    # redis-py types a script's client as the single-server one, but a script only uses
    # EVALSHA (routed by its keys' slot on a cluster) and SCRIPT LOAD (sent to every master).
    return AsyncScript(cast(Redis, client), source)


def queue_evalsha(
    pipe: Pipeline | ClusterPipeline, sha: str, keys: Sequence[str], args: Sequence[Any]
) -> None:
    """Queue one `EVALSHA` on a pipeline of either kind."""
    # The cluster pipeline refuses its `evalsha` method (it cannot tell a script's keys from
    # its method arguments), but routes the raw command by the keys `numkeys` names.
    pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)


async def run_script_many(
    client: RedisClient, script: AsyncScript, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
) -> list[Any]:
    """Run `script` once for each `(keys, args)` of `calls` in one pipelined round trip (one
    per node on a cluster); the results in order. A server that had not loaded the script
    (it restarted) gets it, and the calls are sent again: none of them ran."""
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for keys, args in calls:
            queue_evalsha(pipe, script.sha, keys, args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        if attempt or not any(isinstance(r, NoScriptError) for r in results):
            break
        await client.script_load(script.script)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results
