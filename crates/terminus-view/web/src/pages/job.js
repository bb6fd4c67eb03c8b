// A job's page: its figures, the trial table (sortable, filterable, the filters in the address),
// the task × attempt reward grid, per-task pass@k, errors grouped by kind, and the job's
// configuration. While the job runs, each trial's phase, episode, tokens, retries and stalls
// arrive over server-sent events and change the rows in place.

import { api } from "../api.js";
import { badge, debounce, fmt, h, query, replace, setQuery } from "../dom.js";
import { onLeave } from "../nav.js";

const COLUMNS = [
  ["name", "trial"],
  ["task", "task"],
  ["agent", "agent"],
  ["model", "model"],
  ["attempt", "attempt"],
  ["state", "state / phase"],
  ["reward", "reward"],
  ["episodes", "episodes"],
  ["tokens", "tokens in/out"],
  ["cost_usd", "cost"],
  ["duration_sec", "duration"],
  ["error", "error"],
];

const sortValue = {
  tokens: (t) => (t.input_tokens || 0) + (t.output_tokens || 0),
  error: (t) => (t.error ? t.error.kind : ""),
  state: (t) => t.state,
};

function compareBy(key, dir) {
  const get = sortValue[key] || ((t) => t[key]);
  return (a, b) => {
    const x = get(a);
    const y = get(b);
    const missing = (v) => v === null || v === undefined;
    if (missing(x) && missing(y)) return 0;
    if (missing(x)) return 1;
    if (missing(y)) return -1;
    const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return dir === "desc" ? -order : order;
  };
}

function errorCell(error) {
  if (!error) return "";
  return h(
    "span",
    { title: error.message },
    h("span", { class: `badge err-${error.class}`, "data-testid": "error-class" }, error.class),
    " ",
    error.kind,
  );
}

function phaseCell(trial, live) {
  if (live && !live.finished) {
    const parts = [live.phase];
    if (live.episode !== null && live.episode !== undefined) parts.push(`episode ${live.episode}`);
    return h(
      "span",
      { "data-testid": "phase", "data-phase": live.phase },
      badge("running", parts.join(" · ")),
      live.stalled ? h("span", { class: "badge st-stalled", "data-testid": "stalled" }, "stalled") : null,
      live.queued ? h("div", { class: "muted small", "data-testid": "queued" }, `queued on the cluster: ${live.queued}`) : null,
      live.model_retries ? h("span", { class: "muted small", title: live.last_retry || "" }, ` ${live.model_retries} model retries`) : null,
      live.will_retry ? h("div", { class: "muted small" }, live.will_retry) : null,
    );
  }
  return h("span", { "data-testid": "phase", "data-phase": trial.state }, badge(trial.state));
}

/** Spend against the job's budget: dollars and tokens, whichever it limits. */
export function budgetText(budget) {
  const parts = [];
  if (budget.max_cost_usd != null) parts.push(`${fmt.cost(budget.spent_cost_usd)} of ${fmt.cost(budget.max_cost_usd)}`);
  if (budget.max_tokens != null) parts.push(`${fmt.tokens(budget.spent_tokens)} of ${fmt.tokens(budget.max_tokens)} tokens`);
  if (budget.reached) parts.push(budget.n_not_run ? `reached, ${budget.n_not_run} not run` : "reached");
  return parts.join(" · ") || "—";
}

function summaryCards(job, state) {
  const card = (label, value, testid) => h("div", { class: "card", "data-testid": testid }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
  return h(
    "div",
    { class: "cards" },
    card("state", badge(state || job.state), "job-state"),
    card("trials done", `${job.n_completed} / ${job.n_total}`, "trials-done"),
    card("errors", String(job.n_errors), "errors"),
    card(
      `mean reward [95% CI], ${job.score_convention}`,
      [fmt.interval(job.mean_reward), job.beside ? h("div", { class: "muted small", "data-testid": "job-mean-beside" }, job.beside) : null],
      "job-mean",
    ),
    card(
      "pass@k",
      job.evals.length
        ? job.evals.map((e) =>
            h(
              "div",
              {},
              Object.entries(e.pass_at_k).map(([k, v]) => `@${k} ${fmt.prob(v)}`).join(" · ") || "—",
              e.beside ? h("div", { class: "muted small" }, e.beside) : null,
            ),
          )
        : "—",
      "job-pass-at-k",
    ),
    card("tokens in / out", `${fmt.tokens(job.input_tokens)} / ${fmt.tokens(job.output_tokens)}`, "tokens"),
    card("cost", fmt.cost(job.cost_usd), "cost"),
    job.budget ? card("budget", budgetText(job.budget), "budget") : null,
    card("duration", fmt.duration(job.duration_sec), "duration"),
  );
}

function rewardGrid(detail, jobName) {
  const cols = Array.from({ length: detail.n_attempts }, (_, i) => i + 1);
  const several = new Set(detail.grid.map((r) => `${r.agent}/${r.model}`)).size > 1;
  return h(
    "table",
    { class: "reward-grid", "data-testid": "reward-grid" },
    h("thead", {}, h("tr", {}, h("th", {}, "task"), cols.map((c) => h("th", {}, `#${c}`)), h("th", {}, "mean"), h("th", {}, "pass@k"))),
    h(
      "tbody",
      {},
      detail.grid.map((row) =>
        h(
          "tr",
          {},
          h("td", {}, row.task, several ? h("span", { class: "muted small" }, ` ${row.agent}/${row.model || "-"}`) : null),
          row.cells.map((cell) =>
            cell
              ? h(
                  "td",
                  { class: `cell st-${cell.state} ${cell.reward === 1 ? "pass" : cell.reward === 0 ? "fail" : ""}`, "data-testid": "grid-cell" },
                  h("a", { href: `/jobs/${encodeURIComponent(jobName)}/trials/${encodeURIComponent(cell.trial)}`, title: cell.trial }, cell.state === "finished" ? fmt.reward(cell.reward) : cell.state === "running" ? "…" : cell.reward !== null ? fmt.reward(cell.reward) : "✗"),
                )
              : h("td", { class: "cell empty" }, ""),
          ),
          h(
            "td",
            { class: "num", title: `${detail.job.score_convention}; the other convention: ${row.mean_beside === null ? "—" : row.mean_beside.toFixed(2)}` },
            row.mean === null ? "—" : row.mean.toFixed(2),
            row.mean_beside !== row.mean ? h("span", { class: "muted small", "data-testid": "task-mean-beside" }, ` (${row.mean_beside === null ? "—" : row.mean_beside.toFixed(2)})`) : null,
          ),
          h("td", { class: "small", "data-testid": "task-pass-at-k" }, Object.entries(row.pass_at_k).map(([k, v]) => `@${k} ${fmt.prob(v)}`).join(" · ") || "—"),
        ),
      ),
    ),
  );
}

function errorGroups(detail, jobName) {
  if (!detail.errors.length) return h("p", { class: "muted" }, "No trial recorded an error.");
  return h(
    "div",
    { "data-testid": "error-groups" },
    detail.errors.map((g) =>
      h(
        "details",
        { class: "error-group" },
        h("summary", {}, h("span", { class: `badge err-${g.class}` }, g.class), ` ${g.kind} × ${g.trials.length}`, h("span", { class: "muted small" }, ` — ${g.example}`)),
        h("ul", {}, g.trials.map((t) => h("li", {}, h("a", { href: `/jobs/${encodeURIComponent(jobName)}/trials/${encodeURIComponent(t)}` }, t)))),
      ),
    ),
  );
}

/** Finished, errored or cancelled trials can be retried; running ones cancelled. */
const RETRYABLE = new Set(["finished", "errored", "cancelled", "interrupted"]);

export async function renderJob(app, jobName) {
  let detail = await api.job(jobName);
  // Under `terminus run --view`: pause, resume, cancel and retry go to the job's Supervisor.
  const controlNote = h("span", { class: "muted", "data-testid": "control-note" });
  let paused = false;
  let reload = () => {};
  const pauseButton = h("button", { type: "button", "data-testid": "job-pause" }, "pause");
  const sendControl = async (request, said) => {
    try {
      const status = await api.control(jobName, request);
      paused = status.paused;
      pauseButton.textContent = paused ? "resume" : "pause";
      replace(controlNote, said);
    } catch (e) {
      replace(controlNote, h("span", { class: "err", "data-testid": "control-error" }, e.message));
    }
    reload();
  };
  pauseButton.addEventListener("click", () => sendControl(paused ? "resume" : "pause", paused ? "resumed: trials start again" : "paused: no new trial starts"));
  const actionCell = (t, l) => {
    if (!detail.controllable) return null;
    const running = (l && !l.finished) || t.state === "running";
    const button = (label, testid, request, said) =>
      h("button", { type: "button", class: "small", "data-testid": testid, onclick: () => sendControl(request, said) }, label);
    return h(
      "td",
      {},
      running ? button("cancel", "trial-cancel", { cancel_trial: t.name }, `${t.name}: cancelled`) : null,
      !running && RETRYABLE.has(t.state) ? button("retry", "trial-retry", { retry_trial: t.name }, `${t.name}: will run again`) : null,
    );
  };
  const live = new Map(detail.live_trials.map((t) => [t.trial, t]));
  const initial = query();
  const filters = { q: "", state: "", task: "", error: "", sort: "name", dir: "asc", ...initial };
  const tbody = h("tbody");
  const counter = h("span", { class: "muted" });
  const cardsHost = h("div");
  const gridHost = h("div");
  const errorsHost = h("div");
  const liveNote = h("span", { class: "muted", "data-testid": "live-note" });
  const taskSelect = h("select", { "data-testid": "filter-task" });
  const rowsByName = new Map();
  // The job's state as this process's hub last told it (null: from the files). The title and
  // the state card both show it, so they cannot disagree.
  let hubJob = null;
  const jobState = () => (hubJob ? hubJob.state : detail.job.state);
  const drawState = () => {
    replace(cardsHost, summaryCards(detail.job, jobState()));
    if (!detail.live && !detail.watched) return;
    const state = jobState();
    if (state === "running") replace(liveNote, badge("running", detail.live ? "live" : "live (files)"));
    else replace(liveNote, badge(state, hubJob && hubJob.message ? `${state}: ${hubJob.message}` : state));
  };

  const makeRow = (t) => {
    const link = `/jobs/${encodeURIComponent(jobName)}/trials/${encodeURIComponent(t.name)}`;
    const l = live.get(t.name);
    const tokensIn = l && !l.finished ? l.input_tokens : t.input_tokens;
    const tokensOut = l && !l.finished ? l.output_tokens : t.output_tokens;
    const cost = l && !l.finished && l.cost_usd ? l.cost_usd : t.cost_usd;
    return h(
      "tr",
      { "data-testid": "trial-row", "data-trial": t.name, "data-state": t.state },
      h("td", {}, h("a", { href: link }, t.name)),
      h("td", {}, t.task),
      h("td", {}, t.agent),
      h("td", {}, t.model || "—"),
      h("td", { class: "num" }, t.attempt ?? "—"),
      h("td", {}, phaseCell(t, l)),
      h("td", { class: "num", "data-testid": "reward" }, fmt.reward(t.reward)),
      h("td", { class: "num", "data-testid": "episodes" }, l && !l.finished && l.episode !== null ? String(l.episode + 1) : fmt.int(t.episodes)),
      h("td", { class: "num", "data-testid": "tokens" }, `${fmt.tokens(tokensIn)} / ${fmt.tokens(tokensOut)}`),
      h("td", { class: "num" }, fmt.cost(cost)),
      h("td", { class: "num" }, fmt.duration(t.duration_sec)),
      h("td", {}, errorCell(t.error), t.retries ? h("span", { class: "muted small" }, ` (${t.retries} retries)`) : null, t.restarts ? h("span", { class: "muted small" }, ` (${t.restarts} restarts)`) : null),
      actionCell(t, l),
    );
  };

  const drawRows = () => {
    setQuery(filters);
    const q = filters.q.toLowerCase();
    const rows = detail.trials
      .filter(
        (t) =>
          (!q || t.name.toLowerCase().includes(q) || t.task.toLowerCase().includes(q)) &&
          (!filters.state || t.state === filters.state) &&
          (!filters.task || t.task === filters.task) &&
          (!filters.error || (filters.error === "none" ? !t.error : t.error && t.error.class === filters.error)),
      )
      .sort(compareBy(filters.sort, filters.dir));
    rowsByName.clear();
    replace(
      tbody,
      rows.map((t) => {
        const row = makeRow(t);
        rowsByName.set(t.name, row);
        return row;
      }),
    );
    replace(counter, `${rows.length} of ${detail.trials.length} trials`);
  };

  const drawAll = () => {
    drawState();
    replace(gridHost, rewardGrid(detail, jobName));
    replace(errorsHost, errorGroups(detail, jobName));
    const tasks = [...new Set(detail.trials.map((t) => t.task))].sort();
    replace(taskSelect, h("option", { value: "" }, "all tasks"), tasks.map((t) => h("option", { value: t, selected: t === filters.task }, t)));
    drawRows();
  };

  const select = (key, options, label) =>
    h(
      "label",
      { class: "facet" },
      label + " ",
      h(
        "select",
        { "data-testid": `filter-${key}`, onchange: (e) => ((filters[key] = e.target.value), drawRows()) },
        options.map(([value, text]) => h("option", { value, selected: value === filters[key] }, text)),
      ),
    );
  taskSelect.addEventListener("change", (e) => ((filters.task = e.target.value), drawRows()));

  const header = h(
    "thead",
    {},
    h(
      "tr",
      {},
      COLUMNS.map(([key, label]) =>
        h(
          "th",
          {
            class: "sortable",
            "data-sort": key,
            onclick: () => {
              filters.dir = filters.sort === key && filters.dir === "asc" ? "desc" : "asc";
              filters.sort = key;
              for (const th of header.querySelectorAll("th")) th.classList.toggle("sorted", th.dataset.sort === key);
              drawRows();
            },
          },
          label,
        ),
      ),
      detail.controllable ? h("th", {}, "control") : null,
    ),
  );

  replace(
    app,
    h("div", { class: "crumbs" }, h("a", { href: "/" }, "Jobs"), " / ", jobName),
    h("h1", {}, jobName, " ", liveNote),
    cardsHost,
    detail.controllable ? h("div", { class: "toolbar", "data-testid": "job-controls" }, pauseButton, " ", controlNote) : null,
    h("h2", { id: "trials" }, "Trials"),
    h(
      "div",
      { class: "toolbar" },
      h("input", { type: "search", placeholder: "filter trials or tasks", value: filters.q, "data-testid": "filter-q", oninput: debounce((e) => ((filters.q = e.target.value), drawRows()), 150) }),
      select("state", [["", "all"], ["running", "running"], ["finished", "finished"], ["errored", "errored"], ["cancelled", "cancelled"], ["interrupted", "interrupted"]], "state"),
      select("error", [["", "all"], ["none", "no error"], ["infrastructure", "infrastructure"], ["agent", "agent"], ["unknown", "unknown"]], "error"),
      h("label", { class: "facet" }, "task ", taskSelect),
      counter,
    ),
    h("table", { class: "grid-table", "data-testid": "trials-table" }, header, tbody),
    h("h2", { id: "grid" }, "Rewards by task and attempt"),
    gridHost,
    h("h2", { id: "errors" }, "Errors by kind"),
    errorsHost,
    h("h2", { id: "search" }, "Search every trajectory of this job"),
    searchBox(jobName),
    h("h2", { id: "config" }, "Configuration"),
    h("details", { "data-testid": "job-config" }, h("summary", {}, "config.json (secrets redacted)"), h("pre", { class: "json" }, JSON.stringify(detail.config, null, 2))),
  );
  drawAll();
  if (detail.controllable) {
    api
      .control(jobName, "status")
      .then((status) => {
        paused = status.paused;
        pauseButton.textContent = paused ? "resume" : "pause";
      })
      .catch(() => {});
  }

  if (!detail.live && !detail.watched) return;
  // Live: the Supervisor's events (this process runs the job) or file changes (another does).
  drawState();
  document.getElementById("live-dot").hidden = false;
  onLeave(() => (document.getElementById("live-dot").hidden = true));
  reload = debounce(async () => {
    detail = await api.job(jobName);
    for (const t of detail.live_trials) live.set(t.trial, t);
    drawAll();
  }, 300);
  const source = new EventSource(api.eventsUrl(jobName));
  onLeave(() => source.close());
  const updateTrial = (t) => {
    live.set(t.trial, t);
    const known = detail.trials.find((x) => x.name === t.trial);
    if (!known) return reload();
    const row = rowsByName.get(t.trial);
    if (!row) return;
    const fresh = makeRow(known);
    row.replaceWith(fresh);
    rowsByName.set(t.trial, fresh);
  };
  source.addEventListener("snapshot", (e) => {
    const snap = JSON.parse(e.data);
    if (snap.job) (hubJob = snap.job), drawState();
    for (const t of snap.trials) updateTrial(t);
  });
  source.addEventListener("trial", (e) => updateTrial(JSON.parse(e.data)));
  source.addEventListener("finished", reload);
  source.addEventListener("changed", reload);
  source.addEventListener("job", (e) => {
    hubJob = JSON.parse(e.data);
    drawState();
  });
  source.addEventListener("done", () => {
    source.close();
    hubJob = null;
    detail.live = detail.watched = false;
    replace(liveNote, "");
    reload();
  });
}

/** Search across the job's trajectories; hits link to the step. */
export function searchBox(jobName, trial) {
  const results = h("div", { class: "search-results", "data-testid": "search-results" });
  const input = h("input", { type: "search", placeholder: trial ? "search this trajectory" : "search all trials' steps", "data-testid": trial ? "trial-search" : "job-search-steps" });
  const run = debounce(async () => {
    const q = input.value.trim();
    if (!q) return replace(results);
    const found = await api.search(jobName, q, trial);
    replace(
      results,
      h("p", { class: "muted" }, `${found.hits.length}${found.truncated ? "+" : ""} matches in ${found.files_searched} files`),
      h(
        "ul",
        {},
        found.hits.map((hit) =>
          h(
            "li",
            { "data-testid": "search-hit" },
            h(
              "a",
              {
                href: `/jobs/${encodeURIComponent(jobName)}/trials/${encodeURIComponent(hit.trial)}?traj=${encodeURIComponent(hit.path)}&step=${hit.step_index}`,
              },
              trial ? "" : `${hit.trial} · `,
              `${hit.path.replace(/^.*\//, "")} step ${hit.step_id ?? hit.step_index + 1} · ${hit.field}`,
            ),
            h("div", { class: "snippet" }, hit.snippet),
          ),
        ),
      ),
    );
  }, 250);
  input.addEventListener("input", run);
  return h("div", { class: "search" }, input, results);
}
