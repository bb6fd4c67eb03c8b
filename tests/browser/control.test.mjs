// `terminus run --view` controls its job from the job page: pause, cancel a running trial,
// retry it, resume; the job then ends with every trial solved. Run by
// tests/integration/view.rs with VIEW_URL, VIEW_JOB and VIEW_SHOTS set.
import { URL_BASE, assert, check, finish, launch, refusalsExpected, shot, until } from "./lib.mjs";

const JOB = process.env.VIEW_JOB;
const { page, browser, pageErrors } = await launch();

let cancelled = null;
await check("without the printed address's token, a control is refused", async () => {
  await page.goto(`${URL_BASE}/jobs/${JOB}`);
  await page.waitForSelector('[data-testid="trials-table"]');
  assert(!(await page.$('[data-testid="job-controls"]')), "no buttons for a browser without the token");
  await refusalsExpected(async () => {
    const answer = await page.evaluate(async (job) => {
      const r = await fetch(`/api/jobs/${encodeURIComponent(job)}/control`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: '"pause"',
      });
      return [r.status, await r.json()];
    }, JOB);
    assert(answer[0] === 403 && answer[1].kind === "control_token", `refused: ${JSON.stringify(answer)}`);
  });
});

await check("the job is paused from its page", async () => {
  // The printed address sets the token's cookie; the page then controls the job.
  await page.goto(process.env.VIEW_PAGE);
  await page.waitForSelector('[data-testid="job-controls"]');
  await until(page, () => document.querySelector('[data-testid="job-pause"]')?.textContent === "pause");
  await page.click('[data-testid="job-pause"]');
  await until(page, () => document.querySelector('[data-testid="control-note"]')?.textContent.includes("paused"));
  await until(page, () => document.querySelector('[data-testid="job-pause"]')?.textContent === "resume");
});

await check("a running trial is cancelled from its row", async () => {
  const row = await page.waitForSelector('[data-testid="trial-row"] [data-testid="trial-cancel"]', { timeout: 60000 });
  cancelled = await row.evaluate((b) => b.closest("tr").dataset.trial);
  await row.click();
  await until(page, (name) => document.querySelector('[data-testid="control-note"]')?.textContent.includes(`${name}: cancelled`), cancelled);
  // Its result lands, and the row says so, with a retry button in place of the cancel one.
  await until(
    page,
    (name) => {
      const r = document.querySelector(`[data-testid="trial-row"][data-trial="${name}"]`);
      return r && r.dataset.state === "cancelled" && r.querySelector('[data-testid="trial-retry"]');
    },
    cancelled,
    60000,
  );
  await shot(page, "control-cancelled.png");
});

await check("a refused control is shown, not thrown", async () => {
  // Cancelling a trial that already ended is refused by the job (409), said on the page.
  await refusalsExpected(async () => {
    const answer = await page.evaluate(async ([job, name]) => {
      const r = await fetch(`/api/jobs/${encodeURIComponent(job)}/control`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ cancel_trial: name }),
      });
      return [r.status, await r.json()];
    }, [JOB, cancelled]);
    assert(answer[0] === 409 && answer[1].kind === "control_refused", `refused by kind: ${JSON.stringify(answer)}`);
    // A form post (what a page of another site could send without asking) is refused.
    const form = await page.evaluate(async (job) => {
      const r = await fetch(`/api/jobs/${encodeURIComponent(job)}/control`, { method: "POST", body: '"resume"' });
      return r.status;
    }, JOB);
    assert(form === 400, `a non-JSON post is refused: ${form}`);
  });
});

await check("the cancelled trial is retried and the job resumed from the page", async () => {
  await page.click(`[data-testid="trial-row"][data-trial="${cancelled}"] [data-testid="trial-retry"]`);
  await until(page, (name) => document.querySelector('[data-testid="control-note"]')?.textContent.includes(`${name}: will run again`), cancelled);
  await page.click('[data-testid="job-pause"]');
  await until(page, () => document.querySelector('[data-testid="control-note"]')?.textContent.includes("resumed"));
  // Its cancelled attempt moved aside, the row shows the trial's new run (the viewer stops with
  // the job, so the end is checked in its files).
  await until(
    page,
    (name) => {
      const r = document.querySelector(`[data-testid="trial-row"][data-trial="${name}"]`);
      return r && r.dataset.state !== "cancelled" && !r.querySelector('[data-testid="trial-retry"]');
    },
    cancelled,
    30000,
  );
  await shot(page, "control-retried.png");
});

await browser.close();
finish(pageErrors);
