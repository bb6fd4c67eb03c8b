"""Drives `terminus serve` with Harbor 0.26's own Python client; every answer is parsed by
Harbor's models (the client validates each response). Fails (non-zero exit, a traceback) on
the first answer that is not what Harbor's server would give.

usage: harbor_serve_client.py URL TASK_DIR MODEL_API_BASE OUT_DIR

Two jobs: A (the oracle, two attempts) and B (Terminus 2 on the scripted model at
MODEL_API_BASE, three attempts, one at a time). B is paused, one of its waiting rollouts
cancelled, then resumed; once A has ended one of its rollouts is retried. Then a SQL count of
rollouts by state, a trajectory downloaded, and a JSON summary on the last line of stdout.
"""

import json
import sys
import time

from harbor import Harbor
from harbor.client import APIError
from harbor.models.job.config import JobConfig
from harbor.server.models import JobDetail, QueryResponse

url, task, api_base, out_dir = sys.argv[1:5]
client = Harbor(url)


def config(name, agent, attempts, concurrent):
    return JobConfig.model_validate(
        {
            "job_name": name,
            "tasks": [{"path": task}],
            "agents": [agent],
            "n_attempts": attempts,
            "n_concurrent_trials": concurrent,
        }
    )


def wait(what, check, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


oracle = config("serve-oracle", {"name": "oracle"}, 2, 2)
model = config(
    "serve-model",
    {
        "name": "terminus-2",
        "model_name": "openai/gpt-4o",
        "kwargs": {"api_base": api_base, "record_terminal_session": False},
    },
    3,
    1,
)

# Submissions; a repeated idempotency key answers 409 with the first job's id.
a = client.jobs.submit(oracle, idempotency_key="serve-test-a").job_id
try:
    client.jobs.submit(oracle, idempotency_key="serve-test-a")
    raise AssertionError("a reused Idempotency-Key was accepted")
except APIError as e:
    assert e.status_code == 409 and e.code == "Conflict", e
    assert e.details.get("job_id") == str(a), e.details
dry = client.jobs.submit(model, dry_run=True)
assert dry.n_trials == 3, dry
b = client.jobs.submit(model).job_id

# Pause B while its first trial runs: the other two wait as `paused`.
paused = client.jobs.pause(b)
assert isinstance(paused, JobDetail)
wait("B's waiting rollouts to be paused", lambda: client.jobs.get(b).rollouts.n_paused >= 1)
listed = client.jobs.list()
assert {str(j.id) for j in listed.items} >= {str(a), str(b)}, listed
b_rollouts = client.rollouts.list(job_ids=[b])
assert b_rollouts.total == 3, b_rollouts
waiting = [r for r in b_rollouts.items if r.state == "paused"]
assert waiting, [r.state for r in b_rollouts.items]
cancelled = client.rollouts.cancel(waiting[0].id)
assert cancelled.state == "cancelled", cancelled.state
# A running rollout cannot be paused alone.
running = [r for r in client.rollouts.list(job_ids=[b]).items if r.state == "running"]
if running:
    try:
        client.rollouts.pause(running[0].id)
        raise AssertionError("a running rollout was paused")
    except APIError as e:
        assert e.status_code == 409, e
resumed = client.jobs.resume(b)
assert resumed.state in ("running", "queued", "finished"), resumed.state

# A ends; one of its rollouts is retried (the job is reopened for it).
wait("job A to finish", lambda: client.jobs.get(a).state == "finished")
first = client.rollouts.list(job_ids=[a]).items[0]
retry = client.rollouts.retry(first.id, idempotency_key="serve-test-retry")
again = client.rollouts.get(retry.rollout_id)
assert again.retry_ids[0] == retry.rollout_id and first.id in again.retry_ids, again.retry_ids
assert again.name == first.name, (again.name, first.name)

done = lambda job: client.jobs.get(job).state in ("finished", "cancelled")
wait("both jobs to end", lambda: done(a) and done(b), timeout=600)
job_a, job_b = client.jobs.get(a), client.jobs.get(b)
assert job_a.rollouts.n_total == 3 and job_a.rollouts.n_finished == 3, job_a.rollouts
assert job_a.n_retries == 1, job_a.n_retries
assert job_b.rollouts.n_cancelled == 1 and job_b.rollouts.n_finished == 2, job_b.rollouts

# SQL: rollouts by state, as Harbor's views name them.
answer = client.query_sql(
    [["SELECT state, count(*) AS n FROM rollout WHERE job_id IN (?, ?) GROUP BY state ORDER BY state", str(a), str(b)]]
)
assert isinstance(answer, QueryResponse)
counts = {row["state"]: row["n"] for row in answer.results[0].rows}
assert counts == {"cancelled": 1, "finished": 5}, counts
refused = client.query_sql(["DELETE FROM job", "SELECT * FROM internal_job"])
assert all(r.error_v2 is not None for r in refused.results), refused

# A trajectory, downloaded by the URI the rollout lists.
finished_b = [r for r in client.rollouts.list(job_ids=[b]).items if r.state == "finished"]
detail = client.rollouts.get(finished_b[0].id)
uri = detail.artifacts["agent/trajectory.json"]
target = f"{out_dir}/trajectory.json"
client.download(uri, target)
trajectory = json.load(open(target))
assert trajectory.get("steps"), trajectory.keys()
try:
    client.download("file:///etc/passwd", f"{out_dir}/passwd")
    raise AssertionError("an unregistered URI was served")
except APIError as e:
    assert e.status_code == 404, e

print(
    json.dumps(
        {
            "jobs": [str(a), str(b)],
            "states": counts,
            "steps": len(trajectory["steps"]),
            "rewards_a": job_a.rewards["reward"].mean,
        }
    )
)
