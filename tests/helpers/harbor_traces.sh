#!/usr/bin/env bash
# Prepares Harbor 0.26's trace exporter: the runnable Harbor of tests/helpers/harbor_runtime.sh
# plus HuggingFace `datasets` from PyPI (the extra Harbor's exporter needs), in that cached venv
# outside the checkout.
#
# Usage: harbor_traces.sh     prints the venv's python
# Exit 0 when ready (a second call returns at once), 75 when PyPI cannot be reached, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
set +e
runtime=$("$here/harbor_runtime.sh" 0.26.0)
status=$?
set -e
[ $status -eq 0 ] || exit $status
python=$(printf '%s\n' "$runtime" | head -n1)
cache=${TERMINUS_CACHE_DIR:-/var/cache/terminus}/harbor-run
exec 9>"$cache/.traces-lock"
flock 9
if ! "$python" -c 'import datasets' >/dev/null 2>&1; then
    if ! "$python" -m pip install --quiet --disable-pip-version-check 'datasets>=3,<5' >"$cache/pip-datasets.log" 2>&1; then
        if grep -qiE "connection|resolve|network|timed out" "$cache/pip-datasets.log"; then exit 75; fi
        cat "$cache/pip-datasets.log" >&2
        exit 1
    fi
fi
echo "$python"
