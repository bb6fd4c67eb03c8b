#!/usr/bin/env bash
# Prepares Harbor's own pydantic models, of one Harbor version, to validate what terminus writes.
#
# Harbor (0.25, 0.26) needs Python >= 3.12; the machine's Debian bookworm has 3.11, and Harbor's
# models use 3.12's standard library (`typing.override`). So the models run in a Debian trixie
# root (Python 3.13) made once with debootstrap from the Debian mirror, entered with chroot.
# Each version gets its own virtualenv in that root holding the harbor wheel from PyPI without
# its dependencies, plus only the PyPI packages its models import (pydantic, shortuuid, …);
# the CLI, the viewer's server and the LLM stack are not installed. `--full` installs the whole
# package with every dependency instead (for `harbor view`, scripts/harbor-view-check.sh).
#
# Usage: harbor_models.sh [--full] DIR VERSION
#   DIR/root                  the trixie root (shared by every version)
#   DIR/root/opt/harbor-VERSION[-full]   the virtualenv; its python is
#       /opt/harbor-VERSION[-full]/bin/python inside the root (see harbor_run below).
# Exit 0 when ready (cached: a second call returns at once), 75 when PyPI or the Debian mirror
# cannot be reached, 1 on any other failure. Needs root, or user namespaces (unshare -r).
set -euo pipefail
full=""
if [ "${1:-}" = "--full" ]; then full="-full"; shift; fi
dir=${1:?usage: harbor_models.sh [--full] DIR VERSION}
version=${2:?usage: harbor_models.sh [--full] DIR VERSION}
root="$dir/root"
venv="/opt/harbor-$version$full"
mirror=${TERMINUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$dir"
# Tests run in parallel: one preparation at a time (the others then find it ready).
exec 9>"$dir/.lock"
flock 9

unreachable() { echo "$1" >&2; exit 75; }

# Runs a command inside the root with a clean environment (the host's PIP_* settings name host
# paths), as root, or in a user namespace when not root.
in_root() {
    local enter=(chroot "$root")
    [ "$(id -u)" = 0 ] || enter=(unshare -r chroot "$root")
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        PIP_CERT=/etc/ssl/certs/host-ca.crt PIP_DEFAULT_TIMEOUT=60 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        PYTHONDONTWRITEBYTECODE=1 "${enter[@]}" "$@"
}

# 1. The trixie root with Python 3.13, once for every version.
if [ ! -f "$root/.ready" ]; then
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
    rm -rf "$root"
    echo "[harbor-models] debootstrap trixie into $root (a few minutes, once)" >&2
    if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            trixie "$root" "$mirror" >"$dir/debootstrap.log" 2>&1; then
        if ! python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=20)" \
                "$mirror/dists/trixie/Release" 2>/dev/null; then
            unreachable "the Debian mirror $mirror is unreachable (debootstrap failed; see $dir/debootstrap.log)"
        fi
        echo "debootstrap failed; see $dir/debootstrap.log" >&2
        exit 1
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb
    touch "$root/.ready"
fi
# Name resolution and the host's trusted certificates (a TLS-inspecting proxy's CA is among them).
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/host-ca.crt"

# 2. The version's virtualenv.
[ -f "$root$venv/.ready" ] && exit 0
rm -rf "$root$venv"
log="$dir/pip-$version$full.log"
pip_failed() {
    if ! in_root python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=20)" \
            >/dev/null 2>&1; then
        unreachable "PyPI is unreachable (pip failed; see $log)"
    fi
    echo "pip failed with PyPI reachable; see $log" >&2
    exit 1
}
in_root python3 -m venv "$venv" >"$log" 2>&1 || { echo "python3 -m venv failed; see $log" >&2; exit 1; }
if [ -n "$full" ]; then
    in_root "$venv/bin/pip" install -q "harbor==$version" >>"$log" 2>&1 || pip_failed
else
    # What importing the five models loads (measured through sys.modules): pydantic, shortuuid
    # (trial names), toml (task files), pathspec (file filters), packaging (version checks).
    in_root "$venv/bin/pip" install -q --no-deps "harbor==$version" >>"$log" 2>&1 || pip_failed
    in_root "$venv/bin/pip" install -q "pydantic>=2.12,<3" shortuuid toml pathspec packaging >>"$log" 2>&1 \
        || pip_failed
fi
touch "$root$venv/.ready"
