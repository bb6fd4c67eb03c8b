// A trial's page: the ATIF steps of its trajectories (segments and summarization subagents
// navigable), search in them, the asciinema recording with its episode markers as chapters
// (clicking a step seeks the recording; the recording's position highlights its step), the
// verifier's output, the error, earlier attempts and steps, the files and configuration — and
// while the trial runs, its terminal live from its pane log.

import * as AsciinemaPlayer from "asciinema-player";
import { api, getText } from "../api.js";
import { badge, debounce, fmt, h, query, replace, setQuery } from "../dom.js";
import { navigate, onLeave } from "../nav.js";
import { searchBox } from "./job.js";

const PAGE = 500;
/** Observations longer than this are folded. */
const FOLD = 1500;
/** Agent messages longer than this start folded. */
const LONG_MESSAGE = 64 * 1024;

/** The first `want` steps of a trajectory (all of them when `want` is omitted), page by page
 * (the server cuts a page of large steps short), with the document and the number of steps. */
async function loadSteps(jobName, trialName, path, want) {
  const first = await api.trajectory(jobName, trialName, path, 0, PAGE);
  const steps = [...first.steps];
  const target = Math.min(want ?? first.total_steps, first.total_steps);
  while (steps.length < target) {
    const next = await api.trajectory(jobName, trialName, path, steps.length, PAGE);
    if (!next.steps.length) break;
    steps.push(...next.steps);
  }
  return { document: first.document, steps, total: first.total_steps };
}

/** Whether a step is one of the agent's episodes (what a recording marker stands for). */
function isEpisode(step) {
  return step.source === "agent" && !step.is_copied_context;
}

/** The `[time, label]` markers of an asciicast v2 recording. */
function castMarkers(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line.includes('"m"')) continue;
    try {
      const event = JSON.parse(line);
      if (Array.isArray(event) && event[1] === "m") out.push([event[0], event[2]]);
    } catch {
      // Not an event line.
    }
  }
  return out;
}

function pre(text, cls) {
  return h("pre", { class: cls || "" }, text);
}

function folded(label, text, open) {
  if (text.length <= FOLD && open !== false) return pre(text);
  return h("details", { open: open || undefined }, h("summary", {}, `${label} (${fmt.int(text.length)} characters)`), pre(text));
}

function stepView(step, ctx) {
  const metrics = step.metrics || {};
  const parts = [];
  if (metrics.prompt_tokens !== undefined) parts.push(`${fmt.tokens(metrics.prompt_tokens)} in`);
  if (metrics.completion_tokens !== undefined) parts.push(`${fmt.tokens(metrics.completion_tokens)} out`);
  if (metrics.cached_tokens) parts.push(`${fmt.tokens(metrics.cached_tokens)} cached`);
  if (metrics.cost_usd !== undefined) parts.push(fmt.cost(metrics.cost_usd));
  if (ctx.latency !== null) parts.push(`${ctx.latency.toFixed(2)} s since the step before`);
  if (step.llm_call_count > 1) parts.push(`${step.llm_call_count} model calls`);
  const head = h(
    "div",
    { class: "step-head" },
    h("span", { class: "step-id" }, `#${step.step_id}`),
    badge(step.source),
    step.is_copied_context ? h("span", { class: "badge copied", "data-testid": "copied" }, "copied context") : null,
    step.model_name ? h("span", { class: "muted" }, step.model_name) : null,
    h("span", { class: "muted small" }, fmt.time(step.timestamp)),
    h("span", { class: "muted small" }, parts.join(" · ")),
    ctx.episode !== null && ctx.hasRecording
      ? h("button", { class: "seek", "data-testid": "seek", title: "play this episode in the recording", onclick: (e) => (e.stopPropagation(), ctx.seek(ctx.episode)) }, `▶ episode ${ctx.episode}`)
      : null,
  );
  const body = [];
  if (step.message) {
    if (step.source === "user") body.push(folded("prompt", step.message, step.message.length <= FOLD));
    // A very long reply is folded: laying out megabytes of text would hold the page up.
    else if (step.message.length > LONG_MESSAGE) body.push(folded("message", step.message, false));
    else body.push(pre(step.message, "message"));
  }
  if (step.reasoning_content) body.push(h("details", {}, h("summary", {}, "reasoning"), pre(step.reasoning_content)));
  for (const call of step.tool_calls || []) {
    const args = call.arguments || {};
    if (typeof args.keystrokes === "string") {
      const keys = args.keystrokes === "" ? h("p", { class: "muted small" }, "(nothing typed: a wait)") : pre(args.keystrokes, "keys");
      body.push(h("div", { class: "call" }, h("span", { class: "muted small" }, `keystrokes (wait ${args.duration ?? 1} s)`), keys));
    } else {
      body.push(h("div", { class: "call" }, h("span", { class: "badge call-name" }, call.function_name), Object.keys(args).length ? pre(JSON.stringify(args, null, 2)) : null));
    }
  }
  for (const result of step.observation?.results || []) {
    if (typeof result.content === "string") body.push(h("div", { class: "observation" }, h("span", { class: "muted small" }, "observation"), folded("observation", result.content)));
    for (const ref of result.subagent_trajectory_ref || []) {
      const target = ctx.trajectories.find((t) => t.path.endsWith("/" + ref.trajectory_path));
      body.push(
        h(
          "div",
          { class: "subagent" },
          "↳ subagent: ",
          target ? h("a", { href: ctx.trajLink(target.path), "data-testid": "subagent-link" }, target.label) : ref.trajectory_path || ref.session_id,
          ref.extra?.summary ? h("span", { class: "muted small" }, ` — ${ref.extra.summary}`) : null,
        ),
      );
    }
  }
  return h(
    "article",
    {
      class: `step src-${step.source}` + (step.is_copied_context ? " is-copied" : ""),
      id: `step-${ctx.index}`,
      "data-testid": "step",
      "data-step-id": step.step_id,
      "data-episode": ctx.episode ?? "",
      onclick: () => ctx.episode !== null && ctx.hasRecording && ctx.seek(ctx.episode),
    },
    head,
    body,
  );
}

function facts(row) {
  const fact = (label, value) => h("div", { class: "fact" }, h("span", { class: "label" }, label), h("span", {}, value));
  return h(
    "div",
    { class: "facts" },
    fact("task", row.task),
    fact("agent", `${row.agent}${row.model ? " / " + row.model : ""}`),
    fact("attempt", row.attempt ?? "—"),
    fact("reward", h("strong", { "data-testid": "trial-reward" }, fmt.reward(row.reward))),
    fact("episodes", fmt.int(row.episodes)),
    fact("tokens in / out / cached", `${fmt.int(row.input_tokens)} / ${fmt.int(row.output_tokens)} / ${fmt.int(row.cache_tokens)}`),
    fact("cost", fmt.cost(row.cost_usd)),
    fact("duration", fmt.duration(row.duration_sec)),
    fact("started", fmt.time(row.started_at)),
    fact("retries / restarts", `${row.retries} / ${row.restarts}`),
  );
}

export async function renderTrial(app, jobName, trialName) {
  const q = query();
  const root = q.root || "";
  const detail = await api.trial(jobName, trialName, root);
  const row = detail.row;
  const segments = detail.trajectories.filter((t) => t.kind === "main" || t.kind === "cont");
  const trajPath = q.traj && detail.trajectories.some((t) => t.path === q.traj) ? q.traj : detail.trajectories[0]?.path;
  const current = detail.trajectories.find((t) => t.path === trajPath);
  const trialUrl = `/jobs/${encodeURIComponent(jobName)}/trials/${encodeURIComponent(trialName)}`;
  const trajLink = (path) => `${trialUrl}?` + new URLSearchParams({ ...(root ? { root } : {}), traj: path }).toString();

  // --- the recording ---------------------------------------------------------------------
  const playerHost = h("div", { class: "player", "data-testid": "player" });
  const follow = h("input", { type: "checkbox", checked: true, "data-testid": "follow" });
  let player = null;
  let markers = [];
  const seek = async (episode) => {
    if (!player || episode >= markers.length) return;
    await player.seek({ marker: episode });
    highlight(episode, true);
  };

  // --- the steps ------------------------------------------------------------------------
  const stepsHost = h("div", { class: "steps", "data-testid": "steps" }, h("p", { class: "muted" }, "Loading steps…"));
  const episodeSteps = new Map();
  let highlighted = null;
  const highlight = (episode, scroll) => {
    const el = episodeSteps.get(episode);
    if (!el || el === highlighted) return;
    highlighted?.classList.remove("playing");
    el.classList.add("playing");
    highlighted = el;
    if (scroll && follow.checked) el.scrollIntoView({ block: "nearest", behavior: "smooth" });
  };

  // Steps shown: the first page at first (the server cuts a page of large steps short: a
  // trajectory may be gigabytes), a page more on each request; a linked step is shown.
  let shown = q.step !== undefined ? Number(q.step) + 1 : 1;
  const drawSteps = async () => {
    try {
      await drawStepsOrFail();
    } catch (e) {
      // The rest of the page (result, exception, verifier) stands without the steps.
      replace(stepsHost, h("p", { class: "warn", "data-testid": "steps-error" }, `The trajectory cannot be shown: ${e.message}`));
    }
  };
  const drawStepsOrFail = async () => {
    if (!current) return replace(stepsHost, h("p", { class: "muted" }, "This trial has no trajectory."));
    const { document: doc, steps, total } = await loadSteps(jobName, trialName, current.path, shown);
    // Episodes are numbered across the linear-history segments, as the recording's markers are.
    let episode = 0;
    if (current.kind === "cont") {
      for (const segment of segments) {
        if (segment.index >= current.index) break;
        const before = await loadSteps(jobName, trialName, segment.path);
        episode += before.steps.filter(isEpisode).length;
      }
    }
    const isSegment = current.kind === "main" || current.kind === "cont";
    episodeSteps.clear();
    let previous = null;
    const views = steps.map((step, index) => {
      const at = step.timestamp ? Date.parse(step.timestamp) : null;
      const latency = at !== null && previous !== null ? (at - previous) / 1000 : null;
      previous = at ?? previous;
      const own = isSegment && isEpisode(step) ? episode++ : null;
      const view = stepView(step, {
        index,
        episode: own,
        latency,
        hasRecording: Boolean(detail.recording),
        seek,
        trajectories: detail.trajectories,
        trajLink,
      });
      if (own !== null) episodeSteps.set(own, view);
      return view;
    });
    const docInfo = Object.entries(doc).filter(([k]) => !["schema_version", "session_id", "trajectory_id"].includes(k));
    replace(
      stepsHost,
      h("p", { class: "muted small", "data-testid": "trajectory-info" }, `${doc.schema_version || ""} · ${total} steps · session ${doc.session_id || "—"}`),
      views,
      steps.length < total
        ? h(
            "button",
            {
              "data-testid": "more-steps",
              onclick: () => {
                shown = steps.length + 1;
                drawSteps();
              },
            },
            `show more (${total - steps.length} of ${total} steps not shown yet)`,
          )
        : null,
      docInfo.length ? h("details", {}, h("summary", {}, "agent, final metrics and other fields"), pre(JSON.stringify(Object.fromEntries(docInfo), null, 2))) : null,
    );
    if (q.step !== undefined) {
      const target = document.getElementById(`step-${q.step}`);
      if (target) {
        target.classList.add("found");
        target.scrollIntoView({ block: "center" });
      }
    }
  };

  // --- page ----------------------------------------------------------------------------
  const trajNav = h(
    "nav",
    { class: "traj-nav", "data-testid": "trajectories" },
    detail.trajectories.map((t) =>
      h("a", { href: trajLink(t.path), class: t.path === trajPath ? "current" : "", "data-kind": t.kind }, t.label, h("span", { class: "muted small" }, ` ${fmt.bytes(t.size)}`)),
    ),
  );
  const rootsNav =
    detail.roots.length > 1
      ? h(
          "nav",
          { class: "roots", "data-testid": "roots" },
          "View: ",
          detail.roots.map((r) => h("a", { href: `${trialUrl}` + (r.path ? `?root=${encodeURIComponent(r.path)}` : ""), class: r.path === root ? "current" : "" }, r.label)),
        )
      : null;
  const error = row.error
    ? h(
        "div",
        { class: "error-box", "data-testid": "trial-error" },
        h("span", { class: `badge err-${row.error.class}` }, row.error.class),
        " ",
        h("strong", {}, row.error.kind),
        ": ",
        row.error.message,
        detail.exception ? h("details", {}, h("summary", {}, "exception.txt"), pre(detail.exception.text + (detail.exception.truncated ? "\n…" : ""))) : null,
      )
    : null;
  const verifier = detail.verifier;
  const liveHost = h("div", { class: "live-terminal", "data-testid": "live-terminal" });
  replace(
    app,
    h("div", { class: "crumbs" }, h("a", { href: "/" }, "Jobs"), " / ", h("a", { href: `/jobs/${encodeURIComponent(jobName)}` }, jobName), " / ", trialName),
    h("h1", {}, trialName, " ", badge(row.state)),
    rootsNav,
    facts(row),
    error,
    h(
      "div",
      { class: "trial-layout" },
      h(
        "section",
        { class: "left" },
        h("h2", {}, "Trajectory"),
        trajNav,
        searchBox(jobName, trialName),
        stepsHost,
      ),
      h(
        "aside",
        { class: "right" },
        row.state === "running" ? [h("h2", {}, "Terminal, live"), liveHost] : null,
        h("h2", {}, "Recording"),
        detail.recording ? [h("label", { class: "small" }, follow, " follow the recording in the steps"), playerHost] : h("p", { class: "muted" }, "No recording (record_terminal_session off, or the trial did not get that far)."),
      ),
    ),
    h("h2", {}, "Verifier"),
    h(
      "div",
      { class: "verifier", "data-testid": "verifier" },
      processesAtTests(detail.result),
      verifier.reward_txt !== null ? h("p", {}, "reward.txt: ", h("code", {}, verifier.reward_txt.trim())) : null,
      verifier.reward_json ? h("p", {}, "reward.json: ", h("code", {}, JSON.stringify(verifier.reward_json))) : null,
      verifier.stdout
        ? [h("p", { class: "muted small" }, `test-stdout.txt (${fmt.bytes(verifier.stdout.size)})`), pre(verifier.stdout.text + (verifier.stdout.truncated ? "\n… (cut; the whole file is below)" : ""))]
        : h("p", { class: "muted" }, "No verifier output."),
      verifier.files.length ? h("ul", {}, verifier.files.map((f) => h("li", {}, h("a", { href: api.fileUrl(jobName, trialName, f.path), target: "_blank" }, f.path), ` ${fmt.bytes(f.size)}`))) : null,
    ),
    detail.artifacts.length
      ? [h("h2", {}, "Artifacts"), h("ul", {}, detail.artifacts.map((f) => h("li", {}, h("a", { href: api.fileUrl(jobName, trialName, f.path), target: "_blank" }, f.path), ` ${fmt.bytes(f.size)}`)))]
      : null,
    h("h2", {}, "Files"),
    h(
      "details",
      { "data-testid": "files" },
      h("summary", {}, `${detail.files.length}${detail.files_truncated ? "+" : ""} files`),
      h("ul", { class: "files" }, detail.files.map((f) => h("li", {}, h("a", { href: api.fileUrl(jobName, trialName, f.path), target: "_blank" }, f.path), ` ${fmt.bytes(f.size)}`))),
    ),
    h("h2", {}, "Result and configuration"),
    h("details", { "data-testid": "trial-result" }, h("summary", {}, "result.json"), pre(JSON.stringify(detail.result, null, 2), "json")),
    h("details", { "data-testid": "trial-config" }, h("summary", {}, "config.json (secrets redacted)"), pre(JSON.stringify(detail.config, null, 2), "json")),
  );

  await drawSteps();

  if (detail.recording) {
    try {
      const cast = await getText(api.fileUrl(jobName, trialName, detail.recording.path, 64 * 1024 * 1024));
      markers = castMarkers(cast);
      player = AsciinemaPlayer.create({ data: cast }, playerHost, { fit: "width", preload: true, controls: true, terminalFontSize: "small" });
      window.__terminusView.player = player;
      window.__terminusView.markers = markers;
      // Where the recording is says which step is on screen (a local clock, not a request).
      let lastEpisode = null;
      const timer = setInterval(() => {
        const now = player.getCurrentTime?.();
        if (typeof now !== "number") return;
        let episode = null;
        for (let i = 0; i < markers.length && markers[i][0] <= now + 1e-3; i++) episode = i;
        if (episode !== null && episode !== lastEpisode) {
          lastEpisode = episode;
          highlight(episode, true);
        }
      }, 250);
      onLeave(() => {
        clearInterval(timer);
        player.dispose();
        delete window.__terminusView.player;
      });
    } catch (e) {
      replace(playerHost, h("p", { class: "warn" }, `The recording cannot be played: ${e.message}`));
    }
  }

  if (row.state === "running") {
    const live = AsciinemaPlayer.create({ driver: "eventsource", url: api.terminalUrl(jobName, trialName) }, liveHost, { fit: "width", autoPlay: true, controls: false, terminalFontSize: "small" });
    window.__terminusView.live = live;
    onLeave(() => live.dispose());
    // The trajectory grows with each episode: read it again when the trial reports one.
    const source = new EventSource(api.eventsUrl(jobName));
    onLeave(() => source.close());
    let episode = null;
    const redraw = debounce(drawSteps, 300);
    source.addEventListener("trial", (e) => {
      const t = JSON.parse(e.data);
      if (t.trial !== trialName) return;
      if (t.episode !== episode) {
        episode = t.episode;
        redraw();
      }
    });
    source.addEventListener("finished", (e) => {
      if (JSON.parse(e.data).trial === trialName) navigate(location.pathname + location.search);
    });
    source.addEventListener("changed", redraw);
    source.addEventListener("done", () => source.close());
  }
  setQuery({ ...(root ? { root } : {}), ...(q.traj ? { traj: q.traj } : {}), ...(q.step !== undefined ? { step: q.step } : {}) });
}

// What ran in the container when the tests started (`verifier.agent_processes`): the trial's,
// or each step's for a multi-step trial.
function processesAtTests(result) {
  const line = (label, census) =>
    census
      ? h(
          "p",
          { class: "small", "data-testid": "processes" },
          `${label}running when the tests started (agent_processes: ${census.policy}): ${census.count}`,
          census.count ? " — " + Object.entries(census.commands).map(([name, n]) => (n > 1 ? `${name} ×${n}` : name)).join(", ") : "",
        )
      : null;
  const steps = result?.step_results ?? [];
  if (steps.length) return steps.map((s) => line(`${s.step_name}: `, s.agent_result?.metadata?.processes_at_verification));
  return line("", result?.agent_result?.metadata?.processes_at_verification);
}
