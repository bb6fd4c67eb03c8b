#!/usr/bin/env bash
# Prepares, before the suite starts, every tool the tests fetch from PyPI and the Debian mirror:
# Harbor 0.25.0's and 0.26.0's runnable installs and unpacked sources, their models in the
# Debian trixie root, and Harbor 0.26's trace exporter. Each helper caches what it makes, so a
# second call returns in seconds. Run here, the first install on a new machine (several
# minutes) is not charged to whichever test happens to ask first, and the tests' time limits
# (.config/nextest.toml) measure the tests alone.
#
# Usage: prepare.sh        exit 0 when all is ready, else the first failing helper's code
#                          (75: PyPI or the mirror cannot be reached)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

step() {
    local started=$SECONDS
    "$@" >/dev/null
    echo "[prepare] $(basename "$1")${2:+ ${*:2}} ready ($((SECONDS - started)) s)"
}

for version in 0.25.0 0.26.0; do
    step "$here/harbor_runtime.sh" "$version"
    step "$here/harbor_source.sh" "$version"
    step "$here/harbor_models.sh" "$root/target/harbor-models" "$version"
done
step "$here/harbor_traces.sh"
