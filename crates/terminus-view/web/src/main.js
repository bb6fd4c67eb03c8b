// The viewer's browser side: one page application over the read-only JSON API. Every page has
// its own address (/, /jobs/<job>, /jobs/<job>/trials/<trial>, /compare/<a>/<b>), filters live
// in the query string, and each address renders when opened directly.

import { h, replace } from "./dom.js";
import { leave, navigate } from "./nav.js";
import { renderJobs } from "./pages/jobs.js";
import { renderJob } from "./pages/job.js";
import { renderTrial } from "./pages/trial.js";
import { renderCompare } from "./pages/compare.js";

const routes = [
  [/^\/$/, () => renderJobs],
  [/^\/jobs\/([^/]+)\/?$/, (m) => (el) => renderJob(el, decodeURIComponent(m[1]))],
  [/^\/jobs\/([^/]+)\/trials\/([^/]+)\/?$/, (m) => (el) => renderTrial(el, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^\/compare\/?$/, () => (el) => renderCompare(el, null, null)],
  [/^\/compare\/([^/]+)\/([^/]+)\/?$/, (m) => (el) => renderCompare(el, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
];

async function route() {
  leave();
  const app = document.getElementById("app");
  const path = location.pathname;
  for (const [pattern, make] of routes) {
    const match = path.match(pattern);
    if (match) {
      try {
        await make(match)(app);
      } catch (e) {
        replace(app, h("div", { class: "error", "data-testid": "error" }, h("strong", {}, "Cannot show this page: "), e.message));
      }
      return;
    }
  }
  replace(app, h("div", { class: "error", "data-testid": "error" }, "No page at ", path, ". ", h("a", { href: "/" }, "All jobs")));
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a");
  if (!link || link.target || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith("/api/") || url.pathname.startsWith("/assets/")) return;
  event.preventDefault();
  navigate(url.pathname + url.search + url.hash);
});
window.addEventListener("popstate", route);
window.addEventListener("terminus:navigate", route);
window.__terminusView = { loadedAt: Date.now() };
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", route);
else route();
