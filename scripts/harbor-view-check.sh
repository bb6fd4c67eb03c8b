#!/usr/bin/env bash
# Checks that `harbor view` (Harbor 0.26's own viewer, the real server) shows terminus jobs:
# each job in its job list with agents, models and datasets, its trial count, and each trial.
#
# Usage: scripts/harbor-view-check.sh [JOBS_DIR]
#   JOBS_DIR holds job directories (terminus's `jobs_dir`). Without it, a small job is run first
#   (the offline oracle model on examples/tasks/hello-world and sort-numbers; needs Docker and
#   target/release/terminus, both made by scripts/setup.sh and `cargo build --release`).
# Harbor 0.26 with every dependency is installed once into a Debian trixie root under
# target/harbor-models (tests/helpers/harbor_models.sh --full; needs PyPI and the Debian mirror).
# Exit 0 when the viewer lists every job and trial; 1 otherwise; 75 when PyPI or the mirror
# cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
cache="$repo/target/harbor-models"
version=0.26.0
log() { printf '[harbor-view-check] %s\n' "$*"; }

tests/helpers/harbor_models.sh --full "$cache" "$version" || exit $?
root="$cache/root"

jobs=${1:-}
scratch=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$scratch" "${work:-}"
}
trap cleanup EXIT
if [ -z "$jobs" ]; then
    bin="$repo/target/release/terminus"
    [ -x "$bin" ] || { log "build terminus first: cargo build --release"; exit 1; }
    jobs="$scratch/jobs"
    log "running a small job into $jobs"
    # Exit 0 or 1 (sort-numbers' oracle fails its tests by design) both leave a full job.
    "$bin" run -q -p examples/tasks/hello-world -p examples/tasks/sort-numbers -a terminus-2 -m oracle \
        -o "$jobs" --job-name view-check >"$scratch/run.log" 2>&1 || [ $? -eq 1 ] \
        || { cat "$scratch/run.log"; exit 1; }
fi

# The root sees only its own files: the jobs are copied in.
work=$(mktemp -d "$root/tmp/view.XXXXXX")
cp -r "$jobs" "$work/jobs"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
enter=(chroot "$root")
[ "$(id -u)" = 0 ] || enter=(unshare -r chroot "$root")
log "harbor view on port $port"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "${enter[@]}" \
    "/opt/harbor-$version-full/bin/harbor" view "/tmp/$(basename "$work")/jobs" --jobs --no-build \
    --host 127.0.0.1 --port "$port" >"$scratch/view.log" 2>&1 &
server_pid=$!

status=0
python3 - "$port" "$jobs" "$scratch/view.log" <<'PY' || status=$?
import json, os, sys, time, urllib.request

port, jobs_dir, view_log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
base = f"http://127.0.0.1:{port}"

def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as reply:
        return json.load(reply)

deadline = time.time() + 90
while True:
    try:
        listing = get("/api/jobs?page_size=100")
        break
    except Exception as error:  # noqa: BLE001 - the server is still starting
        if time.time() > deadline:
            sys.exit(f"harbor view did not answer on {base}: {error}\n{open(view_log).read()}")
        time.sleep(1)

names = sorted(d for d in os.listdir(jobs_dir) if os.path.isdir(os.path.join(jobs_dir, d)))
shown = {job["name"]: job for job in listing["items"]}
failed = False
for name in names:
    job = shown.get(name)
    if job is None:
        print(f"MISSING: {name} is not in the job list"); failed = True; continue
    trials = sorted(
        t for t in os.listdir(os.path.join(jobs_dir, name))
        if os.path.isfile(os.path.join(jobs_dir, name, t, "result.json"))
    )
    listed = get(f"/api/jobs/{name}/trials?page_size=100")
    problems = []
    if not job["agents"]:
        problems.append("no agents (its config.json did not parse)")
    if not job["datasets"]:
        problems.append("no datasets")
    if job.get("n_total_trials") is None:
        problems.append("no trial count (its result.json did not parse)")
    if listed["total"] != len(trials):
        problems.append(f"{listed['total']} trials listed, {len(trials)} on disk")
    for trial in trials:
        detail = get(f"/api/jobs/{name}/trials/{trial}")
        if detail.get("trial_name") != trial or detail.get("id") is None:
            problems.append(f"trial {trial} is not shown from its result.json")
    print(f"{name}: agents={job['agents']} models={job['models']} providers={job['providers']} "
          f"datasets={job['datasets']} trials={job.get('n_completed_trials')}/{job.get('n_total_trials')}"
          f" errored={job.get('n_errored_trials')}" + (f"  PROBLEMS: {problems}" if problems else ""))
    failed = failed or bool(problems)
sys.exit(1 if failed else 0)
PY
[ $status -eq 0 ] && log "harbor view lists every job and trial" || log "harbor view does not show everything (above)"
exit $status
