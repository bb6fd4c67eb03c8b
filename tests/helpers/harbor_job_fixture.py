"""Writes a job directory the way Harbor 0.26 writes one, built from Harbor's own models.

Usage: python harbor_job_fixture.py OUT_DIR   (with a harbor_models.sh 0.26.0 interpreter)

The job `harbor-written` (2 attempts x 2 tasks x 2 agents, of which 7 finished and 1 still
running) is dumped with `model_dump_json(indent=4)` as Harbor's Job and Trial do: config.json
(JobConfig), result.json (JobResult without trial_results, stats from
JobStats.from_trial_results), and per trial config.json (TrialConfig) and result.json
(TrialResult). Ids, names and times are fixed so that the output is reproducible; it is
committed as tests/fixtures/harbor-0.26-job/ and read by `terminus jobs summarize` in the
integration tests. The variety covers what terminus never writes itself: an agent given by
import_path (no name), a package task (no path), null multipliers, an error with a reward, a
cancelled trial and a trial without result.json.
"""
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harbor.models.agent.context import AgentContext
from harbor.models.job.config import DatasetConfig, JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.id import LocalTaskId, PackageTaskId
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import AgentInfo, ExceptionInfo, ModelInfo, TimingInfo, TrialResult
from harbor.models.verifier.result import VerifierResult

out = Path(sys.argv[1])
jobs_dir = Path("/harbor/jobs")
job_dir = out / "harbor-written"
job_dir.mkdir(parents=True, exist_ok=True)
job_id = uuid.UUID("6f1c1e2a-0000-4000-8000-000000000001")
t0 = datetime(2026, 5, 4, 12, 0, 0, tzinfo=UTC)

agents = [
    AgentConfig(name="terminus-2", model_name="anthropic/claude-sonnet-4-5", kwargs={"max_turns": 50}),
    AgentConfig(import_path="my_agents.custom:Custom", model_name="openai/gpt-5"),
]
tasks = [
    TaskConfig(path=Path("/harbor/datasets/tasks/hello-world"), source="tasks"),
    TaskConfig(name="harbor/fix-bug", ref="sha256:abc123", source="harbor/pkg-set"),
]
config = JobConfig(
    job_name="harbor-written",
    jobs_dir=jobs_dir,
    n_attempts=2,
    n_concurrent_trials=2,
    agents=agents,
    datasets=[DatasetConfig(path=Path("/harbor/datasets/tasks"))],
)
(job_dir / "config.json").write_text(config.model_dump_json(indent=4))

# (reward, exception type) of each trial in Harbor's order: attempts, tasks, agents.
outcomes = [
    (1.0, None),
    (0.0, None),
    (None, "RewardFileNotFoundError"),
    (1.0, "AgentTimeoutError"),
    (1.0, None),
    (None, "CancelledError"),
    (0.0, None),
    "running",
]
results = []
n = 0
for attempt in range(2):
    for task in tasks:
        for agent_idx, agent in enumerate(agents):
            outcome = outcomes[n]
            n += 1
            short = task.get_task_id().get_name().split("/")[-1]
            trial_name = f"{short}__h{n:06d}"
            trial_config = TrialConfig(
                task=task,
                trial_name=trial_name,
                trials_dir=jobs_dir / "harbor-written",
                agent=agent,
                job_id=job_id,
            )
            trial_dir = job_dir / trial_name
            for sub in ("agent", "verifier", "artifacts"):
                (trial_dir / sub).mkdir(parents=True, exist_ok=True)
            (trial_dir / "config.json").write_text(trial_config.model_dump_json(indent=4))
            if outcome == "running":
                continue
            reward, error = outcome
            started = t0 + timedelta(minutes=n)
            model = agent.model_name.split("/", 1)
            result = TrialResult(
                id=uuid.UUID(f"6f1c1e2a-0000-4000-8000-{n:012d}"),
                task_name=task.get_task_id().get_name(),
                trial_name=trial_name,
                trial_uri=f"file://{jobs_dir}/harbor-written/{trial_name}",
                task_id=task.get_task_id(),
                source=task.source,
                task_checksum=f"{n:064x}",
                config=trial_config,
                agent_info=AgentInfo(
                    name=agent.name or "Custom",
                    version="2.0.0",
                    model_info=ModelInfo(name=model[1], provider=model[0]),
                ),
                agent_result=AgentContext(n_input_tokens=1000 * n, n_cache_tokens=100 * n, n_output_tokens=10 * n,
                                          cost_usd=0.01 * n),
                verifier_result=None if reward is None else VerifierResult(rewards={"reward": reward}),
                exception_info=None if error is None else ExceptionInfo(
                    exception_type=error,
                    exception_message=f"{error} in trial {n}",
                    exception_traceback=f"Traceback (most recent call last):\n{error}",
                    occurred_at=started + timedelta(seconds=30),
                ),
                started_at=started,
                finished_at=started + timedelta(seconds=50),
                environment_setup=TimingInfo(started_at=started, finished_at=started + timedelta(seconds=5)),
                agent_setup=TimingInfo(started_at=started + timedelta(seconds=5),
                                       finished_at=started + timedelta(seconds=6)),
                agent_execution=TimingInfo(started_at=started + timedelta(seconds=6),
                                           finished_at=started + timedelta(seconds=40)),
                verifier=TimingInfo(started_at=started + timedelta(seconds=40),
                                    finished_at=started + timedelta(seconds=50)),
            )
            (trial_dir / "result.json").write_text(result.model_dump_json(indent=4))
            results.append(result)

stats = JobStats.from_trial_results(results, n_total_trials=len(outcomes), n_running_trials=1, n_retries=1)
# Harbor fills each group's metrics from its metric classes (mean by default): errors count 0.
for key, group in stats.evals.items():
    rewards = [
        (r.verifier_result.rewards or {}).get("reward", 0) if r.verifier_result and r.reward_valid else 0
        for r in results
        if JobStats.format_agent_evals_key(r.agent_info.name, r.agent_info.model_info.name, r.source or "adhoc") == key
    ]
    group.metrics = [{"mean": sum(rewards) / len(rewards)}]
job_result = JobResult(
    id=job_id,
    started_at=t0,
    updated_at=t0 + timedelta(minutes=20),
    finished_at=None,
    n_total_trials=len(outcomes),
    stats=stats,
    trial_results=results,
)
(job_dir / "result.json").write_text(job_result.model_dump_json(indent=4, exclude={"trial_results"}))
(job_dir / "job.log").write_text("harbor-written: a fixture; Harbor's log would be here\n")
print(f"wrote {job_dir} ({len(results)} results)")
