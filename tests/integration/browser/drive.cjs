// Drive one heapscope HTML page in headless Debian chromium and report as JSON.
//
// Usage: node drive.cjs PLAN.json    (prints one JSON object on stdout)
// PLAN: {"page": "/abs/file.html", "width": 1400, "height": 900,
//        "steps": [{"do": "eval", "js": "..."}, {"do": "clickFrame", "name": "main"},
//                  {"do": "click", "selector": "..."}, {"do": "type", "selector": "...", "text": "..."},
//                  {"do": "waitFor", "js": "..."}, {"do": "hoverFrame", "name": "..."},
//                  {"do": "select", "selector": "...", "label": "..."}, {"do": "screenshot", "path": "..."},
//                  {"do": "drag", "js": "({x0, x1, y})"}: the mouse pressed at (x0, y), moved to (x1, y), released]}
// Result: {"errors": [console errors and page errors], "requests": [non-file URLs asked for],
//          "readyMs": wall time from navigation to body[data-ready], "results": [one per step]}
// playwright-core is found in HS_NODE_MODULES (tests/.node/node_modules); no browser is downloaded.
"use strict";
const fs = require("fs");
const path = require("path");
const { chromium } = require(path.join(process.env.HS_NODE_MODULES, "playwright-core"));

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const browser = await chromium.launch({
    executablePath: process.env.HS_CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const out = { errors: [], requests: [], results: [] };
  try {
    const page = await browser.newPage({ viewport: { width: plan.width || 1400, height: plan.height || 900 } });
    page.on("console", (m) => { if (m.type() === "error") out.errors.push("console: " + m.text()); });
    page.on("pageerror", (e) => out.errors.push("page: " + e.message));
    page.on("request", (r) => { if (!r.url().startsWith("file:") && !r.url().startsWith("data:")) out.requests.push(r.url()); });
    const t0 = Date.now();
    await page.goto("file://" + plan.page);
    await page.waitForSelector("body[data-ready='1']", { timeout: plan.timeoutMs || 20000 });
    out.readyMs = Date.now() - t0;
    for (const s of plan.steps || []) {
      let r = null;
      if (s.do === "eval") r = await page.evaluate(s.js);
      else if (s.do === "click") await page.click(s.selector);
      else if (s.do === "type") await page.fill(s.selector, s.text);
      else if (s.do === "select") r = await page.selectOption(s.selector, { label: s.label });
      else if (s.do === "waitFor") await page.waitForFunction(s.js, null, { timeout: 10000 });
      else if (s.do === "clickFrame" || s.do === "hoverFrame") {
        const c = await page.evaluate((n) => window.heapscope.frameCentre(n), s.name);
        if (!c) throw new Error("no drawn frame named " + s.name);
        if (s.do === "clickFrame") await page.mouse.click(c.x, c.y); else await page.mouse.move(c.x, c.y);
        r = c;
      } else if (s.do === "drag") {
        const c = await page.evaluate(s.js);
        await page.mouse.move(c.x0, c.y);
        await page.mouse.down();
        await page.mouse.move(c.x1, c.y, { steps: 8 });
        await page.mouse.up();
        r = c;
      } else if (s.do === "screenshot") await page.screenshot({ path: s.path, fullPage: false });
      else throw new Error("unknown step " + s.do);
      out.results.push(r);
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out));
}
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
