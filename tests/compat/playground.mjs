// The web playground (/playground) in a real headless Chromium, driven by Playwright: send a
// message and watch the reply stream, stop a slow reply, reload in the middle of one and see it
// resume, edit a message and switch between its versions with the `< n / m >` picker, approve
// a tool call and answer a client tool.
//
// Usage: node playground.mjs <baseUrl> <conversation> [screenshot.png]
// Prints one JSON line; exits 0 on success, 1 on failure (with "reason").

import { chromium } from "playwright-core";

const SLOW_TEXT = Array.from({ length: 50 }, (_, i) => `s${String(i).padStart(2, "0")} `).join("");
const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];
const T0 = Date.now();

class Failure extends Error {}

function check(condition, reason, details) {
  if (!condition) throw Object.assign(new Failure(reason), { details });
}

async function main() {
  const [base, name, screenshot] = process.argv.slice(2);
  const out = { ok: false, steps: [] };
  const step = (what) => out.steps.push(`${Date.now() - T0}ms ${what}`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  const consoleErrors = [];
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
  try {
    const messages = page.getByTestId("message");
    const texts = async () => messages.getByTestId("text").allInnerTexts();
    const lastText = () => messages.last().getByTestId("text");
    const timeout = { timeout: 20_000 };

    await page.goto(`${base}/playground?name=${encodeURIComponent(name)}`);
    await page.getByTestId("connection").getByText("connected").waitFor(timeout);
    step("connected");

    // 1. A message, and its reply streaming in.
    await page.getByTestId("input").fill("hello there");
    await page.getByTestId("send").click();
    await lastText().getByText("echo: hello there", { exact: true }).waitFor(timeout);
    await page.getByTestId("status").getByText("ready").waitFor(timeout);
    check((await texts()).join("|") === "hello there|echo: hello there", "the first reply is not shown", { texts: await texts() });
    step("streamed a reply");

    // 2. Stop a slow reply while it streams: it ends early and its partial stays.
    await page.getByTestId("input").fill("slow");
    await page.getByTestId("send").click();
    await lastText().getByText("s04", { exact: false }).waitFor(timeout);
    await page.getByTestId("status").getByText("streaming").waitFor(timeout);
    await page.getByTestId("stop").click();
    await page.getByTestId("status").getByText("ready").waitFor(timeout);
    const stopped = await lastText().innerText();
    check(stopped.length > 0 && SLOW_TEXT.startsWith(stopped.trim()) && stopped.trim() !== SLOW_TEXT.trim(), "the stopped reply is not a partial", { stopped });
    await page.waitForTimeout(500);
    check((await lastText().innerText()) === stopped, "the stopped reply went on growing");
    step(`stopped a slow reply after ${stopped.length} characters`);

    // 3. Reload in the middle of a reply: the page resumes it to its end.
    await page.getByTestId("input").fill("slow again");
    await page.getByTestId("send").click();
    await lastText().getByText("s04", { exact: false }).waitFor(timeout);
    await page.reload();
    await page.getByTestId("connection").getByText("connected").waitFor(timeout);
    await page.waitForFunction(
      (full) => {
        const all = [...document.querySelectorAll('[data-testid="message"] [data-testid="text"]')];
        return all.length === 6 && all[5].innerText.trim() === full.trim();
      },
      SLOW_TEXT,
      { timeout: 30_000 },
    );
    check((await texts())[4] === "slow again", "the reloaded page does not show the message before the resumed reply", { texts: await texts() });
    step("resumed a reply after a reload");

    // 4. Edit the first message: the reply is answered again where the page is (main), and the
    // picker switches between the two versions.
    await messages.first().getByTestId("edit").click();
    await page.getByTestId("edit-input").fill("hello, edited");
    await page.getByTestId("edit-save").click();
    await page.waitForFunction(
      () => {
        const all = [...document.querySelectorAll('[data-testid="message"] [data-testid="text"]')].map((e) => e.innerText);
        return all.length === 2 && all[0] === "hello, edited" && all[1] === "echo: hello, edited";
      },
      null,
      timeout,
    );
    const first = messages.first().getByTestId("position");
    await first.getByText("2 / 2").waitFor(timeout);
    step("edited a message (2 / 2)");

    await messages.first().getByTestId("prev").click();
    await page.getByTestId("branch").getByText("branch: main").waitFor({ state: "detached", ...timeout });
    await messages.first().getByTestId("position").getByText("1 / 2").waitFor(timeout);
    const old = await texts();
    check(old.length === 6 && old[0] === "hello there" && old[5].trim() === SLOW_TEXT.trim(), "1 / 2 does not show the original conversation", { old });
    check(new URL(page.url()).searchParams.get("branch"), "the branch is not in the page's URL", { url: page.url() });
    step("switched to 1 / 2");
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

    await messages.first().getByTestId("next").click();
    await page.getByTestId("branch").getByText("branch: main").waitFor(timeout);
    await messages.first().getByTestId("position").getByText("2 / 2").waitFor(timeout);
    check((await texts()).join("|") === "hello, edited|echo: hello, edited", "2 / 2 does not show the edit", { texts: await texts() });
    step("switched back to 2 / 2");

    // A reload without a branch shows what the page showed: the edit.
    await page.goto(`${base}/playground?name=${encodeURIComponent(name)}`);
    await messages.first().getByTestId("text").getByText("hello, edited", { exact: true }).waitFor(timeout);
    // 5. Tools in another conversation: approve a payment, answer a client tool.
    await page.goto(`${base}/playground?name=${encodeURIComponent(`${name}-tools`)}`);
    await page.getByTestId("connection").getByText("connected").waitFor(timeout);
    await page.getByTestId("input").fill("approve:bob");
    await page.getByTestId("send").click();
    await page.getByTestId("approve").click(timeout);
    await lastText().getByText('tool result: {"ok":true,"amount":42,"recipient":"bob"}', { exact: true }).waitFor(timeout);
    await page.getByTestId("status").getByText("ready").waitFor(timeout);
    step("approved a tool call");
    await page.getByTestId("input").fill("client-tool:");
    await page.getByTestId("send").click();
    await page.getByTestId("tool-answer").click(timeout);
    await lastText().getByText('tool result: {"lat":48.85,"lon":2.35}', { exact: true }).waitFor(timeout);
    step("answered a client tool");

    check(consoleErrors.length === 0, "the page threw errors", { consoleErrors });
    out.ok = true;
  } catch (error) {
    out.reason = error instanceof Failure ? error.message : `driver error: ${error?.stack ?? error}`;
    out.details = error?.details;
    out.consoleErrors = consoleErrors;
    try {
      out.page = (await page.locator("body").innerText()).slice(0, 3000);
      if (screenshot) await page.screenshot({ path: screenshot.replace(/\.png$/, "-failure.png"), fullPage: true });
    } catch {
      /* the page is gone */
    }
  } finally {
    await browser.close();
  }
  out.ms = Date.now() - T0;
  process.stdout.write(`${JSON.stringify(out)}\n`, () => process.exit(out.ok ? 0 : 1));
}

main();
