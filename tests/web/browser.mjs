// The operator's page in a real browser: Debian's chromium, driven by
// playwright-core, against `mistri-locks serve --allow-actions` on one
// backend (tests/web/run.sh runs it on Redis and on Local).
//
//   node browser.mjs BIN URL NAME [--screenshot PNG] [--big DB]
//
// BIN is the mistri-locks binary, URL the backend, NAME a label for output.
// Holders are `mistri-locks run KEY -- sleep 60` processes. Every wait is
// bounded by the protocol: the page polls every POLL_S, a stop is seen
// within one tick (TICK_S, heartbeat 1 s), a waiter is woken by the
// release's announcement or its own safety poll (SAFETY_POLL_S); a process
// start is bounded by START_S.
import { chromium } from "playwright-core";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const POLL_S = 1; // the page's refresh
const TICK_S = 1; // min(heartbeat, 1 s): the holders below renew every 1 s
const SAFETY_POLL_S = 2; // mistri_locks::SAFETY_POLL: the floor of every push
const START_S = 30; // a process or the browser starting on a busy machine

const [bin, url, name, ...rest] = process.argv.slice(2);
const opt = (flag) => { const i = rest.indexOf(flag); return i >= 0 ? rest[i + 1] : null; };
const screenshot = opt("--screenshot");
const bigDb = opt("--big");
const cWaiter = opt("--c-waiter");
const python = opt("--python"); // a Python with the built extension
const TOKEN = "browser-test-token-" + process.pid + "-0123456789";
const work = mkdtempSync(join(tmpdir(), "mistri-web-"));
const tokenFile = join(work, "token");
writeFileSync(tokenFile, TOKEN + "\n", { mode: 0o600 }); // serve refuses a token others can read
const ns = "mistri:web:" + process.pid;
const children = [];
let passed = 0;

function log(msg) { console.log(`[${name}] ${msg}`); }
function ok(msg) { passed++; log("ok   " + msg); }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function cli(args, backend = url) {
  return ["--url", backend, "--namespace", ns, ...args];
}

function start(args, backend) {
  return track(spawn(bin, cli(args, backend), { stdio: ["ignore", "pipe", "pipe"] }));
}

// Keeps a child's output and exit, and stops it at the end.
function track(child) {
  child.out = "";
  child.stdout.on("data", (d) => { child.out += d; });
  child.stderr.on("data", (d) => { child.out += d; });
  child.exited = new Promise((resolve) => child.on("exit", (code, sig) => resolve({ code, sig })));
  children.push(child);
  return child;
}

async function within(seconds, what, probe) {
  const end = Date.now() + seconds * 1000;
  let last;
  while (Date.now() < end) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (e) { last = e; }
    await sleep(50);
  }
  throw new Error(`${what}: not within ${seconds}s${last ? " (" + last.message + ")" : ""}`);
}

async function serve(extra, backend) {
  const child = start(["serve", "--listen", "127.0.0.1:0", ...extra], backend);
  const addr = await within(START_S, "serve printing its address", () => {
    const m = /serving (http:\/\/[^ ]+\/)/.exec(child.out);
    return m && m[1];
  });
  child.addr = addr;
  return child;
}

function holder(key, args = []) {
  return start(["run", key, "--ttl", "10", "--heartbeat", String(TICK_S), "--grace", "1", ...args, "--", "sleep", "60"]);
}

// A Python process holding `key` through the extension (tests/web/py_holder.py).
function pyHolder(key, stopKey, label) {
  const script = new URL("./py_holder.py", import.meta.url).pathname;
  return track(spawn(python, [script, url, ns, key, stopKey, label, String(TICK_S)],
    { stdio: ["ignore", "pipe", "pipe"] }));
}

function held(key) {
  return spawnSync(bin, cli(["status", key]), { stdio: "ignore" }).status === 0;
}

async function main() {
  // A fresh --user-data-dir (Playwright takes it as the persistent context's folder).
  const browser = await chromium.launchPersistentContext(join(work, "profile"), {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
    viewport: { width: 1400, height: 900 },
    timeout: START_S * 1000,
  });
  try {
    const server = await serve(["--allow-actions", "--token-file", tokenFile]);
    const page = await browser.newPage();
    let alerted = false;
    page.on("dialog", async (d) => { if (d.type() === "alert") { alerted = true; } await d.dismiss().catch(() => {}); });
    await page.goto(server.addr, { timeout: START_S * 1000 });
    await page.fill("#token", TOKEN);
    await page.dispatchEvent("#token", "change");
    assert.equal(await page.locator("#mode").textContent(), "");

    // A holder with a stop key shows within 2 s of holding: a Python
    // process through the extension (the CLI's `run` without --python).
    const first = python
      ? pyHolder("report:42", "report:42:stop", "first holder")
      : holder("report:42", ["--stop-key", "report:42:stop", "--label", "first holder"]);
    await within(START_S, "the first holder acquiring", () => held("report:42"));
    const r42 = page.locator('tr[data-key="report:42"]');
    await within(2 * POLL_S, "report:42's row", async () => (await r42.count()) === 1);
    const fence1 = BigInt((await r42.locator("td.fence").textContent()).trim());
    assert.equal((await r42.locator("td.label").textContent()).trim(), "first holder");
    ok("a holder's row shows within 2 s, with its label and fence " + fence1);

    // A waiter (its own stop key: the first one's stays raised).
    const waiter = holder("report:42", ["--stop-key", "report:42:stop-waiter", "--wait", "60", "--label", "the waiter"]);
    await sleep(300); // let it queue (not a bound: its hand-over below is the check)

    // Stop: the holder trips within a tick (plus the announcement, at most
    // the safety poll), its command ends, it releases; the row goes.
    const t0 = Date.now();
    await r42.locator("button.stop").click();
    const { code } = await Promise.race([
      first.exited,
      sleep((TICK_S + SAFETY_POLL_S) * 1000).then(() => ({ code: "still running" })),
    ]);
    assert.equal(code, 76, "the first holder exits 76 (stopped by its flag): " + first.out);
    ok(`Stop tripped the ${python ? "Python " : ""}holder in ${Date.now() - t0} ms (bound ${TICK_S + SAFETY_POLL_S} s)`);
    assert.match(await page.locator("#message").textContent(), /raised report:42:stop/);

    // The waiter takes over with a higher fence, and the first holder's row is gone.
    const fence2 = await within(SAFETY_POLL_S + 2 * POLL_S, "the waiter's row", async () => {
      if ((await r42.count()) !== 1) return null;
      if ((await r42.locator("td.label").textContent()).trim() !== "the waiter") return null;
      return BigInt((await r42.locator("td.fence").textContent()).trim());
    });
    assert.ok(fence2 > fence1, `fence ${fence2} > ${fence1}`);
    ok(`the waiter then holds with a higher fence (${fence2} > ${fence1}); the stopped holder's row went`);
    assert.ok(await page.locator("#leases .timeline span").count() >= 2, "the timeline shows both holders");
    ok("the timeline shows the hand-over");

    if (cWaiter) {
      // A waiting C process shows as a waiter on the key's row, then as its
      // holder with a higher fence once the holder is stopped.
      const before = holder("cwait:job", ["--stop-key", "cwait:job:stop", "--label", "before the C waiter"]);
      await within(START_S, "cwait:job's holder acquiring", () => held("cwait:job"));
      const row = page.locator('tr[data-key="cwait:job"]');
      await within(2 * POLL_S, "cwait:job's row", async () => (await row.count()) === 1);
      const fenceA = BigInt((await row.locator("td.fence").textContent()).trim());
      const c = track(spawn(cWaiter, [url, ns, "cwait:job", "the C waiter", "cwait:job:c-stop"],
        { stdio: ["ignore", "pipe", "pipe"] }));
      // It queues at its first try (a process start), the page shows it at its next poll.
      await within(START_S + 2 * POLL_S, "the C waiter in the waiting column", async () =>
        /^1 · /.test(((await row.locator("td.waiting").textContent()) || "").trim()));
      assert.equal((await row.locator("td.label").textContent()).trim(), "before the C waiter");
      ok("a waiting C process shows as 1 waiting line on its key's row");
      await row.locator("button.stop").click();
      const gone = await Promise.race([before.exited, sleep((TICK_S + SAFETY_POLL_S) * 1000).then(() => ({ code: "still running" }))]);
      assert.equal(gone.code, 76, before.out);
      const fenceC = await within(SAFETY_POLL_S + 2 * POLL_S, "the C waiter holding", async () => {
        if ((await row.count()) !== 1) return null;
        if ((await row.locator("td.label").textContent()).trim() !== "the C waiter") return null;
        return BigInt((await row.locator("td.fence").textContent()).trim());
      });
      assert.ok(fenceC > fenceA, `fence ${fenceC} > ${fenceA}`);
      assert.match(c.out, new RegExp("held " + fenceC));
      assert.equal((await row.locator("td.waiting").textContent()).trim(), "-");
      ok(`then holds it with a higher fence (${fenceC} > ${fenceA}), and nobody waits`);
      await row.locator("button.stop").click();
      const cExit = await Promise.race([c.exited, sleep((TICK_S + SAFETY_POLL_S) * 1000).then(() => ({ code: "still running" }))]);
      assert.equal(cExit.code, 0, "the C holder stops and releases: " + c.out);
      await within(2 * POLL_S, "cwait:job's row going", async () => (await row.count()) === 0);
      ok("Stop ends the C holder too; its row goes");
    }

    // `mistri-locks stop --holder-of KEY` does what the page's Stop does.
    const viaCli = holder("cli:stop", ["--stop-key", "cli:stop:flag"]);
    const plain = holder("cli:plain");
    await within(START_S, "the CLI holders acquiring", () => held("cli:stop") && held("cli:plain"));
    const stopped = spawnSync(bin, cli(["stop", "--holder-of", "cli:stop"]), { encoding: "utf8" });
    assert.equal(stopped.status, 0, stopped.stderr);
    assert.match(stopped.stdout, /raised cli:stop:flag/);
    const cliExit = await Promise.race([viaCli.exited, sleep((TICK_S + SAFETY_POLL_S) * 1000).then(() => ({ code: "still running" }))]);
    assert.equal(cliExit.code, 76, viaCli.out);
    const none = spawnSync(bin, cli(["stop", "--holder-of", "cli:plain"]), { encoding: "utf8" });
    assert.equal(none.status, 1);
    assert.match(none.stderr, /watches no stop key/);
    plain.kill("SIGTERM");
    ok("mistri-locks stop --holder-of KEY stops KEY's holder; a holder without a stop key is an error");

    // A key that is HTML renders as text.
    const evil = "<img src=x onerror=alert(1)>";
    holder(evil);
    const evilRow = page.locator("#leases tbody tr").filter({ hasText: evil });
    await within(START_S + 2 * POLL_S, "the HTML key's row", async () => (await evilRow.count()) === 1);
    assert.equal(await evilRow.locator("td.key").textContent(), evil);
    assert.equal(await page.locator("#leases img").count(), 0);
    await sleep(POLL_S * 1000);
    assert.equal(alerted, false);
    ok("a key <img src=x onerror=alert(1)> renders as text (no element, no alert)");

    // Refusals: a POST without the token, from another origin.
    const noToken = await page.evaluate(async () => {
      const csrf = document.querySelector('meta[name="mistri-csrf"]').content;
      const r = await fetch("api/break", { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf }, body: JSON.stringify({ key: "report:42" }) });
      return r.status;
    });
    assert.equal(noToken, 403);
    const cross = await fetch(server.addr + "api/break", {
      method: "POST", body: JSON.stringify({ key: "report:42" }),
      headers: { "Content-Type": "application/json", Authorization: "Bearer " + TOKEN, Origin: "http://evil.example" },
    });
    assert.equal(cross.status, 403);
    assert.ok(held("report:42"));
    ok("a POST without the token: 403; from another origin: 403");

    // Break, behind its confirmation.
    await r42.locator("button.break").click();
    assert.ok(await page.locator("#confirm-break").evaluate((d) => d.open));
    assert.match(await page.locator("#confirm-break").textContent(), /deletes the lease now/);
    await page.click("#break-cancel");
    assert.ok(held("report:42"), "Cancel breaks nothing");
    await r42.locator("button.break").click();
    await page.click("#break-ok");
    const lost = await Promise.race([waiter.exited, sleep((10 + SAFETY_POLL_S) * 1000).then(() => ({ code: "still running" }))]);
    assert.equal(lost.code, 77, "the broken holder finds out at its next renewal and exits 77: " + waiter.out);
    ok("Break asks first, then deletes the lease; its holder finds out at its next renewal (exit 77)");

    // A read-only server: no buttons, 403 on POST.
    const ro = await serve([]);
    const roPage = await browser.newPage();
    await roPage.goto(ro.addr, { timeout: START_S * 1000 });
    await within(2 * POLL_S, "the read-only page's rows", async () => (await roPage.locator("#leases tbody tr").count()) >= 1);
    assert.equal(await roPage.locator("#leases button, #flags button").count(), 0);
    assert.equal((await roPage.locator("#mode").textContent()).trim(), "read-only");
    const roPost = await fetch(ro.addr + "api/break", { method: "POST", body: JSON.stringify({ key: evil }), headers: { Authorization: "Bearer " + TOKEN } });
    assert.equal(roPost.status, 403);
    ok("a read-only server shows no buttons and answers 403 to a POST");
    await roPage.close();

    if (screenshot) {
      const nightly = [];
      for (let i = 0; i < 20; i++) nightly.push(holder(`nightly:report:${String(i).padStart(2, "0")}`, ["--stop-key", `nightly:stop:${i}`]));
      for (let i = 0; i < 3; i++) holder(`nightly:report:${String(i).padStart(2, "0")}`, ["--wait", "60"]);
      spawnSync(bin, cli(["stop", "nightly:pause", "--ttl", "300"]), { stdio: "ignore" });
      await page.fill("#prefix", "nightly:");
      await within(START_S + 2 * POLL_S, "20 leases and a flag", async () =>
        (await page.locator("#leases tbody tr").count()) === 20 && (await page.locator("#flags tbody tr").count()) === 1);
      // The 3 waiters show on their keys' rows (each queues at its first try).
      await within(START_S + 2 * POLL_S, "3 rows with a waiting line", async () =>
        (await page.locator("#leases td.waiting.busy").count()) === 3);
      ok("the 3 waiters show in the waiting column");
      // A holder that stops renewing stands out: freeze one (SIGSTOP can't
      // be caught or ignored) until its last renewal is older than twice
      // its heartbeat; its ttl (10 s) outlasts the freeze.
      const frozen = nightly[7];
      frozen.kill("SIGSTOP");
      const stuckRow = page.locator('tr[data-key="nightly:report:07"]');
      await within(2 * TICK_S + 2 * POLL_S + 1, "the frozen holder's row standing out",
        async () => (await stuckRow.getAttribute("class")) === "stuck");
      assert.equal(await page.locator("#leases tr.stuck").count(), 1);
      ok("a holder silent past twice its heartbeat stands out (row marked stuck)");
      await page.screenshot({ path: screenshot, fullPage: true });
      frozen.kill("SIGCONT");
      ok("screenshot of 20 leases (one stuck), 3 waiters and a flag: " + screenshot);
    }

    if (bigDb) {
      // 10,000 leases (made beforehand in a Local file): filter and paging.
      const big = await serve([], bigDb);
      const bp = await browser.newPage();
      await bp.goto(big.addr, { timeout: START_S * 1000 });
      await within(START_S, "10,000 rows", async () => ((await bp.locator("#lease-count").textContent()) || "").includes("10000"));
      assert.equal(await bp.locator("#leases tbody tr").count(), 100);
      assert.equal(await bp.locator("#page-info").textContent(), "page 1 of 100");
      await bp.click("#next");
      assert.equal(await bp.locator("#page-info").textContent(), "page 2 of 100");
      assert.equal(await bp.locator("#leases tbody tr >> nth=0").getAttribute("data-key"), "report:00100");
      await bp.fill("#prefix", "report:0999");
      await within(2 * POLL_S + START_S, "the filtered rows", async () => (await bp.locator("#leases tbody tr").count()) === 10);
      assert.equal(await bp.locator("#page-info").textContent(), "page 1 of 1");
      ok("10,000 rows: 100 a page, paging and the prefix filter work");
      await bp.close();
    }
  } finally {
    await browser.close();
  }
}

function cleanup() {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) {
      // `run` handles SIGTERM (it ends its command and releases); serve and
      // the rest are ended outright.
      c.kill(c.spawnargs.includes("run") ? "SIGTERM" : "SIGKILL");
    }
  }
  rmSync(work, { recursive: true, force: true });
}

main().then(() => {
  log(`browser tests: ${passed} passed`);
  cleanup();
  process.exit(0);
}, (e) => {
  console.error(`[${name}] FAIL: ${e.stack || e}`);
  for (const c of children) if (c.out) console.error(`--- ${c.spawnargs.slice(5, 8).join(" ")}: ${c.out.slice(-500)}`);
  cleanup();
  process.exit(1);
});
