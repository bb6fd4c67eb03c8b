#!/usr/bin/env bash
# Prepares a throwaway virtualenv holding Harbor's own ATIF models (and its trajectory-file
# writer), to validate our trajectories.
#
# Harbor 0.25.0 (the reference) needs Python >= 3.12 as a package, but its trajectory models
# need only pydantic. So: pydantic from PyPI into a venv of the machine's Python, and the wheel of
# harbor 0.25.0 from PyPI, of which only `harbor/models/trajectories` is unpacked (the package's
# other modules and their dependencies are not needed to load those models).
#
# Usage: atif_venv.sh DIR   — exit 0 when DIR is ready, 75 when PyPI cannot be reached.
set -euo pipefail
dir=${1:?usage: atif_venv.sh DIR}
# A venv made before the serialisation check also needs harbor/utils/trajectory_utils.py.
[ -f "$dir/.ready" ] && [ -f "$dir/atif/harbor/utils/trajectory_utils.py" ] && exit 0
rm -rf "$dir"
python3 -m venv "$dir"
if ! "$dir/bin/pip" install -q --disable-pip-version-check "pydantic>=2,<3" 2>"$dir.pip.log"; then
    echo "PyPI is unreachable (pip install pydantic failed; see $dir.pip.log)" >&2
    exit 75
fi
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
if ! "$dir/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
        -d "$wheels" "harbor==0.25.0" 2>>"$dir.pip.log"; then
    echo "PyPI is unreachable (pip download harbor failed; see $dir.pip.log)" >&2
    exit 75
fi
models="$dir/atif"
mkdir -p "$models"
"$dir/bin/python" - "$wheels"/harbor-*.whl "$models" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith("harbor/models/trajectories/") and n.endswith(".py")]
    if not members:
        sys.exit("the harbor wheel has no harbor/models/trajectories")
    # Harbor's writer of trajectory files (format_trajectory_json): our files must be its text.
    members.append("harbor/utils/trajectory_utils.py")
    for name in members:
        z.extract(name, out)
for stub in ("harbor/__init__.py", "harbor/models/__init__.py", "harbor/utils/__init__.py"):
    open(f"{out}/{stub}", "w").close()
PY
touch "$dir/.ready"
