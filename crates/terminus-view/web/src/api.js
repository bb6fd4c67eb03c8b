// The JSON API of `terminus view` (crates/terminus-view/src/api.rs).

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error || `HTTP ${status}`);
    this.status = status;
    this.kind = body?.kind;
  }
}

/** The JSON body of a response, or null when it has none. */
async function bodyOf(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

export async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await bodyOf(response);
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export async function getText(path) {
  const response = await fetch(path);
  if (!response.ok) throw new ApiError(response.status, await bodyOf(response));
  return response.text();
}

/** POSTs `body` as JSON (a browser sends that cross-origin only after a preflight). */
export async function postJson(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await bodyOf(response);
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}

const enc = encodeURIComponent;

export const api = {
  jobs: () => getJson("/api/jobs"),
  job: (job) => getJson(`/api/jobs/${enc(job)}`),
  trial: (job, trial, root) => getJson(`/api/jobs/${enc(job)}/trials/${enc(trial)}?root=${enc(root || "")}`),
  trajectory: (job, trial, path, offset, limit) =>
    getJson(`/api/jobs/${enc(job)}/trials/${enc(trial)}/trajectory?path=${enc(path)}&offset=${offset}&limit=${limit}`),
  fileUrl: (job, trial, path, limit) =>
    `/api/jobs/${enc(job)}/trials/${enc(trial)}/file?path=${enc(path)}` + (limit ? `&limit=${limit}` : ""),
  search: (job, q, trial) =>
    getJson(`/api/jobs/${enc(job)}/search?q=${enc(q)}` + (trial ? `&trial=${enc(trial)}` : "")),
  compare: (a, b) => getJson(`/api/compare/${enc(a)}/${enc(b)}`),
  // A live control of the job this process runs: "pause", {"cancel_trial": name}, …
  control: (job, request) => postJson(`/api/jobs/${enc(job)}/control`, request),
  eventsUrl: (job) => `/api/jobs/${enc(job)}/events`,
  terminalUrl: (job, trial) => `/api/jobs/${enc(job)}/trials/${enc(trial)}/terminal`,
};
