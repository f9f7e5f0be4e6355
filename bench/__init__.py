"""durachat's load benchmark: durachat against a bare Redis Streams relay (`make bench`).

`python -m bench` starts a local cluster (1 gateway, 2 shards, 1 jobs worker) serving the
`bench-agent` (`bench.agents`), then the no-framework baseline (`bench.baseline`), drives both
with the same load generator (`bench.loadgen`, `bench.client`), prints a table and writes
`bench/results/<UTC timestamp>.json` and `bench/results/latest.json`.

Set BENCH_PROFILE=gateway,shard (or `--profile`) to run those roles under cProfile.
"""
