// `terminus run --view` in a real browser while the job runs: the job page's trial rows change
// phase and episode without a reload (server-sent events), and a running trial's page shows its
// terminal live. Run by tests/integration/view.rs with VIEW_URL, VIEW_JOB and VIEW_SHOTS set.
import { URL_BASE, assert, check, finish, launch, shot, until } from "./lib.mjs";

const JOB = process.env.VIEW_JOB;
const { page, browser, pageErrors } = await launch();

let runningTrial = null;
await check("the job's rows change phase and episode live, without a reload", async () => {
  await page.goto(`${URL_BASE}/jobs/${JOB}`);
  await page.waitForSelector('[data-testid="trials-table"]');
  await until(page, () => document.querySelector('[data-testid="live-note"]')?.textContent.includes("live"));
  // A mark that a reload would wipe.
  await page.evaluate(() => (window.__noReload = true));
  const seen = new Map();
  const deadline = Date.now() + 60000;
  let changed = null;
  let mismatch = null;
  while (Date.now() < deadline && !changed) {
    // The title's badge and the state card tell one state: "live" while the card says running.
    const [note, card] = await page.evaluate(() => [
      document.querySelector('[data-testid="live-note"]')?.textContent || "",
      document.querySelector('[data-testid="job-state"] .value')?.textContent || "",
    ]);
    if (note !== "" && note.includes("live") !== (card === "running")) mismatch ??= { note, card };
    const rows = await page.$$eval('[data-testid="trial-row"]', (rs) =>
      rs.map((r) => [r.dataset.trial, `${r.querySelector('[data-testid="phase"]').dataset.phase}|${r.querySelector('[data-testid="episodes"]').textContent}`]),
    );
    for (const [trial, value] of rows) {
      if (!seen.has(trial)) seen.set(trial, new Set());
      seen.get(trial).add(value);
      if (value.startsWith("running agent")) runningTrial = trial;
      const agentValues = [...seen.get(trial)].filter((v) => v.startsWith("running agent"));
      if (agentValues.length >= 2) changed = [trial, agentValues];
    }
    await page.waitForTimeout(150);
  }
  assert(!mismatch, `the title and the state card disagree: ${JSON.stringify(mismatch)}`);
  assert(changed, `no trial was seen in two agent episodes: ${JSON.stringify([...seen].map(([k, v]) => [k, [...v]]))}`);
  assert(await page.evaluate(() => window.__noReload === true), "the page was reloaded");
  await shot(page, "live-job.png");
});

await check("a running trial's terminal is shown live from its pane log", async () => {
  assert(runningTrial, "a running trial was seen");
  await page.locator(`[data-testid="trial-row"][data-trial="${runningTrial}"] a`).first().click();
  await page.waitForSelector('[data-testid="live-terminal"] .ap-player', { timeout: 10000 });
  const text = await until(
    page,
    () => {
      const t = document.querySelector('[data-testid="live-terminal"]')?.innerText || "";
      // `LIVE-VIEW-42-TICK` is what the typed `echo LIVE-VIEW-$((6*7))-TICK` prints, not what it types.
      return t.includes("LIVE-VIEW-42-TICK") ? t : false;
    },
    null,
    30000,
  );
  assert(text.includes("LIVE-VIEW-42-TICK"), "the pane's output (not only the typed command) reached the page");
  await shot(page, "live-trial.png");
});

await check("a separate `terminus view` follows the same job from its files until it ends", async () => {
  const other = process.env.VIEW_URL_FILES;
  assert(other, "VIEW_URL_FILES is set");
  const second = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  second.on("pageerror", (e) => pageErrors.push(e.message));
  await second.goto(`${other}/jobs/${JOB}`);
  await second.waitForSelector('[data-testid="trials-table"]');
  const note = await second.textContent('[data-testid="live-note"]');
  assert(note.includes("live (files)"), `watched from files: ${note}`);
  await second.evaluate(() => (window.__noReload = true));
  // Every row ends finished, pushed by the server when the files change.
  await until(
    second,
    () => {
      const rows = [...document.querySelectorAll('[data-testid="trial-row"]')];
      return rows.length === 2 && rows.every((r) => r.dataset.state === "finished");
    },
    null,
    90000,
  );
  // The job's own result is written after its last trial's: its state follows, pushed too.
  await until(
    second,
    () => document.querySelector('[data-testid="job-state"]')?.textContent.includes("finished"),
    null,
    30000,
  );
  assert(await second.evaluate(() => window.__noReload === true), "the page was reloaded");
});

await browser.close();
finish(pageErrors);
