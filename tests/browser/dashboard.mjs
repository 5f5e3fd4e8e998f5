// Drives the federation's dashboard in Debian's headless Chromium with playwright-core and
// checks what a person would look for. Run by tests/e2e/t95_dashboard.rs; by hand:
//
//   node tests/browser/dashboard.mjs '{"url":"http://127.0.0.1:7400/ui/","clusters":["sim-eu"]}'
//
// The one argument is JSON: url, clusters (names that must be shown, in the capacity map and
// among the members), assigned ({name, cluster}: a workload whose row shows that cluster),
// pending ({name, reason}: a workload whose row and "why pending" entry show that reason
// code), fleetStart (the dev clock's start: the page's "updated" time must be near it),
// screenshot (a PNG path). Prints one line of JSON and exits 0 when every check held.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const TIMEOUT = Number(process.env.DASHBOARD_TIMEOUT_MS || 30000);
const spec = JSON.parse(process.argv[2] || "{}");

// Flags for a machine without a network: no background fetches, no component updates, no sync.
const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

const checks = [];
function check(name, ok, detail) {
  checks.push({ name, ok, detail });
  if (!ok) throw new Error(`${name}: ${detail}`);
}

const profile = mkdtempSync(join(tmpdir(), "tideway-chromium-"));
let context;
let page;
let exitCode = 0;
try {
  // launchPersistentContext is the playwright way to give Chromium its own --user-data-dir.
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1440, height: 1000 },
  });
  page = context.pages()[0] || (await context.newPage());
  const consoleErrors = [];
  // Failed requests are judged by URL below; the console's copy of them carries no URL.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  // A server without the tidal engine answers 404 for /v1/schedules: the page must cope.
  const failed = [];
  page.on("response", (r) => {
    const path = new URL(r.url()).pathname;
    if (r.status() >= 400 && path !== "/v1/schedules") failed.push(`${r.status()} ${path}`);
  });

  const resp = await page.goto(spec.url, { waitUntil: "load", timeout: TIMEOUT });
  check("page loads", resp && resp.ok(), `GET ${spec.url} -> ${resp && resp.status()}`);
  check("title", (await page.title()) === "Tideway", await page.title());
  await page.waitForSelector("body[data-loaded=true]", { timeout: TIMEOUT });

  for (const c of spec.clusters || []) {
    await page.waitForSelector(`#regions [data-cluster="${c}"]`, { timeout: TIMEOUT });
    const health = await page.textContent(`#members tr[data-member="${c}"] td.health`, { timeout: TIMEOUT });
    check(`member ${c} listed with its health`, /Ready|NotReady|Draining|Cordoned/.test(health || ""), health);
  }
  const shownClusters = await page.$$eval("#regions [data-cluster]", (els) => els.map((e) => e.dataset.cluster));
  check("capacity map shows the clusters", (spec.clusters || []).every((c) => shownClusters.includes(c)), shownClusters.join(","));

  if (spec.assigned) {
    const { name, cluster } = spec.assigned;
    const sel = `#workloads tr[data-workload="${name}"] td.cluster`;
    await page.waitForFunction(
      ([s, want]) => document.querySelector(s)?.textContent === want,
      [sel, cluster], { timeout: TIMEOUT });
    check(`workload ${name} shows cluster ${cluster}`, (await page.textContent(sel)) === cluster, await page.textContent(sel));
  }

  if (spec.pending) {
    const { name, reason } = spec.pending;
    const sel = `#workloads tr[data-workload="${name}"] td.reason`;
    await page.waitForFunction(
      ([s, want]) => (document.querySelector(s)?.textContent || "").includes(want),
      [sel, reason], { timeout: TIMEOUT });
    const text = await page.textContent(sel);
    check(`pending ${name} shows its reason`, text.includes(reason), text);
    const why = await page.textContent(`#pending [data-pending="${name}"] .why`, { timeout: TIMEOUT });
    check(`why-pending entry for ${name}`, (why || "").length > 10, why);
    // The detail panel: click the row, the explanation appears.
    await page.click(`#workloads tr[data-workload="${name}"]`);
    await page.waitForSelector("#detail:not([hidden]) h3", { timeout: TIMEOUT });
    const detail = await page.textContent("#detail-body");
    check(`detail of ${name} has the explanation`, detail.includes("Explain") && detail.includes(name), detail.slice(0, 200));
    await page.click("#close-detail");
  }

  // The tidal panel's drawing, on hourly entries like the schedule timeline's: day from an
  // hour ago for three hours, then night. (The dev server may have no schedules to show.)
  const tidal = await page.evaluate(() => {
    const H = 3600e3;
    const t0 = Math.floor(serverNow() / H) * H - H; // the fleet's clock, which the page draws "now" on
    const hours = ["day", "day", "day", "night", "night"].map((window, i) => ({ start: new Date(t0 + i * H).toISOString(), window }));
    const el = timeline({ schedule: "day-night", hours });
    return { text: el.textContent, windows: el.querySelectorAll(".timeline .win").length, now: el.querySelectorAll(".timeline .now").length };
  });
  check("tidal timeline: current window and next transition",
    tidal.text.includes("current window: day") && tidal.text.includes("next transition: night") && tidal.windows === 2 && tidal.now === 1,
    JSON.stringify(tidal));

  // Cluster, region and health read on one line each (a region like "ap-south" once wrapped).
  const wrapped = await page.$$eval("#members tbody tr td:not(:last-child)", (tds) =>
    tds.filter((td) => {
      // A text node laid out on two lines has boxes at two heights.
      const texts = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
      for (let n = texts.nextNode(); n; n = texts.nextNode()) {
        const r = document.createRange();
        r.selectNodeContents(n);
        if (new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1) return true;
      }
      return false;
    }).map((td) => td.textContent));
  check("member cells on one line", wrapped.length === 0, wrapped.join(", "));

  // "updated" shows the fleet's clock (a dev clock may be far from the browser's).
  if (spec.fleetStart) {
    const fleetNow = await page.$eval("#refreshed", (e) => e.dataset.fleetNow || "");
    const off = Math.abs(Date.parse(fleetNow) - Date.parse(spec.fleetStart));
    check("updated time is the fleet's clock", off < 24 * 3600e3, `${fleetNow} vs start ${spec.fleetStart}`);
  }

  const banner = await page.$eval("#error", (e) => (e.hidden ? "" : e.textContent));
  check("no API error shown", banner === "", banner);
  check("no script errors", consoleErrors.length === 0, consoleErrors.join(" | "));
  check("no failed requests", failed.length === 0, failed.join(", "));
  console.log(JSON.stringify({ ok: true, checks: checks.map((c) => c.name) }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e && e.message ? e.message : e), passed: checks.filter((c) => c.ok).map((c) => c.name) }));
  exitCode = 1;
} finally {
  // Also on failure: the picture usually says what went wrong.
  if (page && spec.screenshot) {
    await page.screenshot({ path: spec.screenshot, fullPage: true }).catch(() => {});
  }
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(exitCode);
