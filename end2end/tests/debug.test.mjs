// The ?debug=true panel in the browser: sources, live updates, and "not sent" marks.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openChat, replyFinished, send, withUpstream } from './harness.mjs';

describe('the debug panel', () => {
  const suite = withUpstream();

  const fact = (page, name) => page.locator(`[data-fact="${name}"]`).innerText();

  test('shows sources, updates live after every turn, and marks what was not sent', async () => {
    const { page, context } = await openChat(suite.browser,
      `${suite.parlor.url}/chat?agent=general&debug=true&historyLength=1&historyPolicy=sometimes`);
    const panel = page.locator('.debug-panel');
    await panel.waitFor();
    assert.match(await fact(page, 'policy'), /^lastN\s+template$/);
    assert.match(await fact(page, 'length'), /^1\s+URL$/);
    assert.match(await panel.innerText(), /URL historyPolicy=sometimes ignored/);
    assert.equal(await fact(page, 'sent'), 'nothing sent yet');

    await send(page, 'first');
    await replyFinished(page);
    // "Messages" counts the conversation as shown (the reply included); "Stored then" is what
    // the store held when the turn was planned (the new message, not yet its reply).
    assert.equal(await fact(page, 'messages'), '2 messages');
    assert.equal(await fact(page, 'stored'), '1 message');
    assert.equal(await fact(page, 'trimmed'), '0 messages');
    assert.match(await fact(page, 'tokens'), /reported by the model/);
    await send(page, 'second');
    await replyFinished(page);
    // Live, without a reload: the second turn sent the system prompt and "second" only.
    assert.equal(await fact(page, 'messages'), '4 messages');
    assert.equal(await fact(page, 'stored'), '3 messages');
    assert.match(await fact(page, 'sent'), /^2 messages/);
    assert.equal(await fact(page, 'trimmed'), '2 messages');
    assert.equal(await page.locator('.message.not-sent').count(), 2);
    assert.equal(await page.locator('.not-sent-tag').count(), 2);
    assert.match(await fact(page, 'session'), /^[0-9a-f]{8}…$/);
    // Why the request no longer starts as the last one did: lastN (1) let "first" go.
    assert.equal(await fact(page, 'prefix-change'), 'the history policy left out 1 older message(s)');
    // No cache reported by the upstream yet: no cache line.
    assert.equal(await page.locator('[data-fact="cache"]').count(), 0);

    // After a reload the panel shows the same last turn.
    await page.reload();
    await page.waitForSelector('body[data-hydrated]');
    assert.match(await fact(page, 'sent'), /^2 messages/);
    assert.equal(await fact(page, 'messages'), '4 messages');
    assert.equal(await page.locator('.message.not-sent').count(), 2);

    // An upstream that reports cached prompt tokens (the fake's [cached]: half the prompt):
    // the panel says how the cache served the call, live.
    await send(page, '[cached] third');
    await replyFinished(page);
    const cache = await fact(page, 'cache');
    const [, read, written, fresh, percent] =
      cache.match(/^(\d+) read, (\d+) written, (\d+) fresh \((\d+)% read from the cache\)$/) ?? [];
    assert.ok(Number(read) > 0 && Number(fresh) > 0, cache);
    assert.equal(Number(written), 0, cache);
    assert.ok(Math.abs(Number(percent) - 50) <= 1, cache);
    await context.close();
  });

  test('fits a 375 px screen below the chat', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general&debug=true`, { width: 375, height: 740 });
    await send(page, 'small screen');
    await replyFinished(page);
    const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `page scrolls sideways by ${overflow}px`);
    const composer = await page.locator('textarea[name=message]').boundingBox();
    const panel = await page.locator('.debug-panel').boundingBox();
    assert.ok(composer.y + composer.height <= panel.y, 'the composer stays above the panel');
    assert.ok(panel.y < 740, 'the panel is on screen');
    await context.close();
  });

  test('is absent without ?debug=true', async () => {
    const { page, context } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=general`);
    await send(page, 'hello');
    await replyFinished(page);
    await send(page, 'again');
    await replyFinished(page);
    assert.equal(await page.locator('.debug-panel').count(), 0);
    assert.equal(await page.locator('.not-sent-tag').count(), 0);
    await context.close();
  });
});
