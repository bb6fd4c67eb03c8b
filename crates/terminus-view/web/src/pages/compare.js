// Two jobs compared task by task: each task's rewards and mean in each, the flips, the
// difference in mean reward over the common tasks with its paired bootstrap 95 % interval, and a
// reward-versus-cost chart.

import { api } from "../api.js";
import { badge, fmt, h, query, replace, setQuery } from "../dom.js";
import { navigate } from "../nav.js";

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

const three = (x) => (x === null ? "—" : x.toFixed(3));

/** A task's mean in one job, the other convention's in parentheses when it differs. */
function sideMean(side) {
  if (!side) return "—";
  const mean = side.mean === null ? "—" : side.mean.toFixed(2);
  if (side.mean_beside === side.mean) return mean;
  return [mean, h("span", { class: "muted small" }, ` (${side.mean_beside === null ? "—" : side.mean_beside.toFixed(2)})`)];
}

/** Reward (y) against mean cost per trial (x), one point per task and job, and each job's mean. */
function chart(result) {
  const width = 640;
  const height = 320;
  const pad = { left: 56, right: 16, top: 16, bottom: 44 };
  const points = [];
  for (const t of result.tasks) {
    if (t.a && t.a.mean !== null) points.push({ job: "a", task: t.task, cost: t.a.cost_usd ?? 0, reward: t.a.mean });
    if (t.b && t.b.mean !== null) points.push({ job: "b", task: t.task, cost: t.b.cost_usd ?? 0, reward: t.b.mean });
  }
  const maxCost = Math.max(1e-9, ...points.map((p) => p.cost));
  const x = (c) => pad.left + (c / maxCost) * (width - pad.left - pad.right);
  const y = (r) => pad.top + (1 - Math.max(0, Math.min(1, r))) * (height - pad.top - pad.bottom);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", "data-testid": "reward-cost-chart", role: "img" });
  plot.append(svg("line", { x1: pad.left, y1: y(0), x2: width - pad.right, y2: y(0), class: "axis" }));
  plot.append(svg("line", { x1: pad.left, y1: y(0), x2: pad.left, y2: y(1), class: "axis" }));
  for (const r of [0, 0.5, 1]) plot.append(svg("text", { x: pad.left - 8, y: y(r) + 4, "text-anchor": "end", class: "tick" }, r.toFixed(1)));
  for (const f of [0, 0.5, 1]) plot.append(svg("text", { x: x(f * maxCost), y: height - pad.bottom + 16, "text-anchor": "middle", class: "tick" }, fmt.cost(f * maxCost)));
  plot.append(svg("text", { x: (width + pad.left) / 2, y: height - 6, "text-anchor": "middle", class: "axis-label" }, "mean cost per trial of the task"));
  plot.append(svg("text", { x: 14, y: (height - pad.bottom) / 2, transform: `rotate(-90 14 ${(height - pad.bottom) / 2})`, "text-anchor": "middle", class: "axis-label" }, "mean reward"));
  for (const p of points) {
    const dot = svg("circle", { cx: x(p.cost) + (p.job === "b" ? 3 : -3), cy: y(p.reward), r: 5, class: `dot job-${p.job}` });
    dot.append(svg("title", {}, `${p.task} (${p.job === "a" ? result.a.name : result.b.name}): reward ${p.reward.toFixed(2)}, ${fmt.cost(p.cost)}`));
    plot.append(dot);
  }
  // Each job as a whole: its mean reward against its mean cost per trial.
  for (const [key, job] of [["a", result.a], ["b", result.b]]) {
    const cost = job.cost_usd !== null && job.n_completed ? job.cost_usd / job.n_completed : 0;
    const reward = job.mean_reward ? job.mean_reward.estimate : 0;
    const mark = svg("rect", { x: x(cost) - 7, y: y(reward) - 7, width: 14, height: 14, class: `job-mark job-${key}` });
    mark.append(svg("title", {}, `${job.name}: mean reward ${reward.toFixed(3)}, ${fmt.cost(cost)} per trial`));
    plot.append(mark);
  }
  const noCost = points.every((p) => p.cost === 0);
  return h(
    "figure",
    {},
    plot,
    h(
      "figcaption",
      { class: "small" },
      h("span", { class: "legend job-a" }, "●"),
      ` ${result.a.name}  `,
      h("span", { class: "legend job-b" }, "●"),
      ` ${result.b.name} — dots are tasks, squares are the jobs.`,
      noCost ? h("span", { class: "muted" }, " No trial recorded a cost (an unpriced or offline model): every point sits at $0.") : null,
    ),
  );
}

function rewards(side) {
  if (!side) return h("span", { class: "muted" }, "not run");
  return side.rewards.map((r, i) =>
    h("span", { class: `pill ${r === 1 ? "pass" : r === 0 || r === null ? "fail" : ""}`, title: side.trials[i] }, r === null ? "✗" : fmt.reward(r)),
  );
}

async function chooser(app, a, b) {
  const list = await api.jobs();
  const pick = (name, current) =>
    h("select", { name, "data-testid": `pick-${name}` }, list.jobs.map((j) => h("option", { value: j.name, selected: j.name === current }, j.name)));
  const sa = pick("a", a || list.jobs[1]?.name);
  const sb = pick("b", b || list.jobs[0]?.name);
  return h(
    "div",
    { class: "toolbar" },
    "Compare ",
    sa,
    " with ",
    sb,
    h("button", { onclick: () => navigate(`/compare/${encodeURIComponent(sa.value)}/${encodeURIComponent(sb.value)}`) }, "Compare"),
  );
}

export async function renderCompare(app, a, b) {
  if (!a || !b) {
    replace(app, h("h1", {}, "Compare two jobs"), await chooser(app, a, b));
    return;
  }
  const result = await api.compare(a, b);
  const other = result.score_convention === "harbor-0.25" ? "harbor-0.26" : "harbor-0.25";
  const filters = { flips: "", ...query() };
  const tbody = h("tbody");
  const draw = () => {
    setQuery(filters);
    const shown = result.tasks.filter((t) => !filters.flips || t.flip);
    replace(
      tbody,
      shown.map((t) =>
        h(
          "tr",
          { "data-testid": "compare-row", "data-task": t.task, "data-flip": t.flip || "" },
          h("td", {}, t.task),
          h("td", {}, rewards(t.a)),
          h("td", { class: "num" }, sideMean(t.a)),
          h("td", {}, rewards(t.b)),
          h("td", { class: "num" }, sideMean(t.b)),
          h("td", {}, t.flip === "fail_to_pass" ? badge("finished", "fail → pass") : t.flip === "pass_to_fail" ? badge("errored", "pass → fail") : ""),
        ),
      ),
    );
  };
  const d = result.difference;
  const verdict = !d
    ? "The jobs have no task in common."
    : d.low > 0
      ? `${result.b.name} scores higher: the interval lies above 0.`
      : d.high < 0
        ? `${result.b.name} scores lower: the interval lies below 0.`
        : "The interval includes 0: no difference is established at this sample size.";
  replace(
    app,
    h("div", { class: "crumbs" }, h("a", { href: "/" }, "Jobs"), " / compare"),
    h("h1", {}, "Compare ", h("a", { href: `/jobs/${encodeURIComponent(a)}` }, a), " → ", h("a", { href: `/jobs/${encodeURIComponent(b)}` }, b)),
    await chooser(app, a, b),
    h(
      "div",
      { class: "cards" },
      h("div", { class: "card" }, h("div", { class: "label" }, "tasks in common"), h("div", { class: "value" }, String(result.n_common))),
      h("div", { class: "card" }, h("div", { class: "label" }, `mean reward, ${a}`), h("div", { class: "value" }, three(result.mean_a)), h("div", { class: "muted small" }, `${other}: ${three(result.mean_a_beside)}`)),
      h("div", { class: "card" }, h("div", { class: "label" }, `mean reward, ${b}`), h("div", { class: "value" }, three(result.mean_b)), h("div", { class: "muted small" }, `${other}: ${three(result.mean_b_beside)}`)),
      h(
        "div",
        { class: "card wide", "data-testid": "difference" },
        h("div", { class: "label" }, "difference (b − a), paired bootstrap 95% CI over tasks"),
        h("div", { class: "value" }, d ? `${fmt.signed(d.estimate)} [${fmt.signed(d.low)}, ${fmt.signed(d.high)}]` : "—"),
        h("div", { class: "small muted" }, verdict),
      ),
      h("div", { class: "card", "data-testid": "flips" }, h("div", { class: "label" }, "flips"), h("div", { class: "value" }, `${result.n_fail_to_pass} fail→pass · ${result.n_pass_to_fail} pass→fail`)),
    ),
    h("h2", {}, "Reward against cost"),
    chart(result),
    h("h2", {}, "Tasks"),
    h(
      "label",
      { class: "small" },
      h("input", { type: "checkbox", checked: Boolean(filters.flips), "data-testid": "only-flips", onchange: (e) => ((filters.flips = e.target.checked ? "1" : ""), draw()) }),
      " only the tasks that flipped",
    ),
    h(
      "table",
      { class: "grid-table", "data-testid": "compare-table" },
      h("thead", {}, h("tr", {}, ["task", `rewards in ${a}`, "mean", `rewards in ${b}`, "mean", "flip"].map((c) => h("th", {}, c)))),
      tbody,
    ),
    h(
      "p",
      { class: "muted small", "data-testid": "compare-convention" },
      `Means by ${result.score_convention} (${a}'s score_convention), ${other}'s in parentheses. A task passes in a job when its mean reward is at least 0.5. ` +
        (result.score_convention === "harbor-0.25"
          ? "Errored trials count as reward 0, as in Harbor 0.25's mean."
          : "Trials without a valid reward are left out, as in Harbor 0.26's mean."),
    ),
  );
  draw();
}
