"""Validates trajectory files with Harbor's own pydantic models (harbor.models.trajectories).

Usage: python validate_atif.py FILE...   Exit 0 when every file is a valid ATIF Trajectory.
Run with the interpreter of the venv made by atif_venv.sh, with its `atif` directory on PYTHONPATH.
"""
import json
import sys

from harbor.models.trajectories import Trajectory

failed = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            trajectory = Trajectory.model_validate(json.load(f))
        print(f"valid: {path} ({trajectory.schema_version}, {len(trajectory.steps)} steps)")
    except Exception as error:  # noqa: BLE001 - report every kind of failure
        failed += 1
        print(f"INVALID: {path}: {error}")
sys.exit(1 if failed else 0)
