#!/usr/bin/env bash
# The whole test suite, Docker required: set-up (engine + base image), formatting and lint
# checks, then every unit and integration test in release mode under cargo-nextest (each test in
# a process of its own, killed when it outlives the `ci` profile's limit in .config/nextest.toml;
# JUnit and per-test timings under target/nextest/). One release build serves every step: it is
# made with the tests' feature set (`--workspace --all-targets`), which the chaos binaries and
# the quickstart's binary then share.
#
#   scripts/test.sh                 # the suite
#   scripts/test.sh --real-model    # the suite, then the tests against a real model server
#                                   # (scripts/real-model.sh: llama-cpp-python + SmolLM2-135M)
#   TERMINUS_REQUIRE_SWARM=1 scripts/test.sh   # … with the swarm tests on the 3-node test bed
#                                   # of scripts/swarm.sh (brought up first, torn down after)
set -euo pipefail
cd "$(dirname "$0")/.."

real_model=0
for arg in "$@"; do
    case "$arg" in
        --real-model) real_model=1 ;;
        *) echo "usage: $0 [--real-model]" >&2; exit 2 ;;
    esac
done

scripts/setup.sh --browser
# cargo-nextest runs the tests; installed once per machine.
NEXTEST_VERSION=0.9.143
if ! cargo nextest --version >/dev/null 2>&1; then
    echo "[test] installing cargo-nextest $NEXTEST_VERSION (cargo install, once per machine)"
    cargo install --locked --quiet "cargo-nextest@$NEXTEST_VERSION"
fi
export TERMINUS_REQUIRE_DOCKER=1 TERMINUS_REQUIRE_BROWSER=1 TERMINUS_REQUIRE_HARBOR=1

install_pid=""
if [ "$real_model" = 1 ]; then
    # On a machine that has never built it, llama-cpp-python's wheel takes 25–40 minutes: build
    # it at the lowest priority while the suite runs (its tests mostly wait on Docker and
    # timers), so it costs little wall time; a cached venv is checked in seconds.
    mkdir -p target
    echo "[test] real model: preparing the server in the background (log: target/real-model-install.log)"
    # Its own process group (setsid), so that a failing suite stops the build with it.
    setsid nice -n 19 scripts/real-model.sh install >target/real-model-install.log 2>&1 </dev/null &
    install_pid=$!
fi

# What the tests fetch from PyPI and the Debian mirror (Harbor's installs, models and trace
# exporter), prepared beside the build rather than inside the first test that asks.
echo "[test] test tools: preparing in the background (log: target/prepare.log)"
mkdir -p target
setsid nice -n 10 tests/helpers/prepare.sh >target/prepare.log 2>&1 </dev/null &
prepare_pid=$!

swarm_up=0
if [ "${TERMINUS_REQUIRE_SWARM:-}" = 1 ]; then
    echo "[test] swarm: bringing up the test bed (scripts/swarm.sh up)"
    eval "$(scripts/swarm.sh up | sed 's/^/export /')"
    swarm_up=1
fi
cleanup() {
    [ -z "$prepare_pid" ] || kill -- "-$prepare_pid" 2>/dev/null || true
    [ -z "$install_pid" ] || kill -- "-$install_pid" 2>/dev/null || true
    [ "$swarm_up" = 0 ] || scripts/swarm.sh down || true
}
trap cleanup EXIT

echo "[test] cargo fmt --check"
cargo fmt --all -- --check
echo "[test] cargo clippy"
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
echo "[test] release build (the tests' feature set, shared by every step below)"
cargo build --release --workspace --all-targets --quiet
echo "[test] tidy: the codebase's rules (tests/tidy.rs)"
cargo nextest run --release --workspace --profile ci --hide-progress-bar -E 'binary(tidy)'
echo "[test] tests (cargo nextest, profile ci)"
# Each skipped test appends `tier: reason` here; a tier this run requires must not appear.
export TERMINUS_SKIP_LOG="$PWD/target/skipped-tests.log"
rm -f "$TERMINUS_SKIP_LOG"
# Prints each test's time from a profile's JUnit report, slowest first (tests under 1 s are
# counted, not listed).
timings() {
    local junit="target/nextest/$1/junit.xml"
    [ -f "$junit" ] || return 0
    echo "[test] per-test timings ($junit):"
    sed -n 's/.*<testcase name="\([^"]*\)" classname="\([^"]*\)" timestamp="[^"]*" time="\([0-9.]*\)".*/\3 \2 \1/p' "$junit" \
        | sort -rn | awk '$1 >= 1 { printf "[test]   %8.1f s  %s %s\n", $1, $2, $3; next } { fast++ } END { printf "[test]   and %d tests under 1 s\n", fast }'
}
if ! wait "$prepare_pid"; then
    prepare_pid=""
    cat target/prepare.log >&2
    echo "[test] preparing the test tools failed" >&2
    exit 1
fi
prepare_pid=""
cat target/prepare.log
suite_status=0
cargo nextest run --release --workspace --profile ci --hide-progress-bar -E 'not binary(tidy)' || suite_status=$?
timings ci
[ "$suite_status" = 0 ] || { echo "[test] the suite failed (JUnit: target/nextest/ci/junit.xml)" >&2; exit 1; }
# nextest runs no doctests: cargo test runs them (the workspace has none today).
cargo test --release --workspace --doc --quiet
# Fails when a tier in $@ appears in the skip log.
fail_if_skipped() {
    [ -s "$TERMINUS_SKIP_LOG" ] || return 0
    echo "[test] skipped tests:"
    sed 's/^/[test]   /' "$TERMINUS_SKIP_LOG"
    for tier in "$@"; do
        if grep -q "^$tier: " "$TERMINUS_SKIP_LOG"; then
            echo "[test] a required tier ($tier) was skipped: the run fails" >&2
            exit 1
        fi
    done
}
if [ "${TERMINUS_REQUIRE_SWARM:-}" = 1 ]; then
    fail_if_skipped docker browser harbor swarm
else
    fail_if_skipped docker browser harbor
fi
echo "[test] chaos: hostile-tasks (untrusted tasks and a secret across kill -9 and resume) and trust (forged verdicts, self-destructing agents, repeating models, hostile builds, unmetered providers, planted records)"
./target/release/terminus-chaos hostile-tasks trust
echo "[test] chaos smoke: kill9 (24 trials, 3 kills and resumes) and bad-inputs"
TERMINUS_CHAOS_SMOKE=1 ./target/release/terminus-chaos kill9 bad-inputs
if [ "$real_model" = 1 ]; then
    echo "[test] real model: llama-cpp-python's server with SmolLM2-135M (scripts/real-model.sh)"
    started=$SECONDS
    if ! wait "$install_pid"; then
        install_pid=""
        cat target/real-model-install.log >&2
        echo "[test] real model: preparing the server failed" >&2
        exit 1
    fi
    install_pid=""
    cat target/real-model-install.log
    # The same build as above: nothing is compiled again.
    rm -f "$TERMINUS_SKIP_LOG"
    real_status=0
    scripts/real-model.sh run -- env TERMINUS_REQUIRE_REAL_MODEL=1 \
        cargo nextest run --release --workspace --profile ci-real-model --hide-progress-bar \
        -E 'binary(integration) & test(/^real_model::/)' || real_status=$?
    timings ci-real-model
    [ "$real_status" = 0 ] || { echo "[test] real model: failed" >&2; exit 1; }
    fail_if_skipped real-model
    echo "[test] real model: $((SECONDS - started)) s after the suite"
fi
echo "[test] all green"
