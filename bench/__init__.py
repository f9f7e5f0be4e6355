"""durachat's load benchmark (`make bench`, i.e. `python -m bench`).

It starts a local cluster (1 gateway, 2 shards, 1 jobs worker, embedded Redis) serving the
`bench-agent` (`bench.agents`: the scripted model, every text delta stamped with the time it
left the model), then the no-framework baseline (`bench.baseline`: a producer process XADDing
the same stamped frames at the same pacing and a minimal Starlette relay doing one multiplexed
blocking XREAD), and drives both with the same load generator (`bench.loadgen` on
`bench.client`, uvloop, two processes by default). Phases, per target (`bench.phases`):

1. warm-up: a few short conversations, so every shard has run a turn once;
2. idle: 2,000 idle WebSockets (`--idle-connections`) over 200 conversations, RSS of the
   gateway/relay before/after;
3. sequential: 30 conversations one at a time, a first (new conversation) and a second message;
4. burst: 50 conversations sending at once, twice;
5. load: 200 conversations, one unmeasured warm-up message each, then `--rounds` messages of 40
   words back to back; CPU time of every process and Redis `INFO commandstats` over the window.

Results: a table on stdout, `bench/results/<UTC timestamp>.json` and `bench/results/latest.json`.
Options: `--conversations`, `--rounds`, `--quick`, `--client-procs`, `--no-deflate`,
`--targets`, `--shards`, `--gateways`, `--phases` (e.g. `idle` alone), `--ramp`, `--keep`,
`--results-dir`;
`BENCH_PROFILE=gateway,shard,relay,producer` (or `--profile`) runs those processes under cProfile
and prints where their time went. `python -m bench.scale` (`make bench-scale`) runs the load
phase over several cluster shapes and derives a per-core capacity model (docs/benchmarks.md).
"""
