// The rolling summary in the browser: with the summary processor, what falls out of the
// window is summarized in the background, the debug panel shows it (its text on demand),
// and the transcript marks where the summarized part ends.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, openChat, replyFinished, send, startParlor } from './harness.mjs';

describe('rolling summary', () => {
  let parlor, browser, dir;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'parlor-summary-'));
    const config = join(dir, 'parlor.toml');
    writeFileSync(config, '[history]\nchain = ["sliding_window", "summary"]\n');
    parlor = await startParlor({ PARLOR_MIRROR_DELAY_MS: '1', PARLOR_CONFIG: config });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('what the window leaves out is summarized, shown in the panel and marked in the transcript', async () => {
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=concise&debug=true`);
    // `concise` sends the last two turns: the first falls out on the third.
    for (const text of ['Rust is my language. Noted?', 'I deploy on Mondays.', 'Third turn.']) {
      await send(page, text);
      await replyFinished(page);
    }
    // The background run after the third reply covers the first turn (wait for its file);
    // the next turn sends it.
    const session = new URL(page.url()).searchParams.get('session');
    const summaryFile = join(parlor.data, '.chat-history', session, 'summary.json');
    for (let i = 0; i < 200 && !existsSync(summaryFile); i++) {
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.ok(existsSync(summaryFile), 'the summary was written in the background');
    await send(page, 'Fourth turn.');
    await replyFinished(page);
    const fact = page.locator('[data-fact=summary]');
    await fact.waitFor();
    assert.match(await fact.innerText(), /sent in place of what was left out · covers 2 messages · \d+ tokens · updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    await fact.locator('details summary').click();
    assert.match(await fact.locator('pre').innerText(), /"facts":\["Rust is my language\."\]/);
    // The marker follows the second stored message (the first turn's reply).
    const marker = page.locator('.summarized-marker');
    await marker.waitFor();
    const before = await page.$$eval('.transcript > *', (nodes) =>
      nodes.findIndex((n) => n.classList.contains('summarized-marker')));
    assert.equal(before, 2, 'after the first user message and its reply');
    assert.deepEqual(errors, []);
    await context.close();
  });
});
