"""`durachat-local`: run a whole cluster on this machine (what `make run` starts)."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

from durachat_infra.local.cluster import LocalCluster


def main() -> None:
    """Start the cluster, print its address, stop it on Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(prog="durachat-local", description=__doc__)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--gateways", type=int, default=1)
    parser.add_argument("--var-dir", default=os.environ.get("DURACHAT_VAR_DIR", "var"))
    parser.add_argument(
        "--redis-cluster",
        type=int,
        default=0,
        metavar="MASTERS",
        help="run on an embedded Redis Cluster of this many masters (default: one Redis server;"
        " REDIS_CLUSTER_NODES runs on a cluster of yours)",
    )
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = LocalCluster(
        var_dir=Path(args.var_dir),
        port=int(os.environ.get("PORT", "8080")),
        gateways=args.gateways,
        shards=args.shards,
        redis_url=os.environ.get("REDIS_URL") or None,
        redis_cluster_nodes=os.environ.get("REDIS_CLUSTER_NODES") or None,
        redis_masters=args.redis_cluster,
        database_url=os.environ.get("DATABASE_URL") or None,
    )
    try:
        cluster.start()
        print(f"durachat is running at {cluster.urls[0]}  (Ctrl-C stops it)", flush=True)
        if cluster.redis_cluster_nodes:
            print(f"  redis: cluster {cluster.redis_cluster_nodes}", flush=True)
        if cluster.admin_key:
            print("  auth: required (DURACHAT_ADMIN_KEY is set; see docs/security.md)", flush=True)
        else:
            print(
                "  auth: OPEN for local development: no credentials, every request acts as "
                "tenant 'default' (set DURACHAT_ADMIN_KEY to require them)",
                flush=True,
            )
        print(f"  try: durachat chat --url {cluster.urls[0]} 'hello there'", flush=True)
        if cluster.metrics_ports:
            ports = ", ".join(f"{name} :{port}" for name, port in cluster.metrics_ports.items())
            print(f"  metrics (/metrics): {ports}", flush=True)
        while not stop.wait(0.5):
            exited = [
                (p.name, p.popen.returncode)
                for p in cluster.processes
                if p.popen.poll() is not None
            ]
            for process in cluster.restart_exited():
                code = dict(exited).get(process.name)
                print(
                    f"{process.name} exited with {code}; restarted (pid {process.pid}, "
                    f"restart {process.restarts})",
                    flush=True,
                )
    finally:
        print("stopping durachat ...", flush=True)
        cluster.stop()


if __name__ == "__main__":
    main()
