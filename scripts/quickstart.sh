#!/usr/bin/env bash
# From a fresh machine to a finished job: set-up, release build, then every example task twice
# with Terminus 2 driven by the offline `oracle` model (no network, no API key).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "[quickstart] building terminus (release)"
cargo build --release --quiet --bin terminus
job_name="quickstart-$(date -u +%Y%m%d-%H%M%S)"
exec ./target/release/terminus run -c configs/quickstart.yaml --job-name "$job_name" "$@"
