#!/usr/bin/env bash
# Validates a terminus job directory (or trajectory files) with Harbor VERSION's own models.
#
# Usage: harbor_validate.sh DIR VERSION --job JOB_DIR
#        harbor_validate.sh DIR VERSION --trajectories FILE...
# DIR is harbor_models.sh's cache (prepared here when needed). The files are copied into the
# root's /tmp (the root cannot see the host's files) and validate_harbor.py reads the copies.
# Exit codes: validate_harbor.py's (0 valid, 1 rejected), or harbor_models.sh's 75 when
# PyPI or the Debian mirror cannot be reached.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: harbor_validate.sh DIR VERSION --job JOB_DIR | --trajectories FILE...}
version=${2:?usage: harbor_validate.sh DIR VERSION --job JOB_DIR | --trajectories FILE...}
mode=${3:?usage: harbor_validate.sh DIR VERSION --job JOB_DIR | --trajectories FILE...}
shift 3
"$here/harbor_models.sh" "$dir" "$version" || exit $?
root="$dir/root"
work=$(mktemp -d "$root/tmp/validate.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/validate_harbor.py" "$work/"
args=()
case "$mode" in
    --job)
        job=${1:?a job directory}
        # The job keeps its own name: the viewer's loader looks jobs up by directory name.
        name=$(basename "$(cd "$job" && pwd)")
        mkdir -p "$work/jobs"
        cp -r "$job" "$work/jobs/$name"
        args=(--job "/tmp/$(basename "$work")/jobs/$name")
        ;;
    --trajectories)
        mkdir -p "$work/files"
        i=0
        for file in "$@"; do
            i=$((i + 1))
            mkdir -p "$work/files/$i"
            cp "$file" "$work/files/$i/"
            args+=("/tmp/$(basename "$work")/files/$i/$(basename "$file")")
        done
        args=(--trajectories "${args[@]}")
        ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
enter=(chroot "$root")
[ "$(id -u)" = 0 ] || enter=(unshare -r chroot "$root")
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
    "${enter[@]}" "/opt/harbor-$version/bin/python" "/tmp/$(basename "$work")/validate_harbor.py" "${args[@]}"
