#!/usr/bin/env bash
# Measures terminus against the raw Docker floor on this machine: set-up (engine + base image),
# a release build, then `terminus-bench` (N trials at concurrency C of examples/tasks/hello-world
# against the mock model, with and without early_return). Figures are printed and written as
# JSON under target/bench/.
#
#   scripts/bench.sh                      # defaults: 40 trials at concurrency 8
#   scripts/bench.sh --trials 80 --concurrency 16
#   scripts/bench.sh --scale              # 200 concurrent trials, peak containers, dockerd memory
#   scripts/bench.sh --realistic [--trials T] [--concurrencies 50,100,200,auto] [--latency 2] [--no-record]
#                                         # T trials × 26 episodes, the model answering in LATENCY s, at
#                                         # each concurrency: rewarded, wall, CPU, loop overhead, dockerd CPU,
#                                         # the host's CPU by process and by parent of ended helpers
#   scripts/bench.sh --hostile            # a terminal flood and a log bomb, each alone: turn cost, peak RSS
#   scripts/bench.sh --runaway [--episodes E]  # one trial of E and 2E episodes of 400 KB replies: disk, peak RSS
#   scripts/bench.sh --long               # 20 trials × 80 episodes × 8 KB: CPU per model call, late/early gap
#   scripts/bench.sh --long --repeat 3    # the same three times, medians reported
#   scripts/bench.sh --scale --long       # the same with 200 trials × 50 episodes
#   scripts/bench.sh --view [--cold]      # `terminus view` on a 1 GB job (500 trials × 2 MB): each page's
#                                         # first and warm response time (--cold drops the page cache first)
#   scripts/bench.sh --serve              # the same job through `terminus run` and `terminus serve` (wall, the
#                                         # service's overhead), then 200 trials as 4 jobs under --max-concurrent 16
#   scripts/bench.sh --swarm              # the same job on the local engine and on a 3-node swarm test bed
#                                         # (scripts/swarm.sh; all nodes share this machine's cores)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "[bench] building terminus and terminus-bench (release)"
cargo build --release --quiet -p terminus -p terminus-bench
for arg in "$@"; do
    if [ "$arg" = --swarm ]; then
        # The test bed for the run, torn down after it.
        trap 'scripts/swarm.sh down' EXIT
        eval "$(scripts/swarm.sh up | sed 's/^/export /')"
        ./target/release/terminus-bench "$@"
        exit $?
    fi
done
exec ./target/release/terminus-bench "$@"
