// The chat page (src/serve/web/chat.html) in a real headless browser: Debian's chromium driven by npm
// puppeteer-core, against a real `zaya serve` of the golden tiny model (untrained: its text is noise, but it
// streams). ctest runs it as ChatPage.Browser (tests/CMakeLists.txt); by hand, from the repository root:
//
//   node tests/browser/chat_page_test.mjs [--zaya build/zaya] [--chromium /usr/bin/chromium] [--show-log]
//
// What it checks: the page loads without the API key the server was started with and names the model once the
// key is typed in; a server error (an out-of-range temperature) is shown and the failed turn is not sent again;
// a message typed and sent with Enter streams (the text grows through several states before the usage line
// ends it) into the reasoning block with thinking on (the untrained model never writes </think>, so by the qwen3
// rules everything is reasoning) and into the answer with thinking off, with both turns in the second request;
// Stop aborts a long answer and the server frees its slot (zaya_running_sequences back to 0); every request
// stays on the server's origin and the page throws nothing.
//
// Missing chromium or puppeteer-core: exit 77 (ctest SKIP_RETURN_CODE), unless CI is set (CI=true): then
// exit 1, so CI never passes without running it. scripts/setup.sh --test installs both.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SKIP = 77;
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const DEADLINE_S = 90;  // the whole test, server and browser included (ctest's TIMEOUT is above it)

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}
const opts = {
  zaya: path.resolve(arg("--zaya", path.join(ROOT, "build/zaya"))),
  model: path.resolve(arg("--model", path.join(ROOT, "tests/data/golden/zaya1_like"))),
  chromium: arg("--chromium", process.env.CHROMIUM_PATH || "/usr/bin/chromium"),
  showLog: process.argv.includes("--show-log"),
};
const inCI = !!process.env.CI && !["0", "false"].includes(process.env.CI.toLowerCase());

const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);

// --- dependencies ---------------------------------------------------------------------------------------
function missing(what) {
  if (inCI) {
    console.error(`FAIL: ${what} (CI is set, so a missing dependency fails the test; scripts/setup.sh --test installs it)`);
    process.exit(1);
  }
  console.log(`SKIP: ${what} (scripts/setup.sh --test installs it)`);
  process.exit(SKIP);
}
let puppeteer;
try {
  puppeteer = (await import("puppeteer-core")).default;
} catch (e) {
  missing(`npm puppeteer-core is not installed in ${ROOT}/node_modules (${e.code || e.message})`);
}
if (!fs.existsSync(opts.chromium)) missing(`no chromium at ${opts.chromium} (Debian: apt-get install chromium)`);
if (!fs.existsSync(opts.zaya)) {
  console.error(`FAIL: no zaya binary at ${opts.zaya} (pass --zaya PATH)`);
  process.exit(1);
}

// --- cleanup, on every way out ----------------------------------------------------------------------------
let server = null, serverLog = "", browser = null, tmp = null, cleaning = null;
function serverAlive() { return server && server.exitCode === null && server.signalCode === null; }
async function cleanup() {
  if (cleaning) return cleaning;
  cleaning = (async () => {
    if (browser) await Promise.race([browser.close().catch(() => {}), sleep(5000)]);
    log("browser closed");
    const bp = browser && browser.process();
    if (bp && bp.exitCode === null) bp.kill("SIGKILL");
    if (serverAlive()) {
      const exited = new Promise((r) => server.once("exit", r));
      server.kill("SIGTERM");
      if (await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]) === false) {
        log("zaya serve did not stop on SIGTERM within 5 s: SIGKILL");
        server.kill("SIGKILL");
      }
    }
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  })();
  return cleaning;
}
process.on("exit", () => {  // last resort (an exit that skipped cleanup): nothing outlives the test
  if (serverAlive()) server.kill("SIGKILL");
  const bp = browser && browser.process();
  if (bp && bp.exitCode === null) bp.kill("SIGKILL");
});
async function fail(msg) {
  console.error(`FAIL: ${msg}`);
  console.error(`--- zaya serve log (tail) ---\n${serverLog.slice(-4000)}`);
  await cleanup();
  process.exit(1);
}
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => fail(`interrupted (${sig})`));
const watchdog = setTimeout(() => fail(`the test took over ${DEADLINE_S} s`), DEADLINE_S * 1000);

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
function check(cond, msg) { if (!cond) throw new Error(msg); }

// --- the server -----------------------------------------------------------------------------------------
const API_KEY = "chat-page-test-key";
const TEXT = "The jury further said in term-end presentments that the City Executive Committee, which had " +
  "over-all charge of the election, deserves the praise and thanks of the City of Atlanta for the manner in " +
  "which the election was conducted. The September-October term jury had been charged by Fulton Superior " +
  "Court Judge Durwood Pye to investigate reports of possible irregularities in the hard-fought primary.\n";

async function startServer() {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), "zaya-chat-page-"));
  fs.writeFileSync(path.join(tmp, "text.txt"), TEXT + TEXT);
  const tok = path.join(tmp, "tokenizer.json");
  execFileSync(opts.zaya, ["tokenizer", "train", "--input", path.join(tmp, "text.txt"), "--vocab-size", "512",
    "--out", tok], { stdio: "pipe" });
  server = spawn(opts.zaya, ["serve", "--model", opts.model, "--tokenizer", tok, "--port", "0",
    "--api-key", API_KEY, "--parallel", "2", "--ctx-size", "8192"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS || "2" },
  });
  let port = null;
  const portSeen = new Promise((resolve, reject) => {
    const onData = (d) => {
      serverLog += d.toString();
      if (opts.showLog) process.stderr.write(d);
      const m = !port && serverLog.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { port = Number(m[1]); resolve(port); }
    };
    server.stdout.on("data", onData);
    server.stderr.on("data", onData);
    server.once("exit", (code, sig) => reject(new Error(`zaya serve exited (${code ?? sig}) before listening`)));
  });
  await Promise.race([portSeen, sleep(20000).then(() => { throw new Error("zaya serve printed no port in 20 s"); })]);
  server.on("exit", (code, sig) => { if (!cleaning) fail(`zaya serve exited unexpectedly (${code ?? sig})`); });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if ((await get(base + "/health")).status === 200) break;
    check(i < 300, "/health did not answer 200 within 30 s");
    await sleep(100);
  }
  return base;
}

// GET on a connection of its own, closed after the answer (an idle keep-alive connection would hold up the
// server's shutdown): {status, body}; status 0 when the server is not answering.
function get(url) {
  return new Promise((resolve) => {
    const req = http.get(url, { agent: false, timeout: 5000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode, body }));
      res.on("error", () => resolve({ status: 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => resolve({ status: 0, body: "" }));
  });
}

async function runningSequences(base) {
  const text = (await get(base + "/metrics")).body;
  const m = text.match(/^zaya_running_sequences (\S+)$/m);
  check(m, "/metrics has no zaya_running_sequences:\n" + text.slice(0, 2000));
  return Number(m[1]);
}

// --- the page ---------------------------------------------------------------------------------------------
async function setField(page, sel, value) {
  await page.click(sel);
  await page.keyboard.down("Control");
  await page.keyboard.press("KeyA");
  await page.keyboard.up("Control");
  await page.keyboard.press("Backspace");
  await page.keyboard.type(String(value));
  await page.keyboard.press("Tab");  // blur: the page sees a change event
}

// Types `text` into the message box (a "\n" as Shift+Enter, which must not send) and sends it with Enter.
async function sendMessage(page, text) {
  await page.click("#input");
  const lines = text.split("\n");
  for (let k = 0; k < lines.length; k++) {
    if (k) {
      await page.keyboard.down("Shift");
      await page.keyboard.press("Enter");
      await page.keyboard.up("Shift");
    }
    await page.keyboard.type(lines[k]);
  }
  check(await page.$eval("#input", (e) => e.value) === text, "the message box does not hold what was typed");
  await page.keyboard.press("Enter");
}

// The state of assistant message i (0-based).
function assistant(page, i) {
  return page.evaluate((i) => {
    const a = document.querySelectorAll(".msg.assistant")[i];
    if (!a) return null;
    return {
      reasoning: a.querySelector(".reasoning").textContent,
      reasoningShown: !a.querySelector(".thinking").hidden,
      content: a.querySelector(".content").textContent,
      stats: a.querySelector(".stats").textContent,
      error: a.querySelector(".error") ? a.querySelector(".error").textContent : "",
    };
  }, i);
}

async function waitAnswered(page, i, timeout = 30000) {
  try {
    await page.waitForFunction((i) => {
      const a = document.querySelectorAll(".msg.assistant")[i];
      return a && (a.querySelector(".stats").textContent !== "" || a.querySelector(".error"));
    }, { timeout, polling: "mutation" }, i);
  } catch (e) {
    const a = await assistant(page, i);
    throw new Error(`answer ${i} did not end (no usage line, no error) within ${timeout} ms: ` +
      JSON.stringify(a && { ...a, reasoning: a.reasoning.length + " chars", content: a.content.length + " chars" }));
  }
  return assistant(page, i);
}

// The text of assistant i's `field` (reasoning or content) at each mutation the page made before its stats
// line appeared: streaming means several distinct non-empty states, each extending the one before.
async function streamedStates(page, i, field) {
  const log = await page.evaluate(() => window.__states);
  const states = [];
  for (const e of log) {
    if (e.i !== i || e.stats !== "" || e[field] === "") continue;
    if (!states.length || states[states.length - 1] !== e[field]) states.push(e[field]);
  }
  for (let k = 1; k < states.length; k++)
    check(states[k].startsWith(states[k - 1]), `${field} of answer ${i} did not grow by appending: state ${k}`);
  return states;
}

async function main() {
  log(`zaya serve ${path.relative(ROOT, opts.model)} (--api-key set), chromium ${opts.chromium}`);
  const base = await startServer();
  log(`server ready at ${base}`);
  browser = await puppeteer.launch({
    executablePath: opts.chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  // The tab it opened with (a new one costs about a second).
  const page = (await browser.pages())[0] || await browser.newPage();
  log(`chromium ${await browser.version()} started`);
  const pageErrors = [], offOrigin = [], chatBodies = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("request", (req) => {
    if (!req.url().startsWith(base + "/") && !req.url().startsWith("data:")) offOrigin.push(req.url());
    if (req.method() === "POST" && req.url() === base + "/v1/chat/completions") {
      try {
        chatBodies.push(JSON.parse(req.postData()));
      } catch (e) {
        chatBodies.push({ unreadable: String(req.postData()) });
      }
    }
  });

  // The page needs no key; the API does, so the model name waits for one.
  const res = await page.goto(base + "/", { waitUntil: "load" });
  check(res.status() === 200, `GET / answered ${res.status()}`);
  await page.waitForFunction(() => document.getElementById("model").textContent.includes("API key"),
    { timeout: 10000 });
  await page.click("#settings summary");
  await setField(page, "#api-key", API_KEY);
  const modelName = path.basename(opts.model);
  await page.waitForFunction((n) => document.getElementById("model").textContent === n, { timeout: 10000 },
    modelName);
  log(`page loaded; model '${modelName}' listed once the API key was set`);
  check(await page.$eval("#thinking", (e) => e.checked), "thinking is not on by default");
  await page.evaluate(() => {
    window.__states = [];
    new MutationObserver(() => {
      const all = document.querySelectorAll(".msg.assistant");
      const a = all[all.length - 1];
      if (!a) return;
      window.__states.push({ i: all.length - 1, reasoning: a.querySelector(".reasoning").textContent,
        content: a.querySelector(".content").textContent, stats: a.querySelector(".stats").textContent });
    }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  });

  // 0. A server error is shown, and the failed turn is not part of the conversation.
  await setField(page, "#temperature", "3");
  await sendMessage(page, "Hello there");
  let a = await waitAnswered(page, 0);
  check(a.error.includes("'temperature' must be between 0 and 2"), `error not shown: ${JSON.stringify(a)}`);
  check(await page.$eval("#input", (e) => e.value) === "Hello there", "the failed message is not back in the box");
  await page.$eval("#input", (e) => { e.value = ""; });
  log(`a server error is shown: ${a.error}`);

  // 1. Thinking on: everything the untrained model writes is reasoning, streamed.
  await setField(page, "#temperature", "0");
  await setField(page, "#max-tokens", "1000");
  await sendMessage(page, "Hello\nthere");
  a = await waitAnswered(page, 1);
  check(!a.error, `answer 1 failed: ${a.error}`);
  check(a.reasoning.length > 0 && a.reasoningShown, `no reasoning shown: ${JSON.stringify(a)}`);
  check(a.content === "", `thinking on, yet content: ${JSON.stringify(a.content.slice(0, 200))}`);
  check(/^\d+ tokens · [\d.]+ tokens\/s · prompt \d+/.test(a.stats), `no usage line: '${a.stats}'`);
  let states = await streamedStates(page, 1, "reasoning");
  check(states.length >= 2, `reasoning did not stream: ${states.length} state(s) before the end`);
  check(states[states.length - 1].length <= a.reasoning.length, "reasoning shrank");
  let body = chatBodies[chatBodies.length - 1];
  check(body.stream === true && body.stream_options && body.stream_options.include_usage === true,
    `request not streamed with usage: ${JSON.stringify(body)}`);
  check(body.chat_template_kwargs && body.chat_template_kwargs.enable_thinking === true, "enable_thinking not sent");
  check(body.model === modelName && body.temperature === 0 && body.max_tokens === 1000,
    `settings not sent: ${JSON.stringify(body)}`);
  check(JSON.stringify(body.messages) === JSON.stringify([{ role: "user", content: "Hello\nthere" }]),
    `turn 1 messages: ${JSON.stringify(body.messages)}`);
  log(`turn 1 (thinking): ${states.length} streamed states, ${a.reasoning.length} chars of reasoning; ${a.stats}`);

  // 2. Thinking off: the text is the answer; the request holds both turns, after the system prompt.
  await page.click("#thinking");
  await setField(page, "#system", "You are terse.");
  await sendMessage(page, "And then?");
  a = await waitAnswered(page, 2);
  check(!a.error, `answer 2 failed: ${a.error}`);
  check(a.content.length > 0, `no content: ${JSON.stringify(a)}`);
  check(a.reasoning === "" && !a.reasoningShown, `thinking off, yet reasoning: ${JSON.stringify(a.reasoning)}`);
  check(/^\d+ tokens/.test(a.stats), `no usage line: '${a.stats}'`);
  states = await streamedStates(page, 2, "content");
  check(states.length >= 2, `content did not stream: ${states.length} state(s) before the end`);
  body = chatBodies[chatBodies.length - 1];
  check(body.chat_template_kwargs.enable_thinking === false, "enable_thinking=false not sent");
  const roles = body.messages.map((m) => m.role).join(",");
  check(roles === "system,user,assistant,user" && body.messages[0].content === "You are terse." &&
    body.messages[1].content === "Hello\nthere" && body.messages[3].content === "And then?",
    `turn 2 messages: ${JSON.stringify(body.messages)}`);
  log(`turn 2 (no thinking): ${states.length} streamed states, ${a.content.length} chars of content; ${a.stats}`);

  // 3. Stop: a long answer is aborted and the server frees the slot.
  await setField(page, "#max-tokens", "8000");
  await sendMessage(page, "Tell me everything.");
  await page.waitForFunction(() => {
    const a = document.querySelectorAll(".msg.assistant")[3];
    return a && a.querySelector(".content").textContent.length > 20;
  }, { timeout: 20000, polling: "mutation" });
  check(await runningSequences(base) === 1, "the long answer is not running on the server");
  await page.click("#stop");
  a = await waitAnswered(page, 3, 5000);
  check(a.stats.startsWith("stopped"), `not stopped: '${a.stats}'`);
  const tStop = Date.now();
  let running = 1;
  while (running !== 0 && Date.now() - tStop < 5000) {
    running = await runningSequences(base);
    if (running) await sleep(50);
  }
  check(running === 0, "the server still runs the stopped answer 5 s after Stop");
  const len = (await assistant(page, 3)).content.length;
  await sleep(300);
  check((await assistant(page, 3)).content.length === len, "the text grew after Stop");
  check(await page.$eval("#send", (e) => !e.disabled) && await page.$eval("#stop", (e) => e.disabled),
    "Send/Stop not reset after Stop");
  log(`Stop: ${len} chars shown, the server's slot free ${Date.now() - tStop} ms after Stop`);

  // 4. New chat: the page and the conversation start over; the server answers again.
  await page.click("#clear");
  check(await page.$$eval(".msg", (m) => m.length) === 0, "New chat left messages on the page");
  await setField(page, "#max-tokens", "8");
  await sendMessage(page, "Fresh start");
  a = await waitAnswered(page, 0);
  check(!a.error && /^\d+ tokens/.test(a.stats), `answer after New chat: ${JSON.stringify(a)}`);
  body = chatBodies[chatBodies.length - 1];
  check(body.messages.map((m) => m.role).join(",") === "system,user" && body.messages[1].content === "Fresh start",
    `messages after New chat: ${JSON.stringify(body.messages)}`);
  log(`New chat: a fresh conversation answered (${a.stats})`);

  check(pageErrors.length === 0, `the page threw: ${pageErrors.join("; ")}`);
  check(offOrigin.length === 0, `requests off the server's origin: ${offOrigin.join(", ")}`);
}

try {
  await main();
} catch (e) {
  await fail(e && e.stack ? e.stack : String(e));
}
clearTimeout(watchdog);
await cleanup();
log("PASS (browser closed, server stopped)");
process.exit(0);
