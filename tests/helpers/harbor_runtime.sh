#!/usr/bin/env bash
# Prepares a runnable Harbor of one version, for the tests that run Harbor's own agents beside
# ours (the differential and oracle-parity tests): a virtualenv with `harbor==VERSION` and all
# its dependencies from PyPI, and the `docker compose` v2 plugin Harbor's Docker environment
# calls (bookworm has only compose v1: Debian trixie's static docker-compose binary is fetched
# with apt into a private state directory; the system's apt and docker are left untouched).
#
# Usage: harbor_runtime.sh VERSION    prints two lines: the venv's python, the DOCKER_CONFIG
#                                     directory whose cli-plugins/ holds docker-compose
# Cache: $TERMINUS_CACHE_DIR/harbor-run (default /var/cache/terminus), outside the checkout.
# Harbor needs Python >= 3.12: the first of $TERMINUS_PYTHON312, python3.13, python3.12, and
# pyenv's 3.12/3.13 that exists is used.
# Exit 0 when ready (a second call returns at once), 75 when PyPI or the Debian mirror cannot
# be reached, 1 on any other failure.
set -euo pipefail
version=${1:?usage: harbor_runtime.sh VERSION}
cache=${TERMINUS_CACHE_DIR:-/var/cache/terminus}/harbor-run
venv="$cache/venv-$version"
plugins="$cache/docker-config"
mirror=${TERMINUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

reachable() { python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=20)" "$1" 2>/dev/null; }

find_python() {
    local candidate
    for candidate in "${TERMINUS_PYTHON312:-}" python3.13 python3.12 \
            "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || [ -x "$candidate" ] || continue
        if "$candidate" -c 'import sys, ssl, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# 1. The virtualenv.
if [ ! -f "$venv/.ready" ]; then
    python=$(find_python) || { echo "no Python >= 3.12 found (set TERMINUS_PYTHON312)" >&2; exit 1; }
    rm -rf "$venv"
    "$python" -m venv "$venv"
    echo "[harbor-runtime] pip install harbor==$version into $venv (a minute or two, once)" >&2
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "harbor==$version" \
            >"$cache/pip-$version.log" 2>&1; then
        reachable https://pypi.org/simple/harbor/ || { echo "PyPI is unreachable (see $cache/pip-$version.log)" >&2; exit 75; }
        echo "pip could not install harbor==$version (see $cache/pip-$version.log)" >&2
        exit 1
    fi
    touch "$venv/.ready"
fi

# 2. docker compose v2, from trixie's package (a static binary).
if [ ! -x "$plugins/cli-plugins/docker-compose" ]; then
    apt_dir="$cache/apt"
    rm -rf "$apt_dir"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
    echo "deb $mirror trixie main" >"$apt_dir/etc/sources.list"
    touch "$apt_dir/status"
    opts=(-o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::State::status=$apt_dir/status" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
    echo "[harbor-runtime] fetching trixie's docker-compose" >&2
    if ! apt-get "${opts[@]}" -qq update >"$cache/apt.log" 2>&1; then
        reachable "$mirror/dists/trixie/Release" || { echo "the Debian mirror $mirror is unreachable (see $cache/apt.log)" >&2; exit 75; }
        echo "apt could not read trixie's lists (see $cache/apt.log)" >&2
        exit 1
    fi
    (cd "$apt_dir" && apt-get "${opts[@]}" -qq download docker-compose >>"$cache/apt.log" 2>&1) \
        || { echo "apt could not download docker-compose (see $cache/apt.log)" >&2; exit 1; }
    extract="$apt_dir/extract"
    mkdir -p "$extract"
    dpkg-deb -x "$apt_dir"/docker-compose_*.deb "$extract"
    mkdir -p "$plugins/cli-plugins"
    binary=$(find "$extract" -type f -name docker-compose -path '*cli-plugins*' | head -1)
    [ -n "$binary" ] || binary=$(find "$extract" -type f -name docker-compose | head -1)
    [ -n "$binary" ] || { echo "the docker-compose package holds no docker-compose binary" >&2; exit 1; }
    install -m 0755 "$binary" "$plugins/cli-plugins/docker-compose.new"
    mv "$plugins/cli-plugins/docker-compose.new" "$plugins/cli-plugins/docker-compose"
    rm -rf "$apt_dir"
fi
DOCKER_CONFIG="$plugins" docker compose version >/dev/null \
    || { echo "docker compose from $plugins does not run" >&2; exit 1; }
echo "$venv/bin/python"
echo "$plugins"
