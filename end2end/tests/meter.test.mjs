// The context meter in real headless Chromium: the header's numbers are the turn's `meta`
// and `done` events', the breakdown and cost open from it, it turns yellow near the limit
// naming what goes next, and with the debug panel each message shows its tokens.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { openChat, replyFinished, withUpstream } from './harness.mjs';

const config = join(mkdtempSync(join(tmpdir(), 'parlor-meter-')), 'parlor.toml');
writeFileSync(config, `
[[models]]
name = "quick"
model = "gpt-4o-mini"
context_tokens = 1000
price_in = 0.15
price_out = 0.60

[[models]]
name = "tiny"
model = "local-tiny"
context_tokens = 200
`);

/** `12,345`, as the page groups digits. */
const group = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');

/** The events of a chat response's body. */
function events(body) {
  return body.split('\n\n')
    .map((frame) => frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n'))
    .filter(Boolean)
    .map((data) => JSON.parse(data));
}

/** Sends `text` and returns the turn's events once the reply is complete. */
async function turn(page, text) {
  const response = page.waitForResponse((r) => r.url().includes('/api/chat/') && r.request().method() === 'POST');
  await page.fill('textarea[name=message]', text);
  await page.press('textarea[name=message]', 'Enter');
  const body = await (await response).text();
  await replyFinished(page);
  const all = events(body);
  return { meta: all.find((e) => e.type === 'meta'), done: all.find((e) => e.type === 'done') };
}

describe('context meter', () => {
  const suite = withUpstream({ PARLOR_CONFIG: config, PARLOR_MODEL: 'quick', DEFAULT_HISTORY_POLICY: 'all' });

  test('the header shows the numbers of the turn, part by part, with the cost', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=concise`);
    assert.equal(await page.locator('.meter').isVisible(), false, 'no call yet, no meter');
    const first = await turn(page, 'hello meter');
    const second = await turn(page, 'and once more');
    const { meta, done } = second;
    const meter = done.meter;
    assert.ok(meter.reported, 'the fake upstream reports usage');
    assert.equal(await page.locator('.meter-headline').innerText(), `${group(meter.sent)} / 1,000 tokens`);
    assert.equal(await page.locator('.meter').getAttribute('data-sent'), String(meter.sent));

    // The bar shows each part in proportion to the window.
    const bar = await page.locator('.meter-bar').boundingBox();
    const history = await page.locator('.meter .seg-history').boundingBox();
    const expected = (bar.width * meter.sent * meta.meter.parts.history) / (1000 * Object.values(meta.meter.parts).reduce((a, b) => a + b, 0));
    assert.ok(Math.abs(history.width - expected) <= 1.5, `history segment ${history.width}px, expected ${expected}px`);

    await page.locator('.meter summary').click();
    for (const part of ['system', 'summary', 'history', 'context', 'message']) {
      assert.equal(await page.locator(`.meter-details dd[data-part=${part}]`).innerText(), group(meta.meter.parts[part]), part);
    }
    assert.equal(await page.locator('.meter-source').innerText(), 'reported by the provider');
    assert.equal(await page.locator('.meter-completion').innerText(), `${group(done.usage.completion_tokens)} tokens`);
    const usd = async (selector) => Number((await page.locator(selector).innerText()).replace(/^\$/, ''));
    const turnUsd = await usd('.meter-cost-turn');
    const conversationUsd = await usd('.meter-cost-conversation');
    const cost = `${turnUsd} / ${conversationUsd}`;
    const spent = first.done.meter.cost.turn_nano_usd + meter.cost.turn_nano_usd;
    assert.equal(meter.cost.conversation_nano_usd, spent);
    // Shown with three significant digits (cut, not rounded).
    const close = (shown, nanos) => shown <= nanos / 1e9 && shown >= (nanos / 1e9) * 0.99;
    assert.ok(close(turnUsd, meter.cost.turn_nano_usd), cost);
    assert.ok(close(conversationUsd, spent), cost);
    await page.screenshot({ path: '/tmp/parlor-meter.png' });

    // A reload shows the same meter (kept with the conversation); with the debug panel every
    // message shows its tokens, the turn's as its events said.
    await page.goto(`${page.url()}&debug=true`);
    await page.waitForSelector('body[data-hydrated]');
    assert.equal(await page.locator('.meter').getAttribute('data-sent'), String(meter.sent));
    const tags = await page.locator('.tokens-tag').allInnerTexts();
    assert.equal(tags.length, 4, tags.join(' | '));
    assert.equal(tags[2], `${group(meta.message_tokens)} tokens`);
    assert.equal(tags[3], `${group(done.message_tokens)} tokens`);
    // A live turn adds its messages' counts at once.
    const third = await turn(page, 'a third question');
    const live = await page.locator('.tokens-tag').allInnerTexts();
    assert.deepEqual(live.slice(4), [`${group(third.meta.message_tokens)} tokens`, `${group(third.done.message_tokens)} tokens`]);
    assert.deepEqual(errors, []);
    await context.close();
  });

  test('near the limit it turns yellow and names what goes next, at 375 px too', async () => {
    const { page, context, errors } = await openChat(suite.browser, `${suite.parlor.url}/chat?agent=concise`, { width: 375, height: 740 });
    await page.fill('textarea[name=message]', '!model tiny');
    await page.press('textarea[name=message]', 'Enter');
    await page.waitForSelector('.command-notice');
    let last;
    for (let i = 0; i < 12; i++) {
      last = await turn(page, i === 0 ? 'the very first question' : `question ${i} with a few words`);
      if (last.meta.meter.near_limit) break;
    }
    assert.ok(last.meta.meter.near_limit, JSON.stringify(last.meta.meter));
    await page.waitForSelector('.meter.near');
    assert.match(await page.locator('.meter-warning').innerText(), /“the very first question” is the next to be left out/);
    const color = await page.locator('.meter.near .seg-history').evaluate((el) => getComputedStyle(el).fill);
    assert.equal(color, 'rgb(234, 179, 8)', 'yellow');
    // Over the window, the bar is full.
    const full = await page.locator('.meter-bar').boundingBox();
    const drawn = await page.locator('.meter .seg').evaluateAll((rects) => rects.reduce((sum, r) => sum + r.getBoundingClientRect().width, 0));
    if (last.done.meter.sent >= 200) assert.ok(Math.abs(drawn - full.width) <= 1, `${drawn} of ${full.width}px drawn`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(overflow, false, 'no sideways scrolling');
    await page.locator('.meter summary').click();
    await page.screenshot({ path: '/tmp/parlor-meter-375.png' });
    assert.deepEqual(errors, []);
    await context.close();
  });
});
