// Tool calls in real headless Chromium, with real MCP servers others wrote (PyPI
// mcp-server-time, npm server-everything) and the offline mirror model asking for calls:
// a card with arguments and result, approval (Approve and Deny), a result stubbed after its
// retention, and Stop during a slow call. On a phone-sized screen too.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, openChat, replyFinished, root, send, startParlor } from './harness.mjs';

const python = join(root, '.tools', 'venv', 'bin', 'python');
const everything = join(root, 'end2end', 'node_modules', '.bin', 'mcp-server-everything');
const timeServer = `command = ${JSON.stringify(python)}
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]`;

const config = `
[[mcp_servers]]
id = "clock"
${timeServer}
save = 1

[[mcp_servers]]
id = "guarded"
${timeServer}
confirm = "always"

[[mcp_servers]]
id = "slow"
command = ${JSON.stringify(everything)}
args = ["stdio"]
timeout_secs = 120
allow = ["trigger-long-running-operation"]
`;

const ASK_TIME = '/tool clock__get_current_time {"timezone": "UTC"}';

const cards = (page) => page.locator('.transcript > article.message.tool .tool-card');

describe('tool calls', () => {
  let parlor, browser, dir;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'parlor-tools-'));
    writeFileSync(join(dir, 'parlor.toml'), config);
    mkdirSync(join(dir, 'agents', 'timekeeper'), { recursive: true });
    writeFileSync(join(dir, 'agents', 'timekeeper', 'template.json'), JSON.stringify({
      agentId: 'timekeeper',
      name: 'Timekeeper',
      description: 'Tells the time with tools.',
      personality: 'You tell the time.',
      chatSettings: { tools: ['clock', 'guarded', 'slow'], historyPolicy: 'all' },
    }));
    parlor = await startParlor({
      PARLOR_CONFIG: join(dir, 'parlor.toml'),
      PARLOR_AGENTS_DIR: join(dir, 'agents'),
      PARLOR_MIRROR_DELAY_MS: '2',
      PARLOR_ADMIN_TOKEN: 'tools-admin',
    });
    // Every tool server started (the details of readiness are the admin's).
    for (let i = 0; i < 300; i++) {
      const ready = await (await fetch(`${parlor.url}/readyz`, {
        headers: { 'x-parlor-admin-token': 'tools-admin' },
      })).json();
      const states = Object.values(ready.tool_servers ?? {});
      if (states.length === 3 && states.every((s) => s.startsWith('ready'))) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a call shows as a card with its arguments and result, also at 375 px', async () => {
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=timekeeper`,
      { width: 375, height: 740 });
    await send(page, ASK_TIME);
    await replyFinished(page);
    const card = cards(page).first();
    assert.match(await card.locator('summary').innerText(), /^clock__get_current_time · \d+ ms · \d+ bytes$/);
    await card.locator('summary').click();
    assert.match(await card.locator('.tool-arguments pre').innerText(), /"timezone": "UTC"/);
    assert.match(await card.locator('.tool-result pre').innerText(), /UTC/);
    // The mirror's second call received the result.
    const reply = page.locator('.transcript > article.message.assistant').last();
    assert.match(await reply.innerText(), /result of “clock__get_current_time” \(ok\)/);
    // Nothing wider than the screen.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow} px wider than the screen`);
    await page.screenshot({ path: '/tmp/parlor-tool-card-375.png', fullPage: true });
    // A reload shows the stored card the same way.
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.match(await cards(page).first().locator('summary').innerText(), /^clock__get_current_time · /);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('a call that asks for approval runs when approved and not when denied', async () => {
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=timekeeper`);
    await send(page, '/tool guarded__get_current_time {"timezone": "Europe/Paris"}');
    const waiting = page.locator('.tool-card.waiting');
    await waiting.locator('button.approve').waitFor();
    assert.equal(await waiting.locator('button.approve').innerText(), 'Allow once');
    await page.screenshot({ path: '/tmp/parlor-approval.png' });
    await waiting.locator('button.approve').click();
    await replyFinished(page);
    const approved = cards(page).last();
    assert.match(await approved.locator('summary').innerText(), /ms · \d+ bytes/);
    await send(page, '/tool guarded__get_current_time {"timezone": "Asia/Tokyo"}');
    await page.locator('.tool-card.waiting button.deny').click();
    await replyFinished(page);
    const denied = cards(page).last();
    assert.match(await denied.locator('summary').innerText(), /error/);
    await denied.locator('summary').click();
    assert.match(await denied.locator('.tool-result pre').innerText(), /denied/);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('a result kept for one turn is shown as removed afterwards', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=timekeeper`);
    await send(page, ASK_TIME);
    await replyFinished(page);
    for (const text of ['thanks', 'one more']) {
      await send(page, text);
      await replyFinished(page);
    }
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    const card = cards(page).first();
    assert.match(await card.locator('summary').innerText(), /result removed/);
    await card.locator('summary').click();
    assert.match(await card.locator('.tool-result pre').innerText(),
      /\[result of clock__get_current_time removed after 1 turn: [\d,]+ bytes\]/);
    await context.close();
  });

  test('Stop during a slow call cancels it; the stored card says so', async () => {
    const { page, context } = await openChat(browser, `${parlor.url}/chat?agent=timekeeper`);
    const started = Date.now();
    await send(page, '/tool slow__trigger-long-running-operation {"duration": 60, "steps": 6}');
    await page.locator('.tool-card.running').waitFor();
    await page.click('button.stop');
    // The turn ends at once; the stored exchange pairs the call with a cancelled result.
    await page.waitForSelector('button.stop', { state: 'detached' });
    let text = '';
    for (let i = 0; i < 50 && !/cancelled/.test(text); i++) {
      await new Promise((r) => setTimeout(r, 200));
      await page.reload();
      await page.waitForSelector('body[data-hydrated]');
      const card = cards(page).last();
      await card.locator('summary').click();
      text = await card.locator('.tool-result pre').innerText().catch(() => '');
    }
    assert.match(text, /cancelled: the user stopped the turn/);
    assert.ok(Date.now() - started < 30000, 'stopped long before the operation would end');
    await context.close();
  });
});
