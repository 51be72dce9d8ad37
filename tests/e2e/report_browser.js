// Open a `cortex report` page in headless Chromium and say what a person would see, as one JSON line.
//
//   node tests/e2e/report_browser.js '{"page": "/abs/report.html", "screenshot": "/abs/shot.png",
//                                      "click": "<memory id>", "zoom": true, "pan": true}'
//
// Printed: whether the page became ready, console errors and page errors, requests other than the page
// itself (there must be none: the page is self-contained), load time (`loadMs`: navigation start to the first
// frame painted with every memory drawn, by the page's own clock; `wallMs`: from `goto` until the driver saw
// the page ready, CDP round trips included), how many memories the page drew and how many dots have ink on
// the canvas, the side panel's text after clicking the dot of `click`, the view before and after a wheel
// zoom and a drag, the text of each section, and whether a script planted in a memory ran (`window.__pwned`).
"use strict";
const path = require("path");
const chromium = require("@sparticuz/chromium");
const puppeteer = require("puppeteer-core");

async function main() {
  const options = JSON.parse(process.argv[2]);
  const out = { consoleErrors: [], pageErrors: [], requests: [], dialogs: [] };
  const browser = await puppeteer.launch({
    args: chromium.args, executablePath: await chromium.executablePath(), headless: true,
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: options.width || 1400, height: options.height || 1000 });
    const url = "file://" + path.resolve(options.page);
    page.on("console", (message) => {
      if (message.type() === "error") out.consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => out.pageErrors.push(String(error)));
    page.on("dialog", async (dialog) => { out.dialogs.push(dialog.message()); await dialog.dismiss(); });
    page.on("request", (request) => { if (request.url() !== url) out.requests.push(request.url()); });
    const started = Date.now();
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: 60000 });
    try {
      await page.waitForFunction(() => window.cortexReport && window.cortexReport.ready,
                                 { timeout: options.readyTimeout || 60000 });
    } catch (error) {  // the page never said it was ready: report what went wrong instead of failing blind
      out.ready = false;
      if (options.screenshot) await page.screenshot({ path: options.screenshot });
      out.pwned = await page.evaluate(() => (window.__pwned === undefined ? null : window.__pwned));
      return;
    }
    out.ready = true;
    out.wallMs = Date.now() - started;
    Object.assign(out, await page.evaluate(() => {
      const r = window.cortexReport;
      const text = (id) => document.getElementById(id).innerText;
      return {
        loadMs: r.readyAt,  // navigation start to the first frame painted with every dot drawn
        scriptMs: r.loadMs, scriptStartMs: r.startedMs, total: r.total, drawn: r.drawn, inked: r.dotsOnCanvas(),
        pwned: window.__pwned === undefined ? null : window.__pwned,
        sections: { problems: text("problems-section"), timeline: text("timeline-section"),
                    branch: text("branch-section"), salience: text("salience-section"),
                    summary: text("summary"), panel: text("panel") },
      };
    }));
    if (options.click) {
      const spot = await page.evaluate((id) => window.cortexReport.screenPosition(id), options.click);
      out.clickedAt = spot;
      if (spot) {
        await page.mouse.click(spot.x, spot.y);
        await new Promise((resolve) => setTimeout(resolve, 50));
        out.panel = await page.evaluate(() => document.getElementById("panel").innerText);
        out.panelPre = await page.evaluate(() => {
          const pre = document.querySelector("#panel pre");
          return pre ? pre.textContent : null;
        });
      }
    }
    if (options.zoom && options.click) {
      const before = await page.evaluate(() => window.cortexReport.view());
      const spot = await page.evaluate((id) => window.cortexReport.screenPosition(id), options.click);
      await page.mouse.move(spot.x, spot.y);
      await page.mouse.wheel({ deltaY: -400 });
      await page.waitForFunction((s) => window.cortexReport.view().scale !== s, { timeout: 5000 }, before.scale);
      const after = await page.evaluate(() => window.cortexReport.view());
      const moved = await page.evaluate((id) => window.cortexReport.screenPosition(id), options.click);
      out.zoom = { before, after, spotBefore: spot, spotAfter: moved };
    }
    if (options.pan) {
      const before = await page.evaluate(() => window.cortexReport.view());
      const box = await page.evaluate(() => {
        const r = document.getElementById("graph").getBoundingClientRect();
        return { x: r.left + 10, y: r.top + 10 };
      });
      await page.mouse.move(box.x, box.y);
      await page.mouse.down();
      await page.mouse.move(box.x + 60, box.y + 40, { steps: 5 });
      await page.mouse.up();
      const after = await page.evaluate(() => window.cortexReport.view());
      out.pan = { before, after };
    }
    if (options.search) {  // type in the search box, Enter: the first match is shown
      await page.type("#search", options.search);
      await page.keyboard.press("Enter");
      out.searchPanel = await page.evaluate(() => document.getElementById("panel").innerText);
    }
    if (options.hideType) {  // "Fit all", then untick a type in the legend: its dots are no longer drawn
      await page.click("#fit");
      await page.evaluate((type) => {
        const box = [...document.querySelectorAll("#legend label")].find((l) => l.textContent.startsWith(type + " ("));
        box.querySelector("input").click();
      }, options.hideType);
      // The clicks only schedule a draw (requestAnimationFrame): read the count once a frame has passed, however slow.
      await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
      out.drawnAfterHiding = await page.evaluate(() => window.cortexReport.drawn);
    }
    if (options.screenshot) {
      await page.screenshot({ path: options.screenshot, fullPage: options.fullPage !== false });
      out.screenshot = options.screenshot;
    }
    out.pwned = await page.evaluate(() => (window.__pwned === undefined ? null : window.__pwned));
  } finally {
    await browser.close();
    process.stdout.write(JSON.stringify(out) + "\n");
  }
}

main().catch((error) => {
  process.stderr.write(String(error && error.stack || error) + "\n");
  process.exit(1);
});
