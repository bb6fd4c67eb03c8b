// Shared by the browser tests: Debian's chromium through playwright-core, named checks that
// report every failure (not only the first), and screenshots.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

export const URL_BASE = process.env.VIEW_URL;
export const SHOTS = process.env.VIEW_SHOTS || "screenshots";
if (!URL_BASE) {
  console.error("VIEW_URL is not set");
  process.exit(2);
}
mkdirSync(SHOTS, { recursive: true });

export async function launch() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    // No sandbox (root), and nothing that reaches out: this machine has no internet.
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  page.on("console", (m) => {
    // Refusals the checks ask for on purpose are logged by the browser as failed loads.
    if (m.type() === "error" && !(expectingRefusals && m.text().startsWith("Failed to load resource"))) {
      pageErrors.push("console: " + m.text());
    }
  });
  return { browser, page, pageErrors };
}

const failures = [];
let expectingRefusals = false;

/** Runs `fn` while refused requests are expected (they are not page errors then). */
export async function refusalsExpected(fn) {
  expectingRefusals = true;
  try {
    return await fn();
  } finally {
    expectingRefusals = false;
  }
}

/** Runs one named check; a failure is recorded and the next check still runs. */
export async function check(name, fn) {
  const started = Date.now();
  try {
    await fn();
    console.log(`ok    ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    failures.push(name);
    console.log(`FAIL  ${name}: ${e.stack || e.message}`);
  }
}

export function assert(condition, message) {
  if (!condition) throw new Error(message);
}

export async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, name), fullPage: false });
}

/** Exits with the checks' verdict. */
export function finish(pageErrors) {
  const ignorable = (e) => e.includes("EventSource") || e.includes("net::ERR_ABORTED");
  const errors = pageErrors.filter((e) => !ignorable(e));
  if (errors.length) {
    console.log(`FAIL  no script errors in the pages: ${errors.join(" | ")}`);
    failures.push("page errors");
  }
  console.log(failures.length ? `${failures.length} check(s) failed: ${failures.join(", ")}` : "all checks passed");
  process.exit(failures.length ? 1 : 0);
}

/** Waits until `fn` (evaluated in the page) returns something truthy. */
export async function until(page, fn, arg, timeout = 15000) {
  const handle = await page.waitForFunction(fn, arg, { timeout, polling: 100 });
  return handle.jsonValue();
}
