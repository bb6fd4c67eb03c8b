#!/usr/bin/env bash
# Prepares a machine to run terminus: a Docker engine that answers, the base image
# `terminus-base:bookworm` that every example task builds FROM, and the viewer's browser assets
# (built from npm packages, embedded in the binary by the next cargo build). Idempotent: each step
# checks first and does nothing when its result is already there. Needs root (it installs
# packages and starts dockerd); no container registry is needed.
#
#   scripts/setup.sh             # what running terminus needs
#   scripts/setup.sh --browser   # … and what the browser tests need: Debian's chromium and the
#                                # playwright-core package (tests/browser)
set -euo pipefail
cd "$(dirname "$0")/.."

browser=0
for arg in "$@"; do
    case "$arg" in
        --browser) browser=1 ;;
        *) echo "usage: $0 [--browser]" >&2; exit 2 ;;
    esac
done

BASE_IMAGE="terminus-base:bookworm"
# Bump when the package list below changes, so an older base image is rebuilt.
BASE_REV="2"
BASE_PACKAGES="tmux,python3,procps,ca-certificates"

log() { printf '[setup] %s\n' "$*"; }

engine_answers() { docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

# Whether a live (not zombie) process with this exact name exists.
alive() {
    local pid state
    for pid in $(pgrep -x "$1" || true); do
        state=$(ps -o stat= -p "$pid" 2>/dev/null || true)
        case "$state" in
            Z*|"") ;;
            *) return 0 ;;
        esac
    done
    return 1
}

apt_install() {
    log "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
    apt-get update -qq
    apt-get install -y -qq "$@" >/dev/null
}

# 1. A Docker engine. Debian's docker.io gives engine 20.10 (API 1.41); the product negotiates.
if ! engine_answers; then
    if ! command -v dockerd >/dev/null 2>&1; then
        apt_install docker.io
    fi
    if ! alive dockerd; then
        # Pid files of an engine that did not shut down cleanly would stop the new one.
        rm -f /var/run/docker.pid
        alive containerd || rm -f /var/run/docker/containerd/containerd.pid
        log "starting dockerd (log: /var/log/dockerd.log)"
        setsid dockerd >/var/log/dockerd.log 2>&1 < /dev/null &
    fi
    for _ in $(seq 1 120); do
        engine_answers && break
        sleep 0.5
    done
    engine_answers || { log "the Docker engine did not answer within 60 s; see /var/log/dockerd.log"; exit 1; }
fi
log "docker engine: API $(docker version --format '{{.Server.APIVersion}}')"

# 2. The base image, made from Debian packages with debootstrap (no registry is reachable).
current_rev=$(docker image inspect --format '{{ index .Config.Labels "terminus.base.rev" }}' "$BASE_IMAGE" 2>/dev/null || true)
if [ "$current_rev" != "$BASE_REV" ]; then
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    rootfs=$(mktemp -d /tmp/terminus-base.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    log "building $BASE_IMAGE with debootstrap (about a minute)"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" >/tmp/terminus-debootstrap.log 2>&1 \
        || { log "debootstrap failed; see /tmp/terminus-debootstrap.log"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import \
        --change "LABEL terminus.base.rev=$BASE_REV" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        - "$BASE_IMAGE" >/dev/null
    log "imported $BASE_IMAGE"
else
    log "$BASE_IMAGE present (rev $BASE_REV)"
fi

# 3. Tools the tests and the chaos suite use: strace (a test reads the system calls of a run),
#    e2fsprogs (the chaos suite's small loop-mounted disk), debootstrap (the Debian trixie root
#    in which Harbor's own models check our files: tests/helpers/harbor_models.sh, run by the
#    tests themselves and cached under target/), and Debian's docker-registry with htpasswd
#    (apache2-utils): the private registry behind basic auth that the credentials test starts;
#    shellcheck, with which tests/tidy.rs checks the shell programs the crates carry.
missing=()
command -v strace >/dev/null 2>&1 || missing+=(strace)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# 4. The viewer's browser assets: crates/terminus-view/web → dist/ (esbuild bundles our code with
#    the asciinema-player package). Node.js is needed here only, never at run time; the machine's
#    own, else Debian's. Rebuilt when a source or the lock file is newer than the bundle.
web=crates/terminus-view/web
if ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
if [ ! -f "$web/dist/index.html" ] || [ -n "$(find "$web/src" "$web/build.mjs" "$web/package-lock.json" -newer "$web/dist/index.html" 2>/dev/null | head -1)" ]; then
    log "building the viewer's browser assets (npm ci, esbuild)"
    (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run --silent build) \
        || { log "building the viewer's assets failed (terminus still builds; its viewer then serves a plain page)"; exit 1; }
else
    log "viewer assets up to date"
fi

# 5. With --browser: what the viewer's browser tests drive (tests/integration/view.rs).
if [ "$browser" = 1 ]; then
    command -v chromium >/dev/null 2>&1 || apt_install chromium
    if [ ! -d tests/browser/node_modules/playwright-core ] || [ tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then
        log "installing playwright-core for the browser tests"
        (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    log "browser tests: $(chromium --version 2>/dev/null | head -1), playwright-core $(node -p "require('./tests/browser/node_modules/playwright-core/package.json').version")"
fi
