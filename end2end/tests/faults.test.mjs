// Forged cookies against the session limit: a thousand made-up `parlor_session` values across
// pages, unknown paths and the chat API take no slot; a real browser still gets in and chats.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { launchBrowser, lastReply, openChat, replyFinished, send, startParlor } from './harness.mjs';

describe('forged cookies', () => {
  let parlor, browser, dir;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'parlor-faults-'));
    const config = join(dir, 'parlor.toml');
    writeFileSync(config, 'max_users = 2\n');
    parlor = await startParlor({
      PARLOR_MIRROR_DELAY_MS: '1',
      PARLOR_CONFIG: config,
      PARLOR_RATE_LIMIT_PAGES: '0',
      PARLOR_RATE_LIMIT_CHAT: '0',
      // The forgers and the real browser all come from loopback, and the forgers leave their
      // answers unread (each holds its connection): this is about session slots, not the
      // connections one address may hold (faults.rs tests those).
      PARLOR_MAX_CONNECTIONS_PER_ADDRESS: '0',
    });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await parlor?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a thousand forged cookies never lock a real browser out', async () => {
    const hex = (n) => n.toString(16).padStart(8, '0').repeat(4);
    for (let batch = 0; batch < 10; batch++) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => {
        const n = batch * 100 + i;
        const id = hex(0x9e3779b1 * (n + 1) >>> 0);
        const cookie = `parlor_session=${n % 2 ? id : `${id}.${'0'.repeat(32)}`}`;
        const headers = { cookie };
        switch (n % 3) {
          case 0: return fetch(`${parlor.url}/`, { headers });
          case 1: return fetch(`${parlor.url}/nowhere-${n}`, { headers });
          default: return fetch(`${parlor.url}/api/chat/general`, {
            method: 'POST',
            headers: { ...headers, 'content-type': 'application/json' },
            body: JSON.stringify({ message: 'let me in' }),
          });
        }
      }));
    }
    // A real browser: its first visit, a reload (now with its cookie), and a chat.
    const { page, context, errors } = await openChat(browser, `${parlor.url}/chat?agent=general`);
    await page.reload();
    await page.waitForSelector('body[data-hydrated]', { timeout: 30000 });
    assert.doesNotMatch(await page.content(), /Parlor is full/);
    await send(page, 'Hello after the flood');
    await replyFinished(page);
    assert.match(await lastReply(page).innerText(), /Hello after the flood/);
    assert.deepEqual(errors, []);
    await context.close();
  });
});
