#!/usr/bin/env bash
# The chaos suite: breaks things on purpose against the real engine, with the mock model on
# loopback, and prints expected / present / duplicated / leaked for each case. Bounded in time
# (each job of a case is killed after 10 minutes); the whole suite takes about 15 minutes here.
#
#   scripts/chaos.sh                 # every case
#   scripts/chaos.sh kill9 bad-inputs
#
# Cases: kill9, container-kills, llm-faults, dockerd-restart (stops and restarts dockerd, so run
# nothing else against this engine meanwhile), bad-inputs, adversary (hostile models, agents and
# tasks; a full loop-mounted disk; dockerd stopped with SIGSTOP for 40 s and 150 s — again, run
# nothing else meanwhile; needs root for the loop mount), node-loss (a job on the swarm test bed
# of scripts/swarm.sh, brought up for the case and torn down after it, while workers' dockerd
# are killed and restarted), lost-lines (48 trials at 24 at once, then 100 at once, whose
# terminals print numbered lines while the agent looks: none may be missing from the
# observations), runaway (degenerate replies, summaries larger than the context, a model that
# never says done, a budget reached mid-job: each job ends by itself, calls, disk and memory
# bounded), hostile-tasks (artifacts escaping by absolute and relative paths, tasks reading the
# model key or a variable not passed, fork bomb and memory hog sidecars, eight solutions that
# kill -9 -1, task.toml linked to /dev/zero, a job secret across kill -9 and resume: nothing
# written outside the jobs, no secret in a file, nothing halted, a refused resume still reaping the
# killed run's containers), trust (verdicts forged under agent_processes: kill, agents that end
# their own container, a model repeating itself after each summary, a fork bomb and a memory hog in
# Dockerfiles, providers stating no usable usage against a budget, a planted episode record).
# Exits non-zero when any case fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "[chaos] building terminus and terminus-chaos (release)"
cargo build --release --quiet -p terminus -p terminus-bench
if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qx node-loss; then
    trap 'scripts/swarm.sh down' EXIT
    eval "$(scripts/swarm.sh up | sed 's/^/export /')"
    ./target/release/terminus-chaos "$@"
    exit $?
fi
exec ./target/release/terminus-chaos "$@"
