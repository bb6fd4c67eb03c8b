"""Validates trajectory files with Harbor's own pydantic models (harbor.models.trajectories), and
checks that each file's text is what Harbor itself writes for that trajectory
(harbor.utils.trajectory_utils.format_trajectory_json of the model's JSON dump): same key order,
same escapes, same float reprs, number arrays on one line.

Usage: python validate_atif.py FILE...   Exit 0 when every file is a valid ATIF Trajectory,
written as Harbor writes it.
Run with the interpreter of the venv made by atif_venv.sh, with its `atif` directory on PYTHONPATH.
"""
import ast
import importlib.util
import json
import os
import re
import sys
from typing import Any

from harbor.models.trajectories import Trajectory


def harbors_writer():
    """format_trajectory_json, loaded alone from Harbor's trajectory_utils.py: the module's other
    functions import parts of Harbor this venv does not hold."""
    harbor_dir = os.path.dirname(importlib.util.find_spec("harbor").origin)
    path = os.path.join(harbor_dir, "utils", "trajectory_utils.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "format_trajectory_json")
    namespace = {"json": json, "re": re, "Any": Any}
    exec(compile(ast.Module(body=[function], type_ignores=[]), path, "exec"), namespace)
    return namespace["format_trajectory_json"]


format_trajectory_json = harbors_writer()

failed = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            text = f.read()
        trajectory = Trajectory.model_validate(json.loads(text))
        expected = format_trajectory_json(trajectory.to_json_dict())
        if text != expected:
            got_lines, want_lines = text.splitlines(), expected.splitlines()
            line = next(
                (i for i, (a, b) in enumerate(zip(got_lines, want_lines)) if a != b),
                min(len(got_lines), len(want_lines)),
            )
            got = got_lines[line] if line < len(got_lines) else "<end>"
            want = want_lines[line] if line < len(want_lines) else "<end>"
            raise ValueError(f"not Harbor's text at line {line + 1}: ours {got!r}, Harbor's {want!r}")
        print(f"valid: {path} ({trajectory.schema_version}, {len(trajectory.steps)} steps)")
    except Exception as error:  # noqa: BLE001 - report every kind of failure
        failed += 1
        print(f"INVALID: {path}: {error}")
sys.exit(1 if failed else 0)
