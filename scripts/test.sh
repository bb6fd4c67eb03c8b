#!/usr/bin/env bash
# The whole test suite, Docker required: set-up (engine + base image), formatting and lint
# checks, then every unit and integration test in release mode (the same build the quickstart
# uses, so the dependencies compile once).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
export TERMINUS_REQUIRE_DOCKER=1

echo "[test] cargo fmt --check"
cargo fmt --all -- --check
echo "[test] cargo clippy"
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
echo "[test] cargo test"
cargo test --release --workspace
echo "[test] no docker CLI in the product"
if grep -rn 'Command::new("docker' crates src 2>/dev/null; then
    echo "the product must reach Docker through bollard only" >&2
    exit 1
fi
echo "[test] all green"
