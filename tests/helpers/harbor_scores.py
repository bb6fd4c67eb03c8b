"""A job directory's scores as one Harbor version computes them, from the files alone.

Usage: python harbor_scores.py JOB_DIR     (the interpreter of a venv with `harbor` installed)

Reads every trial's result.json with Harbor's TrialResult model (model_validate_json, so a file
Harbor cannot read fails here), and the job's result.json with its JobResult model. Then runs
Harbor's own aggregation of the job's end: JobPlan.aggregate_stats, which is JobStats
.from_trial_results, each dataset's metrics (Mean, as a job without `metrics` has) over the
rewards Harbor's rule keeps, and compute_pass_at_k_by_evals. Its rules are the installed
version's: 0.25 counts every trial (no reward as 0), 0.26 only those with reward_valid.

Prints one JSON object: {"version", "evals": {key: {"n_trials", "n_errors", "metrics",
"pass_at_k"}}, "reward_valid": {trial_name: bool} (0.26 only), "job": {"n_total_trials",
"evals": {key: {"n_trials", "metrics", "pass_at_k"}}} (the job result.json as Harbor read it)}.
"""
import json
import sys
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

from harbor.job_plan import JobPlan
from harbor.metrics.mean import Mean
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult


def main(job_dir: Path) -> None:
    results = []
    for path in sorted(job_dir.glob("*/result.json")):
        results.append(TrialResult.model_validate_json(path.read_text()))
    if not results:
        sys.exit(f"no trial result under {job_dir}")
    job = JobResult.model_validate_json((job_dir / "result.json").read_text())

    # The plan's aggregation reads only its metrics and evals_key_for_result: a plan holding
    # Harbor's default metric (Mean) for every dataset the trials name.
    plan = object.__new__(JobPlan)
    datasets = {JobPlan.evals_key_for_result(r)[0].split("__")[-1] for r in results}
    plan.metrics = defaultdict(list, {name: [Mean()] for name in datasets})
    plan.trial_configs = []
    stats = plan.aggregate_stats(results, n_total_trials=len(results))

    def group(stats_of_group):
        return {
            "n_trials": stats_of_group.n_trials,
            "n_errors": stats_of_group.n_errors,
            "metrics": stats_of_group.metrics,
            "pass_at_k": {str(k): v for k, v in stats_of_group.pass_at_k.items()},
        }

    report = {
        "version": version("harbor"),
        "evals": {key: group(value) for key, value in stats.evals.items()},
        "job": {
            "n_total_trials": job.n_total_trials,
            "evals": {key: group(value) for key, value in job.stats.evals.items()},
        },
    }
    if "reward_valid" in TrialResult.model_computed_fields:
        report["reward_valid"] = {r.trial_name: r.reward_valid for r in results}
    print(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
