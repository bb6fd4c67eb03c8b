// The jobs list: every job of the jobs directory with its state and figures, facets by agent,
// model and dataset, a search box, and two jobs picked to compare. Running jobs are followed
// over their event streams: the list is read again when one of their trials finishes.

import { api } from "../api.js";
import { badge, debounce, fmt, h, query, replace, setQuery } from "../dom.js";
import { navigate, onLeave } from "../nav.js";

function passAtK(evals) {
  if (!evals.length) return "—";
  return evals.map((e) => {
    const ks = Object.entries(e.pass_at_k);
    const text = ks.length ? ks.map(([k, v]) => `@${k} ${fmt.prob(v)}`).join(" · ") : "—";
    const row = evals.length > 1 ? h("div", {}, h("span", { class: "muted" }, `${e.agent}/${e.model || "-"}: `), text) : h("div", {}, text);
    return [row, e.beside ? h("div", { class: "muted small", "data-testid": "eval-beside" }, e.beside) : null];
  });
}

/** The headline mean with its interval, and the other convention's figures under it. */
function meanCell(job) {
  return [
    h("span", { "data-testid": "mean-reward" }, fmt.interval(job.mean_reward)),
    job.beside ? h("div", { class: "muted small", "data-testid": "mean-beside" }, job.beside) : null,
  ];
}

function facetSelect(name, label, values, current, onchange) {
  return h(
    "label",
    { class: "facet" },
    label + " ",
    h(
      "select",
      { name, "data-testid": `facet-${name}`, onchange },
      h("option", { value: "" }, "all"),
      values.map((v) => h("option", { value: v, selected: v === current }, v)),
    ),
  );
}

export async function renderJobs(app) {
  const list = await api.jobs();
  const state = { agent: "", model: "", dataset: "", state: "", q: "", ...query() };
  const picked = new Set();
  const union = (key) => [...new Set(list.jobs.flatMap((j) => j[key]))].sort();
  const states = [...new Set(list.jobs.map((j) => j.state))].sort();
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const compareButton = h("button", { disabled: true, "data-testid": "compare-picked" }, "Compare the two picked");
  compareButton.addEventListener("click", () => {
    const [a, b] = [...picked];
    navigate(`/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}`);
  });

  const draw = () => {
    setQuery(state);
    const q = state.q.toLowerCase();
    const shown = list.jobs.filter(
      (j) =>
        (!state.agent || j.agents.includes(state.agent)) &&
        (!state.model || j.models.includes(state.model)) &&
        (!state.dataset || j.datasets.includes(state.dataset)) &&
        (!state.state || j.state === state.state) &&
        (!q || j.name.toLowerCase().includes(q) || j.models.some((m) => m.toLowerCase().includes(q))),
    );
    replace(count, `${shown.length} of ${list.jobs.length} jobs`);
    replace(
      body,
      shown.map((j) =>
        h(
          "tr",
          { "data-testid": "job-row", "data-job": j.name },
          h(
            "td",
            {},
            h("input", {
              type: "checkbox",
              checked: picked.has(j.name),
              title: "pick to compare",
              onchange: (e) => {
                if (e.target.checked) picked.add(j.name);
                else picked.delete(j.name);
                while (picked.size > 2) picked.delete([...picked][0]);
                compareButton.disabled = picked.size !== 2;
                draw();
              },
            }),
          ),
          h("td", {}, h("a", { href: `/jobs/${encodeURIComponent(j.name)}` }, j.name), j.problem ? h("div", { class: "warn" }, j.problem) : null),
          h("td", {}, fmt.time(j.started_at)),
          h("td", {}, badge(j.state)),
          h("td", { class: "num" }, `${j.n_completed} / ${j.n_total}`, j.n_running ? h("span", { class: "muted" }, ` (${j.n_running} running)`) : null),
          h("td", { class: "num" + (j.n_errors ? " bad" : "") }, j.n_errors),
          h("td", { class: "num", title: j.score_convention }, meanCell(j)),
          h("td", {}, passAtK(j.evals)),
          h("td", { class: "num" }, `${fmt.tokens(j.input_tokens)} / ${fmt.tokens(j.output_tokens)}`),
          h("td", { class: "num" }, fmt.cost(j.cost_usd)),
          h("td", { class: "num" }, fmt.duration(j.duration_sec)),
          h("td", { class: "muted small" }, [j.agents.join(", "), " · ", j.models.join(", ") || "—", " · ", j.datasets.join(", ")]),
        ),
      ),
    );
  };
  const set = (key) => (e) => {
    state[key] = e.target.value;
    draw();
  };

  replace(
    app,
    h("h1", {}, "Jobs"),
    h("p", { class: "muted" }, "in ", h("code", {}, list.jobs_dir)),
    list.assets ? null : h("p", { class: "warn" }, "This binary was built without its browser assets."),
    h(
      "div",
      { class: "toolbar" },
      h("input", { type: "search", placeholder: "search jobs or models", value: state.q, "data-testid": "job-search", oninput: debounce(set("q"), 150) }),
      facetSelect("agent", "agent", union("agents"), state.agent, set("agent")),
      facetSelect("model", "model", union("models"), state.model, set("model")),
      facetSelect("dataset", "dataset", union("datasets"), state.dataset, set("dataset")),
      facetSelect("state", "state", states, state.state, set("state")),
      count,
      compareButton,
    ),
    h(
      "table",
      { class: "grid-table", "data-testid": "jobs-table" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["", "job", "started", "state", "trials done", "errors", "mean reward [95% CI]", "pass@k", "tokens in/out", "cost", "duration", "agent · model · dataset"].map((c) => h("th", {}, c)),
        ),
      ),
      body,
    ),
  );
  draw();

  // Running jobs: read the list again when one of their trials finishes (no polling).
  const refresh = debounce(async () => {
    const fresh = await api.jobs();
    list.jobs = fresh.jobs;
    draw();
  }, 400);
  for (const job of list.jobs.filter((j) => j.state === "running")) {
    const source = new EventSource(api.eventsUrl(job.name));
    for (const name of ["finished", "changed", "job"]) source.addEventListener(name, refresh);
    source.addEventListener("done", () => {
      source.close();
      refresh();
    });
    onLeave(() => source.close());
  }
}
