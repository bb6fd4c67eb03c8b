// The viewer on finished jobs, in a real browser: the list, a job's table and grid, a trial's
// steps and recording (a step click seeks it), a summarization's subagent trajectories, search,
// the comparison's interval, a Harbor-written job, path traversal refused, no secret served.
// Run by tests/integration/view.rs with VIEW_URL, VIEW_EXPECT (JSON) and VIEW_SHOTS set.
import { URL_BASE, assert, check, finish, launch, refusalsExpected, shot, until } from "./lib.mjs";

const expect = JSON.parse(process.env.VIEW_EXPECT);
const { page, browser, pageErrors } = await launch();
const A = expect.job_a;
const B = expect.job_b;
const fmtReward = (r) => (r === null ? "—" : Number.isInteger(r) ? String(r) : r.toFixed(2));

await check("the jobs list shows every job with its state and mean reward", async () => {
  await page.goto(URL_BASE + "/");
  await page.waitForSelector('[data-testid="job-row"]');
  const rows = await page.$$eval('[data-testid="job-row"]', (rs) => rs.map((r) => r.dataset.job));
  for (const job of [A, B, expect.harbor_job]) assert(rows.includes(job), `job ${job} missing from ${rows}`);
  // The mean of job A's trials and its interval, as the test computed them from the trials' files.
  const mean = (await page.textContent(`[data-job="${A}"] [data-testid="mean-reward"]`)).trim();
  assert(mean === expect.mean_a, `mean reward of ${A} with its interval: got ${mean}, expected ${expect.mean_a}`);
  await shot(page, "jobs.png");
  // A facet narrows the list, and the address keeps it.
  await page.selectOption('[data-testid="facet-model"]', "oracle");
  const filtered = await page.$$eval('[data-testid="job-row"]', (rs) => rs.map((r) => r.dataset.job));
  assert(filtered.includes(B) && !filtered.includes(A), `model facet: ${filtered}`);
  assert(page.url().includes("model=oracle"), `facet in the address: ${page.url()}`);
});

await check("a job's table shows every trial with its reward; its grid and errors render", async () => {
  await page.goto(`${URL_BASE}/jobs/${A}`);
  await page.waitForSelector('[data-testid="trial-row"]');
  for (const trial of expect.trials[A]) {
    const row = page.locator(`[data-testid="trial-row"][data-trial="${trial.name}"]`);
    assert((await row.count()) === 1, `row of ${trial.name}`);
    const reward = (await row.locator('[data-testid="reward"]').textContent()).trim();
    assert(reward === fmtReward(trial.reward), `${trial.name}: reward ${reward}, expected ${fmtReward(trial.reward)}`);
    assert((await row.getAttribute("data-state")) === trial.state, `${trial.name}: state ${await row.getAttribute("data-state")}`);
  }
  const cells = await page.locator('[data-testid="grid-cell"]').count();
  assert(cells === expect.trials[A].length, `grid cells ${cells}`);
  const groups = await page.textContent('[data-testid="error-groups"]');
  assert(groups.includes("EnvironmentBuildError") && groups.includes("infrastructure"), `error groups: ${groups}`);
  await shot(page, "job.png");
});

await check("a filtered, sorted job address renders when opened directly", async () => {
  await page.goto(`${URL_BASE}/jobs/${A}?state=errored&sort=reward&dir=desc`);
  await page.waitForSelector('[data-testid="trials-table"]');
  const states = await page.$$eval('[data-testid="trial-row"]', (rs) => rs.map((r) => r.dataset.state));
  assert(states.length === expect.errored && states.every((s) => s === "errored"), `errored filter: ${states}`);
  assert((await page.inputValue('[data-testid="filter-state"]')) === "errored", "the filter shows its value");
});

await check("a Harbor-written job renders with its trials", async () => {
  await page.goto(`${URL_BASE}/jobs/${expect.harbor_job}`);
  await page.waitForSelector('[data-testid="trial-row"]');
  const n = await page.locator('[data-testid="trial-row"]').count();
  assert(n === expect.harbor_trials, `harbor trials ${n}`);
  const rewards = await page.$$eval('[data-testid="reward"]', (cs) => cs.map((c) => c.textContent.trim()));
  assert(rewards.includes("1"), `harbor rewards: ${rewards}`);
});

const trialUrl = `${URL_BASE}/jobs/${A}/trials/${expect.summarized}`;
await check("a trial page shows its steps and plays its recording", async () => {
  await page.goto(trialUrl);
  await page.waitForSelector('[data-testid="step"]');
  const steps = await page.locator('[data-testid="step"]').count();
  assert(steps >= 10, `steps: ${steps}`);
  const subagents = await page.locator('[data-testid="trajectories"] [data-kind="subagent"]').count();
  assert(subagents >= 3, `summarization subagent trajectories listed: ${subagents}`);
  assert((await page.locator('[data-testid="subagent-link"]').count()) >= 3, "the summarization step links its subagents");
  await until(page, () => window.__terminusView?.player && window.__terminusView.markers?.length > 0);
  const markers = await page.evaluate(() => window.__terminusView.markers.length);
  const episodes = await page.locator('[data-testid="seek"]').count();
  assert(markers >= 10 && episodes >= 10, `markers ${markers}, episode steps ${episodes}`);
  const processes = await page.textContent('[data-testid="processes"]');
  assert(/running when the tests started \(agent_processes: keep\): \d+ — .*tmux: server/.test(processes), `processes at the tests: ${processes}`);
  await page.waitForSelector('[data-testid="player"] .ap-player');
  await page.evaluate(() => window.__terminusView.player.play());
  await until(page, () => window.__terminusView.player.getCurrentTime() > 0.3);
  await page.evaluate(() => window.__terminusView.player.pause());
  await shot(page, "trial.png");
});

await check("clicking a step seeks the recording to its episode, and the step is highlighted", async () => {
  const markers = await page.evaluate(() => window.__terminusView.markers);
  const k = markers.length - 2;
  await page.locator(`[data-testid="step"][data-episode="${k}"] [data-testid="seek"]`).click();
  const at = await until(page, (t) => {
    const now = window.__terminusView.player.getCurrentTime();
    return Math.abs(now - t) < 0.25 ? now : false;
  }, markers[k][0]);
  assert(Math.abs(at - markers[k][0]) < 0.25, `player at ${at}, marker ${markers[k][0]}`);
  await until(page, (k) => document.querySelector(`[data-testid="step"][data-episode="${k}"]`).classList.contains("playing"), k);
  // And the other way: the recording's position highlights its step.
  await page.evaluate((t) => window.__terminusView.player.seek(t + 0.01), markers[2][0]);
  await until(page, () => document.querySelector('[data-testid="step"][data-episode="2"]').classList.contains("playing"));
});

await check("search within the trajectory and across the job's trials finds steps", async () => {
  await page.fill('[data-testid="trial-search"]', "golden line");
  await page.waitForSelector('[data-testid="search-hit"]');
  const hits = await page.locator('[data-testid="search-hit"]').count();
  assert(hits > 0, "hits in this trajectory");
  await page.locator('[data-testid="search-hit"] a').first().click();
  await page.waitForSelector('[data-testid="step"].found');
  await page.goto(`${URL_BASE}/jobs/${A}`);
  await page.fill('[data-testid="job-search-steps"]', "wrong");
  await page.waitForSelector('[data-testid="search-hit"]');
  const text = await page.textContent('[data-testid="search-results"]');
  assert(text.includes(expect.failing_task), `hits across trials name the trial: ${text.slice(0, 200)}`);
});

await check("a summarization subagent's trajectory opens from the step that made it", async () => {
  await page.goto(trialUrl);
  await page.locator('[data-testid="subagent-link"]').first().click();
  await page.waitForSelector('[data-testid="trajectory-info"]');
  await until(page, () => location.search.includes("summarization"));
  const steps = await page.locator('[data-testid="step"]').count();
  assert(steps >= 1, `subagent steps ${steps}`);
});

await check("the comparison shows the paired interval, the flips and the chart", async () => {
  await page.goto(`${URL_BASE}/compare/${A}/${B}`);
  await page.waitForSelector('[data-testid="difference"]');
  const text = await page.textContent('[data-testid="difference"]');
  assert(/[+−]\d\.\d{3} \[[+−]\d\.\d{3}, [+−]\d\.\d{3}\]/.test(text), `difference with interval: ${text}`);
  const flips = await page.locator('[data-flip="fail_to_pass"]').count();
  assert(flips >= 1, `fail→pass flips ${flips}`);
  assert((await page.locator('[data-testid="reward-cost-chart"] circle').count()) >= 2, "chart points");
  await shot(page, "compare.png");
});

await check("path traversal is refused on every route", async () => {
  const t = expect.summarized;
  const evil = [
    `/api/jobs/..%2F..%2F..%2Fetc/trials/passwd`,
    `/api/jobs/${A}/trials/..%2F..%2F..%2Fetc`,
    `/api/jobs/${A}/trials/${t}/file?path=../../../../../etc/passwd`,
    `/api/jobs/${A}/trials/${t}/file?path=%2Fetc%2Fpasswd`,
    `/api/jobs/${A}/trials/${t}/file?path=agent/..%2F..%2F..%2F..%2Fetc%2Fpasswd`,
    `/api/jobs/${A}/trials/${t}/file?path=agent/escape`,
    `/api/jobs/${A}/trials/${t}/trajectory?path=../../${B}/config.json`,
    `/api/jobs/${A}/trials/${t}?root=../../..`,
    `/api/jobs/${A}/search?q=root&trial=../..`,
    `/api/compare/..%2F..%2Fetc/${A}`,
    `/assets/..%2F..%2F..%2FCargo.toml`,
  ];
  const results = await refusalsExpected(() => page.evaluate(async (urls) => {
    const out = [];
    for (const url of urls) {
      const r = await fetch(url);
      out.push([url, r.status, await r.text()]);
    }
    return out;
  }, evil));
  for (const [url, status, body] of results) {
    assert(status === 403 || status === 404, `${url}: status ${status}`);
    assert(!body.includes("root:x:0:0") && !body.includes("[workspace]"), `${url}: leaked ${body.slice(0, 80)}`);
  }
  assert(results.some(([, status]) => status === 403), "refusals say 403");
});

await check("no page or file the viewer serves holds the API key", async () => {
  const leaks = await page.evaluate(async ({ A, secret }) => {
    const found = [];
    const get = async (url) => {
      const text = await (await fetch(url)).text();
      if (text.includes(secret)) found.push(url);
      return text;
    };
    await get("/api/jobs");
    const job = JSON.parse(await get(`/api/jobs/${A}`));
    for (const trial of job.trials) {
      const detail = JSON.parse(await get(`/api/jobs/${A}/trials/${trial.name}`));
      for (const file of detail.files) await get(`/api/jobs/${A}/trials/${trial.name}/file?path=${encodeURIComponent(file.path)}&limit=67108864`);
    }
    return found;
  }, { A, secret: expect.secret });
  assert(leaks.length === 0, `the key was served by ${leaks.join(", ")}`);
});

await browser.close();
finish(pageErrors);
