"""Validates a job directory, or trajectory files, with Harbor's own pydantic models.

Usage:
  python validate_harbor.py --job JOB_DIR        every file Harbor's tools read in a job:
      config.json (JobConfig), result.json (JobResult), and in each trial directory (and its
      archived attempts/N/) config.json (TrialConfig), result.json (TrialResult) and every
      agent/trajectory*.json (Trajectory). Job and trial files are read through the viewer's
      own loader (harbor/viewer/scanner.py, JobScanner), which swallows errors into None, so
      each file is also validated directly to report why. Prints one JSON line at the end:
      {"agents": [...], "models": [...], "datasets": [...]} as `harbor view` lists the job,
      with "trajectories": how many were validated.
  python validate_harbor.py --trajectories FILE...   each file as an ATIF Trajectory.
Every trajectory must also be, byte for byte, the text Harbor's format_trajectory_json writes.

Exit 0 when every file is valid. Run with the interpreter of a harbor_models.sh virtualenv.
"""
import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import harbor
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult
from harbor.models.trajectories import Trajectory
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult

failed = 0
validated = 0


def check_trajectory(path):
    """One trajectory file, counted when valid."""
    global validated
    if check("Trajectory", path, parse_trajectory):
        validated += 1


def harbors_writer():
    """format_trajectory_json, loaded alone from Harbor's trajectory_utils.py (the module's other
    functions import parts of Harbor this environment does not hold)."""
    path = Path(harbor.__file__).parent / "utils" / "trajectory_utils.py"
    tree = ast.parse(path.read_text(), str(path))
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "format_trajectory_json")
    namespace = {"json": json, "re": re, "Any": Any}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["format_trajectory_json"]


format_trajectory_json = harbors_writer()


def parse_trajectory(text):
    """A valid Trajectory whose file is the text Harbor itself writes for it: same key order,
    escapes, float reprs, number arrays on one line."""
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
    return trajectory


def check(label, path, parse):
    """Parses one file with one model; records and prints the outcome."""
    global failed
    try:
        parse(path.read_text())
        print(f"valid {label}: {path}")
        return True
    except Exception as error:  # noqa: BLE001 - report every kind of failure
        failed += 1
        print(f"INVALID {label}: {path}: {error}")
        return False


def viewer_scanner(jobs_dir):
    """The viewer's JobScanner, loaded from its file: `harbor.viewer`'s package imports the
    web server (fastapi), which the models-only environment does not hold."""
    source = Path(harbor.__file__).parent / "viewer" / "scanner.py"
    spec = importlib.util.spec_from_file_location("harbor_viewer_scanner", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.JobScanner(jobs_dir)


def trial_dirs(job_dir):
    """Trial directories as the viewer lists them, plus the archived attempts below each."""
    for trial in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        if (trial / "config.json").exists() or (trial / "result.json").exists():
            yield trial
            attempts = trial / "attempts"
            if attempts.is_dir():
                yield from sorted(p for p in attempts.iterdir() if p.is_dir())


def validate_job(job_dir):
    global failed
    job_dir = job_dir.resolve()
    check("JobConfig", job_dir / "config.json", lambda t: JobConfig.model_validate(json.loads(t)))
    check("JobResult", job_dir / "result.json", JobResult.model_validate_json)
    n_trials = 0
    for trial in trial_dirs(job_dir):
        n_trials += 1
        check("TrialConfig", trial / "config.json", TrialConfig.model_validate_json)
        if (trial / "result.json").exists():
            check("TrialResult", trial / "result.json", TrialResult.model_validate_json)
        # A multi-step trial's trajectories are under steps/<name>/agent/.
        agent_dirs = [trial / "agent", *sorted((trial / "steps").glob("*/agent"))]
        for trajectory in sorted(t for d in agent_dirs for t in d.glob("trajectory*.json")):
            check_trajectory(trajectory)
    if n_trials == 0:
        failed += 1
        print(f"INVALID: {job_dir} holds no trial directory")
    # The viewer's own loader must see the job and each trial (it returns None on any error).
    scanner = viewer_scanner(job_dir.parent)
    name = job_dir.name
    config = scanner.get_job_config(name)
    if config is None or scanner.get_job_result(name) is None:
        failed += 1
        print(f"INVALID: the viewer's JobScanner cannot load {name}")
    for trial in scanner.list_trials(name):
        if scanner.get_trial_config(name, trial) is None or scanner.get_trial_result(name, trial) is None:
            failed += 1
            print(f"INVALID: the viewer's JobScanner cannot load trial {trial}")
    # What the job list shows: agents, models (the part after the provider) and datasets.
    summary = {"agents": [], "models": [], "datasets": [], "trajectories": 0}
    if config is not None:
        summary["agents"] = sorted({a.name for a in config.agents if a.name is not None})
        summary["models"] = sorted({a.model_name.split("/", 1)[-1] for a in config.agents if a.model_name})
        labels = {Path(d.path).name for d in config.datasets if d.is_local() and d.path is not None}
        labels |= {d.name for d in config.datasets if not d.is_local() and d.name is not None}
        labels |= {t.name if t.name is not None else Path(t.path).name for t in config.tasks}
        summary["datasets"] = sorted(labels)
    summary["trajectories"] = validated
    print(json.dumps(summary))


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--job":
        validate_job(Path(sys.argv[2]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "--trajectories":
        for arg in sys.argv[2:]:
            check_trajectory(Path(arg))
        print(json.dumps({"trajectories": validated}))
    else:
        sys.exit(__doc__)
    sys.exit(1 if failed else 0)
