// A trial whose trajectory is a gigabyte opens at once: its result, its error and its first
// steps show, and further steps are a click away. Run by tests/integration/view.rs with
// VIEW_URL, VIEW_JOB, VIEW_TRIAL, VIEW_STEPS and VIEW_SHOTS set.
import { URL_BASE, assert, check, finish, launch, shot } from "./lib.mjs";

const { page, pageErrors } = await launch();
const JOB = process.env.VIEW_JOB;
const TRIAL = process.env.VIEW_TRIAL;
const STEPS = Number(process.env.VIEW_STEPS);

await check("the trial's result, error and first steps show in under 2 s", async () => {
  const started = Date.now();
  await page.goto(`${URL_BASE}/jobs/${JOB}/trials/${TRIAL}`);
  await page.waitForSelector('[data-testid="trial-result"]', { timeout: 10000 });
  await page.waitForSelector('[data-testid="steps"] [id="step-0"]', { timeout: 10000 });
  const took = Date.now() - started;
  const info = await page.textContent('[data-testid="trajectory-info"]');
  assert(info.includes(`${STEPS} steps`), `the count of steps: ${info}`);
  const error = await page.textContent('[data-testid="trial-error"]');
  assert(error.includes("TrialDiskLimitExceededError"), `the error shows: ${error}`);
  console.log(`opened in ${took} ms`);
  assert(took < 2000, `the page took ${took} ms`);
  await shot(page, "big-trajectory.png");
});

await check("more steps come on request", async () => {
  const before = await page.$$eval('[data-testid="steps"] [id^="step-"]', (s) => s.length);
  assert(before < STEPS, `only a page is drawn at first (${before})`);
  await page.click('[data-testid="more-steps"]');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="steps"] [id^="step-"]').length > n, before, { timeout: 15000 });
});

finish(pageErrors);
