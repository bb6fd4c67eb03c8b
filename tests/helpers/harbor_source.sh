#!/usr/bin/env bash
# Unpacks one Harbor version's wheel from PyPI (without its dependencies) into a cache outside
# the checkout, so that `import harbor` finds its source with PYTHONPATH: enough for
# `terminus texts import-harbor`, which only reads Terminus 2's files.
#
# Usage: harbor_source.sh VERSION        prints the directory to put on PYTHONPATH
# Cache: $TERMINUS_CACHE_DIR/harbor-src/VERSION (default /var/cache/terminus). Exit 0 when ready
# (a second call returns at once), 75 when PyPI cannot be reached, 1 on any other failure.
set -euo pipefail
version=${1:?usage: harbor_source.sh VERSION}
cache=${TERMINUS_CACHE_DIR:-/var/cache/terminus}/harbor-src
dir="$cache/$version"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$dir/.ready" ]; then
    rm -rf "$dir" "$dir.download"
    mkdir -p "$dir.download"
    # Harbor needs Python 3.12; the wheel is pure Python, so pip may fetch it for 3.12 from here.
    if ! python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -q \
            -d "$dir.download" "harbor==$version" >"$cache/pip-$version.log" 2>&1; then
        if ! python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/harbor/', timeout=20)" 2>/dev/null; then
            echo "PyPI is unreachable (see $cache/pip-$version.log)" >&2
            exit 75
        fi
        echo "pip could not download harbor==$version (see $cache/pip-$version.log)" >&2
        exit 1
    fi
    mkdir -p "$dir"
    python3 -m zipfile -e "$dir.download"/harbor-"$version"-*.whl "$dir"
    rm -rf "$dir.download"
    touch "$dir/.ready"
fi
echo "$dir"
